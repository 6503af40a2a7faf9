"""``nimbus-thrift nimbus`` in a process of its own for the attacks of issue 27, as an
operator runs it: with the descriptor limits given (``open_files=(soft, hard)``, set
in the child before it starts), its JSON log lines kept for the test to read, real
signals. (support/daemon_process.py is the plain one.)"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

from support.daemon_process import CLI


class AttackedDaemon:
    """Started by the constructor (returns once it listens); :meth:`stop` at the end.
    ``settings`` are YAML keys."""

    def __init__(self, workdir: Path, open_files: tuple[int, int] | None = None,
                 **settings: Any) -> None:
        self.data_dir = workdir / "data"
        lines = {"data_dir": str(self.data_dir), "port": 0, "ui_port": 0, "launcher": "none",
                 "host": "127.0.0.1", "log_level": "info", "standby_drivers": 0,
                 **settings}
        config = workdir / "nimbus.yaml"
        config.write_text("".join(f"{k}: {json.dumps(v) if isinstance(v, str) else v}\n"
                                  for k, v in lines.items()))

        def limit() -> None:
            if open_files is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, open_files)

        self.proc = subprocess.Popen(CLI + ["nimbus", "--config", str(config),
                                            "--log-format", "json"],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, preexec_fn=limit, start_new_session=True,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.lines: list[str] = []
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if line.startswith("nimbus listening on "):
                self.port = int(line.split()[3].rpartition(":")[2])
                break
        else:
            raise RuntimeError("the daemon did not start:\n" + "".join(self.lines))
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def events(self, name: str) -> list[dict[str, Any]]:
        """The JSON log lines whose event is ``name``."""
        found = []
        for line in list(self.lines):
            if line.startswith("{"):
                entry = json.loads(line)
                if entry.get("event") == name:
                    found.append(entry)
        return found

    def wait(self, timeout: float) -> int:
        code = self.proc.wait(timeout)
        self._reader.join(timeout)
        return code

    def _close(self) -> None:
        self._reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._close()
