#!/usr/bin/env python3
"""The main job: nimbus daemon + word count on local Spark, shown as it runs.

Runs the same commands a user would, as child processes: ``nimbus-thrift nimbus``
(port chosen by the OS, state in ``.run/nimbus``), ``nimbus-thrift submit
examples/wordcount.py --wait``, then prints the ten most frequent words from the
topology's SQLite sink every few seconds and ``nimbus-thrift info`` once. On Ctrl-C,
SIGTERM or after ``--for`` seconds it runs ``nimbus-thrift kill wordcount -w 0``, waits
until the topology is gone and stops the daemon.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLI = [str(Path(sys.executable).with_name("nimbus-thrift"))]


class Stop(Exception):
    pass


def _on_signal(signum: int, frame: object) -> None:
    raise Stop()


def start_daemon(run_dir: Path) -> tuple[subprocess.Popen[str], int, str]:
    # The web page on any free port: 8080, the default, may be taken on this machine.
    daemon = subprocess.Popen(
        CLI + ["nimbus", "--port", "0", "--ui-port", "-1", "--data-dir", str(run_dir / "nimbus"),
               "--log-format", "console"],
        stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert daemon.stderr is not None
    port, url = 0, ""
    log = (run_dir / "nimbus.log").open("a")
    for line in daemon.stderr:
        log.write(line)
        match = re.match(r"nimbus listening on [^:]+:(\d+)", line)
        if match:
            port = int(match.group(1))
        match = re.match(r"web UI, REST API and /metrics at (\S+)", line)
        if match:
            url = match.group(1)
            break
    if not port or not url:
        raise SystemExit(f"nimbus did not start; see {run_dir / 'nimbus.log'}")

    def drain() -> None:                      # keep the daemon's log flowing to a file
        for line in daemon.stderr:            # type: ignore[union-attr]
            log.write(line)
            log.flush()
    threading.Thread(target=drain, daemon=True).start()
    return daemon, port, url


def top_words(db: Path, n: int = 10) -> list[tuple[str, int]]:
    try:
        with sqlite3.connect(db, timeout=5) as conn:
            return list(conn.execute(
                "SELECT word, count FROM counts ORDER BY count DESC, word LIMIT ?", (n,)))
    except sqlite3.Error:
        return []


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--for", dest="seconds", type=float, default=0,
                        help="stop after this many seconds of results (default: Ctrl-C)")
    parser.add_argument("--rate", type=int, default=2000,
                        help="sentences per second per spout task (default 2000)")
    parser.add_argument("--run-dir", type=Path, default=ROOT / ".run")
    args = parser.parse_args()
    args.run_dir.mkdir(parents=True, exist_ok=True)
    db = args.run_dir / "wordcount.sqlite"
    db.unlink(missing_ok=True)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    daemon, port, url = start_daemon(args.run_dir)
    env = {**os.environ, "NIMBUS_THRIFT_PORT": str(port)}
    print(f"nimbus is listening on 127.0.0.1:{port} (log: {args.run_dir / 'nimbus.log'})",
          flush=True)
    print(f"its web page: {url}", flush=True)
    submitted = False
    try:
        subprocess.run(CLI + ["submit", str(ROOT / "examples" / "wordcount.py"),
                              "--conf", f"wordcount.db={db}",
                              "--conf", f"wordcount.rate={args.rate}", "--wait"],
                       env=env, check=True)
        submitted = True
        t0 = time.monotonic()
        shown_info = False
        while not args.seconds or time.monotonic() - t0 < args.seconds:
            words = top_words(db)
            if words:
                if not shown_info:
                    subprocess.run(CLI + ["info", "wordcount"], env=env, check=False)
                    shown_info = True
                print("top words: " + ", ".join(f"{w} {c}" for w, c in words), flush=True)
            time.sleep(5)
        return 0
    except Stop:
        return 0
    except subprocess.CalledProcessError as exc:
        return exc.returncode
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if submitted:
            print("killing the topology ...", flush=True)
            subprocess.run(CLI + ["kill", "wordcount", "-w", "0"], env=env, check=False)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                listed = subprocess.run(CLI + ["list", "--json"], env=env, text=True,
                                        capture_output=True, check=False)
                if '"wordcount"' not in listed.stdout:
                    break
                time.sleep(1)
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(60)
        print("nimbus stopped", flush=True)


if __name__ == "__main__":
    sys.exit(main())
