"""Connections accepted by one process and served by another.

A multi-process server's parent accepts every connection and hands each one to a
child over a Unix socket (the descriptor travels as SCM_RIGHTS); in the child,
:class:`HandoffListener` is what the selector accepts from, so a handed connection
takes the same path as one accepted from a TCP listener (limits, TLS, counters).

Messages on the channel (SOCK_SEQPACKET, one per send)::

    b"c" + one descriptor   a connection to serve
    b"end"                  nothing more will come: every connection sent before it
                            has been taken once :attr:`HandoffListener.ended` is set
"""

from __future__ import annotations

import os
import socket
import threading
from typing import Any

CONNECTION = b"c"
END = b"end"
#: Largest message read: the markers above are shorter.
_MESSAGE_MAX = 16


def hand_over(channel: socket.socket, conn: socket.socket) -> None:
    """Send ``conn`` to the child at the other end of ``channel`` (the caller then
    closes its own copy).

    Raises:
        OSError: the child is gone, or its channel stayed full past its timeout.
    """
    socket.send_fds(channel, [CONNECTION], [conn.fileno()])


def send_end(channel: socket.socket) -> None:
    """Tell the child nothing more will be handed to it (errors ignored: a child that
    is gone needs no telling)."""
    try:
        channel.send(END)
    except OSError:
        pass


class HandoffListener(socket.socket):
    """The child's end of a handoff channel, shaped as the listening socket the
    selector expects: readable when a connection waits, :meth:`accept` returns it with
    its peer's address, ``family`` and ``getsockname()`` are those of the TCP listener
    the parent accepted it from (so TLS and the per-address limits apply as to any TCP
    connection, and the server reports the port its clients use)."""

    def __init__(self, channel: socket.socket, family: socket.AddressFamily,
                 address: Any) -> None:
        super().__init__(socket.AF_UNIX, socket.SOCK_SEQPACKET, fileno=channel.detach())
        self.setblocking(False)
        self._served_family = family
        self._served_address = address
        #: Set once the parent's "end" (or its death) has been read.
        self.ended = threading.Event()

    @property
    def family(self) -> socket.AddressFamily:
        return self._served_family

    def getsockname(self) -> Any:
        return self._served_address

    def accept(self) -> tuple[socket.socket, Any]:
        """The next handed connection and its peer's address.

        Raises:
            BlockingIOError: none is waiting (or no more will come).
        """
        while True:
            message, fds, _, _ = socket.recv_fds(self, _MESSAGE_MAX, 1)
            if fds:
                conn = socket.socket(fileno=fds[0])
                for extra in fds[1:]:
                    os.close(extra)
                try:
                    return conn, conn.getpeername()
                except OSError:
                    conn.close()   # the client has gone already: take the next one
                    continue
            if message == END:
                self.ended.set()
                raise BlockingIOError("no more connections will be handed over")
            if not message:
                # The parent is gone: the channel stays readable (EOF) for good, which
                # would spin the selector. Replacing the descriptor releases the
                # channel, and with it the selector's registration of it.
                self.ended.set()
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, self.fileno())
                os.close(null)
                raise BlockingIOError("the parent has closed the handoff channel")
