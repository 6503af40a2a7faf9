"""A raw Thrift client for socket tests: builds frames with thriftpy2's own encoder
(independent of the server's code) and reads replies off a plain socket."""

from __future__ import annotations

import select
import socket
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from thriftpy2.protocol import TBinaryProtocol
from thriftpy2.thrift import TApplicationException, TMessageType
from thriftpy2.transport import TMemoryBuffer

CALL, REPLY, EXCEPTION, ONEWAY = (TMessageType.CALL, TMessageType.REPLY,
                                  TMessageType.EXCEPTION, TMessageType.ONEWAY)


def message(name: str, seqid: int, args: Any, mtype: int = CALL, strict: bool = True) -> bytes:
    """A message (header + args struct), unframed."""
    buf = TMemoryBuffer()
    proto = TBinaryProtocol(buf, strict_write=strict)
    proto.write_message_begin(name, mtype, seqid)
    proto.write_struct(args)
    proto.write_message_end()
    return buf.getvalue()


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def call(service: Any, method: str, seqid: int = 1, mtype: int = CALL, strict: bool = True,
         name: str | None = None, **kwargs: Any) -> bytes:
    """The framed bytes of a call of ``service.method(**kwargs)``."""
    args = getattr(service, method + "_args")(**kwargs)
    return frame(message(name or method, seqid, args, mtype, strict))


#: The loopback address abuse tests attack from; well-behaved clients use 127.0.0.1, so
#: per-address limits tell them apart (Linux routes all of 127.0.0.0/8 to lo).
ATTACKER = "127.0.0.2"


def attacker_address_usable() -> bool:
    """Whether this host lets a socket bind :data:`ATTACKER` (Linux routes all of
    127.0.0.0/8 to lo; some sandboxes do not)."""
    try:
        with socket.socket() as sock:
            sock.bind((ATTACKER, 0))
    except OSError:
        return False
    return True


#: For the modules whose every test attacks from :data:`ATTACKER`.
needs_attacker_address = pytest.mark.skipif(not attacker_address_usable(),
                                            reason=f"this host cannot bind {ATTACKER}")


def connect(address: tuple[str, int], timeout: float = 5.0, source: str | None = None,
            rcvbuf: int | None = None) -> socket.socket:
    """A connected client socket; ``source``: the local address to connect from;
    ``rcvbuf``: SO_RCVBUF set before connecting (a small one makes a client that does
    not read show at once)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        if rcvbuf is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        if source is not None:
            sock.bind((source, 0))
        sock.settimeout(timeout)
        sock.connect(address)
    except BaseException:
        sock.close()
        raise
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def closed_by_peer(sock: socket.socket, wait: float = 0.0) -> bool:
    """True if the server closed ``sock`` (EOF or reset seen within ``wait`` seconds);
    reads and discards whatever came first."""
    deadline = time.monotonic() + wait
    while True:
        ready, _, _ = select.select([sock], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            return False
        try:
            if not sock.recv(1 << 20):
                return True
        except (ConnectionResetError, BrokenPipeError):
            return True


def recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise EOFError(f"connection closed with {n} bytes still expected")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_frame(sock: socket.socket) -> bytes:
    size = struct.unpack(">i", recv_exact(sock, 4))[0]
    return recv_exact(sock, size)


class Reply:
    def __init__(self, name: str, mtype: int, seqid: int, body: Any) -> None:
        self.name, self.type, self.seqid, self.body = name, mtype, seqid, body

    def __repr__(self) -> str:
        return f"Reply({self.name!r}, type={self.type}, seqid={self.seqid}, {self.body!r})"


def decode(payload: bytes, service: Any = None, method: str | None = None) -> Reply:
    """Decode a reply payload: the result struct for a REPLY, the
    TApplicationException for an EXCEPTION."""
    proto = TBinaryProtocol(TMemoryBuffer(payload), strict_read=False)
    name, mtype, seqid = proto.read_message_begin()
    if mtype == EXCEPTION:
        body: Any = TApplicationException()
    else:
        body = getattr(service, (method or name) + "_result")()
    proto.read_struct(body)
    return Reply(name, mtype, seqid, body)


def roundtrip(sock: socket.socket, data: bytes, service: Any = None,
              method: str | None = None) -> Reply:
    sock.sendall(data)
    return decode(read_frame(sock), service, method)


def wait_closed(sock: socket.socket, timeout: float = 5.0) -> bytes:
    """Read until the server closes; return everything that came first."""
    sock.settimeout(timeout)
    got = []
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        got.append(chunk)
    return b"".join(got)


def wait_for(predicate: Any, timeout: float = 5.0, what: str = "condition") -> None:
    """Poll a condition on the server (its metrics) until it holds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.005)


@contextmanager
def refused_port(host: str = "127.0.0.1") -> Iterator[int]:
    """A port where connecting is refused, for as long as the block runs: a socket is
    bound to it but not listening (the kernel answers a connect with RST). Unlike picking
    a port and closing it, no other process can start listening there meanwhile."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        yield sock.getsockname()[1]
