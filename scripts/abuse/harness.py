"""What the daemon rows (nimbus_rows.py) use beside abuse_common.py: a nimbus daemon in
its own process (so its memory is its own), a well-behaved client that keeps calling it
and times every answer, and a raw attacker connection from another loopback address.

The daemon listens on 127.0.0.1; attackers connect from 127.0.0.2 (loopback accepts
any 127.x source), so per-address limits tell the two apart, as they would two hosts.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from abuse_common import ATTACKER, rss_mib  # noqa: E402
from nimbus_thrift.client import NimbusClient  # noqa: E402
from nimbus_thrift.idl import nimbus_idl  # noqa: E402
from nimbus_thrift.rpc.codec.calls import bind_args, decode_reply, encode_call  # noqa: E402

#: What the issue asks of a well-behaved client while an attack goes on.
GOOD_LATENCY_S = 1.0


class Daemon:
    """``nimbus-thrift nimbus`` with ``settings`` (YAML keys), started and stopped."""

    def __init__(self, workdir: Path, **settings: Any):
        self.data_dir = workdir / "data"
        config = workdir / "nimbus.yaml"
        lines = {"data_dir": str(self.data_dir), "port": 0, "ui_port": 0, "launcher": "none",
                 "host": "127.0.0.1", "log_level": "warning", **settings}
        config.write_text("".join(f"{k}: {v!r}\n" if isinstance(v, str) else f"{k}: {v}\n"
                                  for k, v in lines.items()))
        cli = Path(sys.executable).with_name("nimbus-thrift")
        self.log = open(workdir / "nimbus.log", "wb")
        self.proc = subprocess.Popen([str(cli), "nimbus", "--config", str(config),
                                      "--log-format", "json"],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     start_new_session=True,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.log.write(raw)
            line = raw.decode()
            if line.startswith("nimbus listening on "):
                self.port = int(line.split()[3].rpartition(":")[2])
                break
        else:
            raise RuntimeError(f"the daemon did not start; see {workdir / 'nimbus.log'}")
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.log.write(raw)

    def rss_mib(self, field: str = "VmRSS") -> float:
        return rss_mib(self.proc.pid, field)

    def client(self, timeout: float = 30.0) -> NimbusClient:
        return NimbusClient("127.0.0.1", self.port, timeout=timeout)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


class Probe:
    """A well-behaved client on 127.0.0.1 calling ``method`` back to back (with a short
    pause), timing each answer, until stopped."""

    def __init__(self, daemon: Daemon, method: str = "getClusterInfo", pause: float = 0.05):
        self.daemon, self.method, self.pause = daemon, method, pause
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "Probe":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with self.daemon.client(timeout=60) as client:
                    while not self._stop.is_set():
                        start = time.perf_counter()
                        client.call(self.method)
                        self.latencies.append(time.perf_counter() - start)
                        self._stop.wait(self.pause)
            except Exception as exc:  # noqa: BLE001 - reported, then reconnect
                self.errors.append(f"{type(exc).__name__}: {exc}")
                self._stop.wait(0.1)

    def summary(self) -> str:
        if not self.latencies:
            return f"good client: no answer ({len(self.errors)} errors)"
        worst = max(self.latencies)
        verdict = "ok" if worst < GOOD_LATENCY_S and not self.errors else "MISSED"
        return (f"good client: {len(self.latencies)} answers, worst {worst * 1e3:.0f} ms, "
                f"{len(self.errors)} errors [{verdict}: < {GOOD_LATENCY_S:.0f} s]")


class Raw:
    """One framed-binary connection to the daemon from ``source``, calling Nimbus."""

    def __init__(self, daemon: Daemon, source: str = ATTACKER, timeout: float = 60.0):
        self.sock = socket.create_connection(("127.0.0.1", daemon.port), timeout=timeout,
                                             source_address=(source, 0))
        self.seqid = 0
        self.service = nimbus_idl().Nimbus

    def send(self, method: str, *args: Any) -> int:
        self.seqid += 1
        payload = encode_call(method, self.seqid,
                              bind_args(self.service, method, args, {}))
        self.sock.sendall(struct.pack("!i", len(payload)) + payload)
        return self.seqid

    def receive(self, method: str, seqid: int) -> Any:
        (size,) = struct.unpack("!i", self._exactly(4))
        return decode_reply(self.service, method, seqid, self._exactly(size))

    def call(self, method: str, *args: Any) -> Any:
        return self.receive(method, self.send(method, *args))

    def _exactly(self, n: int) -> bytes:
        parts, left = [], n
        while left:
            chunk = self.sock.recv(min(left, 1 << 20))
            if not chunk:
                raise ConnectionError("closed by the daemon")
            parts.append(chunk)
            left -= len(chunk)
        return b"".join(parts)

    def close(self) -> None:
        self.sock.close()


def outcome(func: Any) -> str:
    """What a call got: ``ok`` or the error's type and first words."""
    try:
        func()
        return "ok"
    except Exception as exc:  # noqa: BLE001 - the point is to say what it was
        text = getattr(exc, "msg", None) or getattr(exc, "message", None) or str(exc)
        return f"{type(exc).__name__}: {str(text)[:160]}"
