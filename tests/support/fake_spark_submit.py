"""A stand-in for ``spark-submit ... spark_main.py --workdir W`` in the launcher tests.

Run as ``python fake_spark_submit.py <spark-submit arguments>`` (the launcher's
``spark_submit`` setting). Like the real driver it writes ``W/status.json`` about
twenty times a second (the real one: twice), obeys ``W/control`` (``active``,
``paused``, ``stop``) and stops on SIGTERM. Like Spark it has descendants: one in its
process group and one in a process group of its own (as ``pyspark.daemon`` makes), both
exiting when it does, as Spark's workers do when their socket closes.

What it does is set by ``W/fake.json`` (read at start; every key optional)::

    gate_start      wait for the file W/fake.go-start before the first status
    gate_run        stay "starting" until the file W/fake.go-run exists
    crash_after     crash after this many batches ...
    crash_runs      ... in only the first this many starts (default: every start)
    crash_mode      ... "status" (a failed status.json first) or "silent" (just exit)
    exit_code       of the crash (default 1)
    ignore_stop     ignore control=stop and SIGTERM (only SIGKILL ends it)
    finish_after    report "finished" after this many batches and exit 0

Each start appends its arguments, its Spark settings (``--properties-file`` and
``--conf``) and a few environment variables to ``W/fake_invocations.jsonl``; descendants' pids go to ``W/fake_children.json``.
Standard library only.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

BATCH_SECS = 0.05

# Exits when its parent does: the parent's pid is passed, not read, so a child that
# starts after the parent died exits at once.
CHILD = """
import os, sys, time
own_group = sys.argv[2] == "group"
if own_group:
    os.setpgid(0, 0)
parent = int(sys.argv[1])
while os.getppid() == parent:
    time.sleep(0.02)
"""


def arg(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def unescape(text: str) -> str:
    """A key or value of the launcher's properties file (one ``key=value`` a line,
    Java's escapes; see nimbus/spark/properties.py)."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text):
            c = text[i + 1]
            if c == "u":
                out.append(chr(int(text[i + 2:i + 6], 16)))
                i += 6
                continue
            out.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(c, c))
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out).encode("utf-16-be", "surrogatepass").decode("utf-16-be")


def confs(argv: list[str]) -> dict[str, str]:
    """The Spark settings of a start: its ``--properties-file``, then its ``--conf``."""
    out = {}
    if "--properties-file" in argv:
        for line in Path(arg(argv, "--properties-file")).read_text().splitlines():
            cut = next(i for i, c in enumerate(line)
                       if c == "=" and (len(line[:i]) - len(line[:i].rstrip("\\"))) % 2 == 0)
            out[unescape(line[:cut])] = unescape(line[cut + 1:])
    for i, a in enumerate(argv):
        if a == "--conf":
            key, _, value = argv[i + 1].partition("=")
            out[key] = value
    return out


def write_json(path: Path, data: object) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.fake")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    work = Path(arg(argv, "--workdir"))
    behaviour = json.loads((work / "fake.json").read_text()) \
        if (work / "fake.json").exists() else {}
    log = work / "fake_invocations.jsonl"
    settings = confs(argv)
    with open(log, "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "argv": argv, "confs": settings, "env": {
            k: os.environ.get(k) for k in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON",
                                           "SPARK_HOME", "SPARK_LOCAL_IP", "PYTHONPATH")},
            "cwd": os.getcwd(), "sid": os.getsid(0), "pgid": os.getpgid(0)}) + "\n")

    run_number = len(log.read_text().splitlines())
    stop_requested = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stop_requested
        stop_requested = True

    ignore_stop = bool(behaviour.get("ignore_stop"))
    signal.signal(signal.SIGTERM, signal.SIG_IGN if ignore_stop else on_term)

    children = [subprocess.Popen([sys.executable, "-c", CHILD, str(os.getpid()), kind])
                for kind in ("same", "group")]
    write_json(work / "fake_children.json", [c.pid for c in children])

    spec = json.loads((work / "spec.json").read_text())
    components = sorted(spec["components"])
    port = settings.get("spark.ui.port", "4040")
    ui = settings.get("spark.ui.enabled", "true") == "true"    # Spark's default: on
    started = time.time()
    status = {"state": "starting", "pid": os.getpid(), "updated_at": started,
              "started_at": started, "app_id": f"local-{int(started * 1000)}",
              "ui_url": f"http://127.0.0.1:{port}" if ui else "", "batch_id": -1,
              "batch_ms": 0.0,
              "components": {}, "error": "", "error_component": ""}

    def publish(**changes: object) -> None:
        status.update(changes, updated_at=time.time())
        write_json(work / "status.json", status)

    def control() -> str:
        try:
            return (work / "control").read_text().strip()
        except OSError:
            return "active"

    def wait_file(name: str) -> None:
        while not (work / name).exists() and not (stop_requested or control() == "stop"):
            time.sleep(0.02)

    if behaviour.get("gate_start"):
        wait_file("fake.go-start")
    publish()
    if behaviour.get("gate_run"):
        wait_file("fake.go-run")

    batch = -1
    while True:
        if (stop_requested or control() == "stop") and not ignore_stop:
            publish(state="stopping")
            publish(state="stopped")
            return 0
        if control() == "paused":
            publish(state="paused")
        else:
            batch += 1
            figures = {cid: {"emitted": 100 * (batch + 1), "processed": 100 * (batch + 1),
                             "rate": 2000.0, "latency_ms": 50.0} for cid in components}
            publish(state="running", batch_id=batch, batch_ms=50.0, components=figures)
        crash_after = behaviour.get("crash_after")
        crash_runs = behaviour.get("crash_runs")
        if crash_after is not None and batch >= crash_after and \
                (crash_runs is None or run_number <= crash_runs):
            if behaviour.get("crash_mode", "silent") == "status":
                publish(state="failed", error="bolt 'split' raised ValueError: bad word",
                        error_component="split")
            sys.stderr.write("Traceback (most recent call last):\n"
                             '  File "bolts.py", line 3, in execute\n'
                             "ValueError: bad word 'x'\n"
                             "26/01/01 12:00:00 INFO SparkContext: Successfully stopped "
                             "SparkContext\n")
            sys.stderr.flush()
            return int(behaviour.get("exit_code", 1))
        finish_after = behaviour.get("finish_after")
        if finish_after is not None and batch >= finish_after:
            publish(state="finished")
            return 0
        time.sleep(BATCH_SECS)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
