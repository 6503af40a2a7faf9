"""nimbus_thrift.rpc.fastio on TLS connections: the C calls reading and writing ssl's
own C object (``SSLSocket._sslobj``) behave as rpc/tls.py's TLSStream does (real
loopback TLS connections, handshaken in the test)."""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import threading
import time

import pytest

from nimbus_thrift.rpc import fastio
from nimbus_thrift.rpc.tls import TLSStream

from support.certs import make_pki, server_context

pytestmark = pytest.mark.skipif(not fastio.NATIVE_TLS,
                                reason="fastio's C module is not built here")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("certs"), clients=("alice",))


@pytest.fixture
def pair(pki):
    """(server-side TLSStream, client SSLSocket) over loopback, handshake done; the
    server side nonblocking as the selector has it."""
    listener = socket.create_server(("127.0.0.1", 0))
    client_ctx = ssl.create_default_context(cafile=str(pki.ca.cert))
    result: dict[str, ssl.SSLSocket] = {}

    def dial() -> None:
        raw = socket.create_connection(listener.getsockname())
        result["client"] = client_ctx.wrap_socket(raw, server_hostname="localhost")

    dialer = threading.Thread(target=dial)
    dialer.start()
    raw, _ = listener.accept()
    server = server_context(pki.server).wrap_socket(raw, server_side=True)
    dialer.join(5)
    listener.close()
    server.setblocking(False)
    stream = TLSStream(server)
    client = result["client"]
    client.settimeout(5)
    try:
        yield stream, client
    finally:
        client.close()
        server.close()


def _retry(stream: TLSStream, op, timeout: float = 5.0):
    """``op()`` until it stops raising BlockingIOError, waiting for the socket to be
    readable between tries; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return op()
        except BlockingIOError:
            if time.monotonic() > deadline:
                pytest.fail(f"still would block after {timeout} s")
            select.select([stream.ssl], [], [], 0.05)


def _read_all(stream: TLSStream, n: int) -> bytes:
    got = bytearray()
    buf = bytearray(65536)
    while len(got) < n:
        count = _retry(stream, lambda: fastio.recv_into(stream.io, buf))
        got += buf[:count]
    return bytes(got)


def test_the_connection_io_is_ssls_c_object(pair):
    stream, _ = pair
    assert stream.io is stream.ssl._sslobj
    assert type(stream.io).__name__ == "_SSLSocket"


def test_recv_into_reads_decrypted_bytes_and_would_block_when_dry(pair):
    stream, client = pair
    buf = bytearray(64)
    with pytest.raises(BlockingIOError):
        fastio.recv_into(stream.io, buf)
    client.sendall(b"hello, tls")
    assert _read_all(stream, 10) == b"hello, tls"
    # nbytes bounds the read; what is left stays pending in the TLS layer.
    client.sendall(b"0123456789")
    view = memoryview(buf)
    n = _retry(stream, lambda: fastio.recv_into(stream.io, view, 4))
    assert bytes(buf[:n]) == b"0123"
    assert stream.pending() == 6
    assert fastio.recv_into(stream.io, view[4:]) == 6
    assert bytes(buf[:10]) == b"0123456789"


def test_send_and_sendmsg_write_records_the_client_reads(pair):
    stream, client = pair
    assert fastio.send(stream.io, b"reply-1") == 7
    assert fastio.sendmsg(stream.io, [b"re", memoryview(b"ply-2"), bytearray(b"!")]) == 8
    got = b""
    while len(got) < 15:
        got += client.recv(64)
    assert got == b"reply-1reply-2!"


def test_close_notify_reads_as_end_of_stream(pair):
    stream, client = pair
    client.settimeout(1)
    # unwrap() sends close_notify, then waits for ours, which never comes: in a thread.
    def unwrap() -> None:
        with contextlib.suppress(OSError):
            client.unwrap()

    closing = threading.Thread(target=unwrap)
    closing.start()
    buf = bytearray(16)
    try:
        assert _retry(stream, lambda: fastio.recv_into(stream.io, buf)) == 0
    finally:
        closing.join(5)


def test_a_broken_record_is_a_tls_connection_error(pair):
    stream, client = pair
    # A TLS application-data record header with garbage where the ciphertext goes.
    socket.socket.sendall(client, b"\x17\x03\x03\x00\x20" + b"\x00" * 32)
    buf = bytearray(16)
    with pytest.raises(ConnectionError, match="^TLS error: "):
        _retry(stream, lambda: fastio.recv_into(stream.io, buf))


def test_the_python_stream_maps_errors_the_same_way(pair):
    """The fallback (no C module) is TLSStream's own methods: same results."""
    stream, client = pair
    buf = bytearray(16)
    with pytest.raises(BlockingIOError):
        stream.recv_into(buf)
    client.sendall(b"abc")
    assert _retry(stream, lambda: stream.recv_into(buf)) == 3
    assert stream.send(b"xyz") == 3
    assert client.recv(3) == b"xyz"
