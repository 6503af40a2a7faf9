"""The selector's record of one accepted connection: its socket and what the selector's
I/O needs of it, beside the socket-free :class:`~.connection.Connection` it feeds.

A :class:`Channel` is what the selector's table (``Lifetime.conns``), its read batch,
the worker pool's tasks and the outcome queue hold. The protocol state (framing, memory
accounting, the state machine, the clocks deadlines.py reads) is ``channel.conn``,
which never sees a socket, so the unit tests drive it with bytes alone (STYLE.md 1).

The split costs the per-call path one attribute hop (``ch.conn``) in each function
that touches both; it did not show in scripts/bench.sh against the commit before it
(``--baseline``), counted as calls per second of server CPU, which holds up on this
busy shared machine where calls/s does not: 16 connections 100k against 96k, 256
connections 111k against 113k, 1 MiB frames 3.4 against 3.2 GB per CPU-second.
"""

from __future__ import annotations

import socket
from typing import Any

from .connection import Buffer, Connection


class Channel:
    """One connection as the selector thread sees it. ``conn`` is its protocol state;
    the rest is the selector's (and, while a call is PROCESSING, its worker's ``io``
    and ``interest``, see completion.py)."""

    __slots__ = ("conn", "fd", "sock", "io", "tls", "tls_peeked", "interest", "out",
                 "out_size", "out_shared", "linger_until", "peer_gone")

    def __init__(self, conn: Connection, sock: socket.socket, io: object,
                 tls: Any = None) -> None:
        self.conn = conn
        self.sock = sock
        self.fd = sock.fileno()
        self.io = io                   # what fastio's calls take: fd, ssl object or socket
        self.tls = tls                 # the TLSStream of a TLS connection (``io`` is its own)
        self.tls_peeked = False        # its first bytes were checked for a TLS record
        self.interest: int | None = None   # epoll mask; None = not registered
        self.out: list[Buffer] = []    # reply bytes the socket has not taken yet
        self.out_size = 0              # ... and what they keep alive of their own
        self.out_shared: list[Any] = []  # ... and the shared bodies they point into
        self.linger_until = 0.0        # lingering after an error reply: when to close
        self.peer_gone = False         # EOF or an error seen while a call was running

    def __repr__(self) -> str:
        return f"<Channel fd={self.fd} {self.conn!r}>"
