"""Shared by the row scripts in scripts/abuse/: start the demo server (`nimbus-thrift
demo`) from a checkout in a child process, read its RSS, and run a well-behaved client
on 127.0.0.1 that calls `echo` in a loop and records its latencies while an attack
runs from 127.0.0.2.

Each row script takes ``--tree DIR`` (default: this checkout) so the same attack can
be measured against a copy of the tree from before a fix, e.g.
``python scripts/abuse/row3_declared_frames.py --tree /tmp/nt-before2``.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[2]
ATTACKER = "127.0.0.2"
GOOD = "127.0.0.1"


def parser(doc: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc)
    p.add_argument("--tree", type=Path, default=REPO, help="checkout whose server runs")
    p.add_argument("--seconds", type=float, default=10.0, help="how long the attack lasts")
    p.add_argument("--server-flag", action="append", default=[], metavar="FLAG",
                   help="passed to `nimbus-thrift demo` (repeat; e.g. "
                        "--server-flag=--send-buffer-size=65536)")
    return p


def start_server(tree: Path, *flags: str) -> tuple[subprocess.Popen[bytes], tuple[str, int]]:
    env = {**os.environ, "PYTHONPATH": str(tree), "NIMBUS_THRIFT_LOG_LEVEL": "error"}
    proc = subprocess.Popen([sys.executable, "-m", "nimbus_thrift.cli", "demo", "--port", "0",
                             *flags], cwd=tree, env=env, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = proc.stderr.readline().decode(errors="replace")
        found = re.search(r"on ([\d.]+):(\d+)", line)
        if found:
            threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep draining
            return proc, (found.group(1), int(found.group(2)))
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise SystemExit("the server did not start")


def rss_mib(pid: int, field: str = "VmRSS") -> float:
    """A process's resident memory now (``VmRSS``) or at its peak (``VmHWM``), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def tcp_mem_mib() -> float:
    """All TCP socket buffers on the machine (/proc/net/sockstat 'mem', in pages)."""
    for line in Path("/proc/net/sockstat").read_text().splitlines():
        if line.startswith("TCP:"):
            fields = line.split()
            return int(fields[fields.index("mem") + 1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    return 0.0


def echo_frame(text: str, seqid: int = 1) -> bytes:
    name = b"echo"
    body = (struct.pack(">iI", -2147418111, len(name)) + name + struct.pack(">i", seqid)
            + b"\x0b\x00\x01" + struct.pack(">I", len(text)) + text.encode() + b"\x00")
    return struct.pack(">i", len(body)) + body


def echo_binary_frame(size: int, seqid: int = 1) -> bytes:
    name = b"echo_binary"
    body = (struct.pack(">iI", -2147418111, len(name)) + name + struct.pack(">i", seqid)
            + b"\x0b\x00\x01" + struct.pack(">I", size) + b"x" * size + b"\x00")
    return struct.pack(">i", len(body)) + body


def connect(address: tuple[str, int], source: str, timeout: float = 10.0) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((source, 0))
    sock.settimeout(timeout)
    sock.connect(address)
    return sock


def recv_frame(sock: socket.socket) -> bytes:
    def exact(n: int) -> bytes:
        got = b""
        while len(got) < n:
            chunk = sock.recv(n - len(got))
            if not chunk:
                raise EOFError
            got += chunk
        return got
    return exact(struct.unpack(">i", exact(4))[0])


class GoodClient(threading.Thread):
    """Calls echo on one connection from 127.0.0.1 until stopped; a call that fails
    or exceeds its 60 s timeout is recorded as such (and the client reconnects)."""

    def __init__(self, address: tuple[str, int],
                 wrap: Callable[[socket.socket], socket.socket] | None = None) -> None:
        super().__init__(daemon=True)
        self.address = address
        #: Applied to each new connection (a TLS wrap, for the TLS rows).
        self.wrap = wrap
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        sock = None
        while not self.stop.is_set():
            started = time.monotonic()
            try:
                if sock is None:
                    sock = connect(self.address, GOOD, timeout=60)
                    if self.wrap is not None:
                        sock = self.wrap(sock)
                sock.sendall(echo_frame("ping"))
                recv_frame(sock)
                self.latencies.append(time.monotonic() - started)
            except OSError as exc:
                self.failures.append(f"{type(exc).__name__}: {exc}")
                if sock is not None:
                    sock.close()
                sock = None
            self.stop.wait(0.05)

    def report(self) -> str:
        lat = sorted(self.latencies)
        if not lat:
            return f"good client: no answers, {len(self.failures)} failures"
        return (f"good client: {len(lat)} answers, max {lat[-1] * 1000:.1f} ms, "
                f"p50 {lat[len(lat) // 2] * 1000:.1f} ms, {len(self.failures)} failures")


def summary(name: str, proc: subprocess.Popen[bytes], rss_before: float, rss_peak: float,
            good: GoodClient, extra: str = "") -> None:
    print(f"{name}: server RSS {rss_before:.0f} -> peak {rss_peak:.0f} MiB "
          f"(growth {rss_peak - rss_before:.0f} MiB); {good.report()}{extra}")
