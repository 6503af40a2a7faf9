"""nimbus_thrift.rpc.fastio: the C socket calls and their pure-Python fallback behave like
the socket methods they replace (real socketpairs; both implementations)."""

from __future__ import annotations

import importlib.util
import select
import socket
import subprocess
import sys
import textwrap
from types import ModuleType

import pytest

import nimbus_thrift.rpc.fastio as accelerated


def _fallback() -> ModuleType:
    """A second copy of fastio.py that cannot import the C module."""
    import nimbus_thrift.rpc
    saved = sys.modules.get("nimbus_thrift.rpc._fastio")
    attribute = nimbus_thrift.rpc.__dict__.pop("_fastio", None)
    sys.modules["nimbus_thrift.rpc._fastio"] = None  # type: ignore[assignment]
    try:
        spec = importlib.util.find_spec("nimbus_thrift.rpc.fastio")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        if saved is None:
            del sys.modules["nimbus_thrift.rpc._fastio"]
        else:
            sys.modules["nimbus_thrift.rpc._fastio"] = saved
        if attribute is not None:
            nimbus_thrift.rpc._fastio = attribute  # type: ignore[attr-defined]


FALLBACK = _fallback()


@pytest.fixture(params=["c", "python"])
def io(request: pytest.FixtureRequest) -> ModuleType:
    return accelerated if request.param == "c" else FALLBACK


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    yield a, b
    a.close()
    b.close()


def test_the_c_module_is_built():
    # scripts/setup.sh installs a compiler and Python's headers, so on the project's
    # own machines a missing module is an install bug, not a fallback to accept.
    assert accelerated.ACCELERATED, "nimbus_thrift.rpc._fastio was not built: run scripts/setup.sh"
    assert not FALLBACK.ACCELERATED


def test_recv_into_reads_what_is_there_up_to_nbytes(io, pair):
    a, b = pair
    b.send(b"hello world")
    buf = bytearray(64)
    assert io.recv_into(a, buf, 5) == 5
    assert bytes(buf[:5]) == b"hello"
    view = memoryview(buf)[5:]
    assert io.recv_into(a, view) == 6
    assert bytes(buf[:11]) == b"hello world"


@pytest.mark.parametrize("sent, nbytes, body", [
    (b"\x00\x00\x00\x03abc", 0, b"abc"),            # exactly one whole frame
    (b"\x00\x00\x00\x05abc", 0, None),              # a frame not yet whole
    (b"\x00\x00\x00\x02abc", 0, None),              # a frame and the next one's start
    (b"\x00\x00\x00\x00", 0, None),                 # an empty frame: the general path
    (b"\xff\xff\xff\xfdabc", 0, None),              # a negative length
    (b"\x00\x00", 0, None),                          # less than a length prefix
    (b"\x00\x00\x00\x03abc", 5, None),              # nbytes cut it short
])
def test_recv_frame_gives_the_payload_of_exactly_one_whole_frame(io, pair, sent, nbytes,
                                                                  body):
    a, b = pair
    b.send(sent)
    buf = bytearray(64)
    n, got = io.recv_frame(a, buf, nbytes)
    assert n == (nbytes or len(sent))
    assert bytes(buf[:n]) == sent[:n]
    assert got == body and (got is None or type(got) is bytes)


def test_recv_frame_raises_and_ends_like_recv_into(io, pair):
    a, b = pair
    with pytest.raises(BlockingIOError):
        io.recv_frame(a, bytearray(8))
    b.close()
    assert io.recv_frame(a, bytearray(8)) == (0, None)


def test_recv_into_raises_blocking_io_error_when_dry(io, pair):
    a, _ = pair
    with pytest.raises(BlockingIOError):
        io.recv_into(a, bytearray(8))


def test_recv_into_returns_zero_at_eof(io, pair):
    a, b = pair
    b.close()
    assert io.recv_into(a, bytearray(8)) == 0


def test_recv_into_refuses_nbytes_beyond_the_buffer(io, pair):
    a, b = pair
    b.send(b"x" * 16)
    with pytest.raises(ValueError):
        io.recv_into(a, bytearray(4), 8)


