"""A real ``nimbus-thrift nimbus`` daemon as a child process, for the tests that
signal it (SIGKILL, SIGTERM) or run it with Spark: started on port 0, its port read
from its banner, its log drained (and kept) so logging never blocks it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

#: The installed command line, next to this interpreter.
CLI = [str(Path(sys.executable).with_name("nimbus-thrift"))]


class DaemonProcess:
    """``nimbus-thrift nimbus`` as a child process; the port is read from its banner."""

    def __init__(self, data_dir: Path | None, *args: str, env: dict[str, str] | None = None):
        where = ["--data-dir", str(data_dir)] if data_dir is not None else []
        self.proc = subprocess.Popen(
            # The web UI off unless a test asks (--ui-port later in args wins): tests
            # must never take port 8080.
            CLI + ["nimbus", "--port", "0", *where, "--log-format", "json",
                   "--log-level", "info", "--ui-port", "0", *args],
            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
            # Submitted topologies are stored, not run: no Spark in these tests.
            env={**os.environ, "NIMBUS_THRIFT_LAUNCHER": "none",
                 # No standby Spark driver taking CPU from the test (test_standby.py
                 # asks for one explicitly).
                 "NIMBUS_THRIFT_STANDBY_DRIVERS": "0", **(env or {})})
        self.lines: list[str] = []
        self.ready = threading.Event()
        self.port = 0
        self.drainer = threading.Thread(target=self._drain, daemon=True)
        self.drainer.start()
        if not self.ready.wait(60) or not self.port:
            self.proc.kill()
            raise AssertionError("nimbus did not start:\n" + "".join(self.lines[-20:]))

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:          # drained, so logging never blocks the daemon
            self.lines.append(line)
            match = re.match(r"nimbus listening on [^:]+:(\d+)", line)
            if match:
                self.port = int(match.group(1))
                self.ready.set()
        self.ready.set()

    def sigkill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self._reap()

    def sigterm(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self._reap()

    def _reap(self) -> int:
        rc = self.proc.wait(30)
        self.drainer.join(30)
        assert self.proc.stderr is not None
        self.proc.stderr.close()
        return rc
