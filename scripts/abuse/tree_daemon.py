"""What the issue 27 scripts (idle_descriptors.py, web_slots.py, hangup.py) use beside
abuse_common.py: ``nimbus-thrift nimbus`` run from a checkout (``--tree``, so the same
attack can be measured against a worktree of the commit before a fix) in its own
process, with the open-files limits an operator's shell would give it, and a
well-behaved client that times each answer (median and worst).
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from abuse_common import rss_mib

#: What the issue asks of a well-behaved client while an attack goes on.
GOOD_LATENCY_S = 1.0


class TreeDaemon:
    """The daemon of ``tree`` with ``settings`` (YAML keys), its RLIMIT_NOFILE set to
    ``open_files`` (soft, hard) before it starts; started by the constructor."""

    def __init__(self, tree: Path, workdir: Path, open_files: tuple[int, int] | None = None,
                 **settings: Any) -> None:
        self.data_dir = workdir / "data"
        lines = {"data_dir": str(self.data_dir), "port": 0, "ui_port": 0, "launcher": "none",
                 "host": "127.0.0.1", "log_level": "info", **settings}
        config = workdir / "nimbus.yaml"
        config.write_text("".join(f"{k}: {json.dumps(v) if isinstance(v, str) else v}\n"
                                  for k, v in lines.items()))

        def limit() -> None:
            if open_files is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, open_files)

        self.log = open(workdir / "nimbus.log", "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "nimbus_thrift.cli", "nimbus", "--config", str(config),
             "--log-format", "json"], cwd=tree, preexec_fn=limit, start_new_session=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "PYTHONPATH": str(tree), "PYTHONUNBUFFERED": "1",
                 "NIMBUS_THRIFT_STANDBY_DRIVERS": "0"})
        self.lines: list[str] = []
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._keep(line)
            if line.startswith("nimbus listening on "):
                self.port = int(line.split()[3].rpartition(":")[2])
                break
        else:
            raise SystemExit(f"the daemon did not start; see {workdir / 'nimbus.log'}")
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _keep(self, line: str) -> None:
        self.lines.append(line)
        self.log.write(line)

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._keep(line)

    def event(self, name: str) -> dict[str, Any]:
        """The first JSON log line whose event is ``name`` ({} if none)."""
        for line in list(self.lines):
            if line.startswith("{") and f'"{name}"' in line:
                entry = json.loads(line)
                if entry.get("event") == name:
                    return entry
        return {}

    def count(self, name: str) -> int:
        return sum(1 for line in list(self.lines) if f'"event": "{name}"' in line)

    def rss_mib(self) -> float:
        return rss_mib(self.proc.pid)

    def open_files(self) -> int:
        try:
            return len(os.listdir(f"/proc/{self.proc.pid}/fd"))
        except OSError:
            return 0

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._reader.join(5)
        self.log.close()


class Timed(threading.Thread):
    """Calls ``call()`` (which makes one request and raises if it failed) every
    ``pause`` seconds until stopped, timing each answer."""

    def __init__(self, call: Callable[[], Any], pause: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.call, self.pause = call, pause
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            start = time.perf_counter()
            try:
                self.call()
                self.latencies.append(time.perf_counter() - start)
            except Exception as exc:  # noqa: BLE001 - counted and reported
                self.errors.append(f"{type(exc).__name__}: {str(exc)[:120]}")
            self.stop.wait(self.pause)

    def report(self, name: str) -> str:
        lat = sorted(self.latencies)
        if not lat:
            return f"{name}: no answer, {len(self.errors)} errors"
        worst = lat[-1]
        verdict = "ok" if worst < GOOD_LATENCY_S and not self.errors else "MISSED"
        return (f"{name}: {len(lat)} answers, median {lat[len(lat) // 2] * 1e3:.1f} ms, "
                f"worst {worst * 1e3:.0f} ms, {len(self.errors)} errors "
                f"[{verdict}: < {GOOD_LATENCY_S:.0f} s]")
