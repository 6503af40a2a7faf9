"""Real sockets: the benchmark's C ceiling (scripts/bench/c_echo.c) is a real echo
server, so the share of it the benchmark prints means something: thriftpy2's own client
gets its strings back through it, pipelined frames and a 1 MiB one included, and a
frame that is not an echo call closes the connection."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Iterator

import pytest
from thriftpy2.rpc import make_client
from thriftpy2.transport import TFramedTransportFactory

from support.rawthrift import call, connect, decode, read_frame, wait_closed

SRC = Path(__file__).resolve().parents[2] / "scripts" / "bench" / "c_echo.c"


@pytest.fixture(scope="module")
def ceiling(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    gcc = shutil.which("gcc")
    assert gcc is not None, "gcc is needed to build scripts/bench/c_echo.c"
    exe = tmp_path_factory.mktemp("ceiling") / "c-echo"
    subprocess.run([gcc, "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(exe), str(SRC)],
                   check=True, capture_output=True)
    proc = subprocess.Popen([str(exe), "0"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())      # printed once it listens
        yield ("127.0.0.1", port)
    finally:
        proc.kill()
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


def test_thriftpy2_client_gets_its_strings_back(demo: ModuleType, ceiling) -> None:
    client = make_client(demo.Echo, *ceiling, trans_factory=TFramedTransportFactory(),
                         timeout=5000)
    try:
        for s in ("", "x", "héllo", "z" * (1 << 20)):
            assert client.echo(s) == s
    finally:
        client.close()


def test_pipelined_calls_come_back_in_order(demo: ModuleType, ceiling) -> None:
    with connect(ceiling) as sock:
        sock.sendall(b"".join(call(demo.Echo, "echo", seqid=i, s=str(i)) for i in range(50)))
        for i in range(50):
            reply = decode(read_frame(sock), demo.Echo)
            assert (reply.seqid, reply.body.success) == (i, str(i))


def test_anything_else_closes_the_connection(demo: ModuleType, ceiling) -> None:
    with connect(ceiling) as sock:
        sock.sendall(call(demo.Echo, "echo", strict=False, s="x"))
        assert wait_closed(sock) == b""