def test_recv_into_a_large_read_releases_nothing_it_should_not(io, pair):
    # >= 64 KiB takes the GIL-releasing path in C; the bytes must be the same.
    a, b = pair
    a.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    b.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
    data = bytes(range(256)) * 512          # 128 KiB
    sent = b.send(data)
    buf = bytearray(len(data))
    got = 0
    while got < sent:
        got += io.recv_into(a, memoryview(buf)[got:])
    assert bytes(buf[:sent]) == data[:sent]


def test_send_and_sendmsg_round_trip(io, pair):
    a, b = pair
    assert io.send(a, b"abc") == 3
    assert io.sendmsg(a, [b"de", memoryview(b"xfgx")[1:3], bytearray(b"h")]) == 5
    assert b.recv(64) == b"abcdefgh"


def test_large_sendmsg_may_be_partial_and_says_how_much(io, pair):
    a, b = pair
    big = b"z" * (4 << 20)
    sent = io.sendmsg(a, [b"head", big])
    assert 0 < sent < len(big) + 4          # the socket buffer is far below 4 MiB
    with pytest.raises(BlockingIOError):
        while True:                          # fill the buffer completely
            io.send(a, big)


def test_sendmsg_checks_its_buffers(io, pair):
    a, _ = pair
    with pytest.raises(TypeError):
        io.sendmsg(a, [b"ok", "not bytes"])


def test_c_sendmsg_refuses_more_buffers_than_iov_max(pair):
    a, _ = pair
    with pytest.raises(ValueError, match="at most 1024 buffers"):
        accelerated.sendmsg(a, [b"x"] * 1025)


def test_send_to_a_closed_peer_raises(io, pair):
    a, b = pair
    b.close()
    with pytest.raises((BrokenPipeError, ConnectionResetError)):
        io.send(a, b"x")


def test_c_send_to_a_closed_peer_raises_even_where_sigpipe_would_kill():
    # An embedding program may restore SIGPIPE's default action; MSG_NOSIGNAL keeps a
    # vanished client from killing the daemon there.
    code = textwrap.dedent("""
        import signal, socket
        from nimbus_thrift.rpc import fastio
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        a, b = socket.socketpair()
        b.close()
        for call in (lambda: fastio.send(a, b"x"), lambda: fastio.sendmsg(a, [b"x"])):
            try:
                call()
            except BrokenPipeError:
                print("broken pipe")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["broken pipe", "broken pipe"]


def test_descriptors_work_as_well_as_sockets(pair):
    a, b = pair
    assert accelerated.send(a.fileno(), b"fd") == 2
    buf = bytearray(2)
    assert accelerated.recv_into(b.fileno(), buf) == 2
    assert buf == b"fd"


def test_poll_reports_ready_descriptors(io, pair):
    a, b = pair
    ep = select.epoll()
    try:
        ep.register(a.fileno(), select.EPOLLIN)
        assert io.poll(ep, 0) == []
        assert io.poll(ep, 0.01) == []      # a real wait, with the GIL released
        b.send(b"!")
        assert io.poll(ep, 1.0, 16) == [(a.fileno(), select.EPOLLIN)]
        b.close()
        (fd, mask), = io.poll(ep, 0)
        assert fd == a.fileno() and mask & select.EPOLLIN and mask & select.EPOLLHUP
    finally:
        ep.close()


def test_poll_on_a_closed_epoll_raises(io):
    ep = select.epoll()
    ep.close()
    with pytest.raises((OSError, ValueError)):
        io.poll(ep, 0)


@pytest.mark.parametrize("timeout", [0, 0.01])
def test_poll_adds_one_to_the_wake_eventfd(io, timeout):
    import os
    ep = select.epoll()
    fd = os.eventfd(0, os.EFD_NONBLOCK)
    try:
        assert io.poll(ep, timeout, 4, fd) == []
        assert os.eventfd_read(fd) == 1
        assert io.poll(ep, 0, 4) == []           # -1: nothing written
        with pytest.raises(BlockingIOError):
            os.eventfd_read(fd)
    finally:
        os.close(fd)
        ep.close()


def test_c_poll_with_a_bad_wake_fd_raises():
    ep = select.epoll()
    try:
        with pytest.raises(OSError):
            accelerated.poll(ep, 0, 4, 987654)
    finally:
        ep.close()
