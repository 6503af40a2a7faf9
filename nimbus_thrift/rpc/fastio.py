"""Nonblocking socket calls for the selector and the workers.

The C versions (``_fastio.c``) keep the GIL around calls that cannot block, so a recv
or a send on a nonblocking socket is not also a GIL hand-off to another thread (see
the C file for the measurement). Without the compiled module -- no compiler at install
time, or PyPy -- the same functions are the socket module's, and everything behaves
the same, only slower under load.

A TLS connection's calls go through its stream object (rpc/tls.py), or, with the C
module, straight to ssl's own C object (:data:`NATIVE_TLS`).

:func:`recv_frame` is recv_into that also returns the payload when exactly one whole
frame arrived (the common read of a small request).

Also :func:`grow_bytearray`, which lengthens a frame buffer without zero-filling it
(the C version; the fallback zero-fills).

Each socket call takes a socket (or a descriptor, for the C versions) and raises what the socket
methods raise: BlockingIOError when the call would block, other OSErrors as errno says.
"""

from __future__ import annotations

import os
import select
from typing import Any

try:
    from . import _fastio
except ImportError:  # pragma: no cover - exercised only where the C module is absent
    _fastio = None  # type: ignore[assignment]  # None: the C module is not built

ACCELERATED = _fastio is not None


def _native_tls() -> bool:
    """Let the C calls read and write ssl's C object of a TLS connection directly
    (see _fastio.c); False where that object's type cannot be found."""
    if _fastio is None:
        return False
    import ssl
    sslobject_type = getattr(ssl._ssl, "_SSLSocket", None)  # type: ignore[attr-defined]
    if not isinstance(sslobject_type, type):
        return False
    _fastio.use_tls(sslobject_type, ssl.SSLWantReadError, ssl.SSLWantWriteError,
                    ssl.SSLZeroReturnError, ssl.SSLEOFError, ssl.SSLError)
    return True


#: Whether a TLS connection's io may be ssl's C object (``SSLSocket._sslobj``).
NATIVE_TLS = _native_tls()

if _fastio is not None:
    recv_into = _fastio.recv_into
    recv_frame = _fastio.recv_frame
    send = _fastio.send
    sendmsg = _fastio.sendmsg
    grow_bytearray = _fastio.grow_bytearray
    _epoll_wait = _fastio.epoll_wait

    def poll(ep: select.epoll, timeout: float = -1.0, maxevents: int = -1,
             wake_fd: int = -1) -> list[tuple[int, int]]:
        """``ep.poll(timeout, maxevents)``, keeping the GIL when ``timeout`` is 0.
        ``wake_fd``: an eventfd to add 1 to first, once the GIL is released (so the
        thread it wakes does not wake only to wait for the GIL)."""
        return _epoll_wait(ep.fileno(), timeout, maxevents, wake_fd)

else:  # pragma: no cover - exercised only where the C module is absent
    def recv_into(sock: Any, buffer: Any, nbytes: int = 0, /) -> int:
        return sock.recv_into(buffer, nbytes)

    def recv_frame(sock: Any, buffer: Any, nbytes: int = 0, /) -> tuple[int, bytes | None]:
        n = sock.recv_into(buffer, nbytes)
        if n > 4 and int.from_bytes(buffer[:4], "big") == n - 4:
            return n, bytes(buffer[4:n])
        return n, None

    def send(sock: Any, data: Any, /) -> int:
        return sock.send(data)

    def grow_bytearray(buffer: bytearray, size: int, /) -> None:
        if size < len(buffer):
            raise ValueError("grow_bytearray() cannot shrink a buffer")
        buffer.extend(bytes(size - len(buffer)))

    def sendmsg(sock: Any, buffers: Any, /) -> int:
        return sock.sendmsg(buffers)

    def poll(ep: select.epoll, timeout: float = -1.0, maxevents: int = -1,
             wake_fd: int = -1) -> list[tuple[int, int]]:
        if wake_fd >= 0:
            os.eventfd_write(wake_fd, 1)
        return ep.poll(timeout, maxevents)
