"""The HTTP side's bounds, each named once with the reason for its value.

The HTTP side serves a page, a JSON API and a metrics scrape: small requests, a few
clients (browsers, Prometheus, scripts). These bounds keep whoever else reaches the
port (a slow client, a flood of connections, huge headers) from holding more than a
bounded share of the daemon, and from touching the Thrift side at all (it runs on its
own thread and loop: :mod:`.httpserver`).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

#: Open HTTP connections at once; one more is closed as soon as it is accepted. A
#: browser opens up to 6 per origin, Prometheus 1; 256 leaves room for dozens of both.
MAX_CONNECTIONS = 256
#: Open HTTP connections from one client address (its IP). A browser opens up to 6 per
#: origin, Prometheus 1; 32 leaves room for several windows and scripts on one host.
#: Without it one address without credentials took all 256 slots (a connection counts
#: from its accept, before its TLS handshake): a good browser got 0 of 25 answers
#: (issue 27). Filling the side now takes 8 addresses, and then :class:`Slots` evicts.
MAX_CONNECTIONS_PER_ADDRESS = 32
#: Seconds from the accept to the end of the TLS handshake: one round trip in TLS 1.3,
#: two in 1.2, so well under a second on any real link; 5 s leaves room for
#: retransmissions. A client that never finishes holds its slot this long, not
#: HEADER_TIMEOUT.
HANDSHAKE_TIMEOUT = 5.0
#: Seconds from the accept (or the end of the handshake) to a request's first byte:
#: a browser or a scraper sends its request as soon as it connects (a browser's
#: speculative preconnect that goes unused is reopened transparently once closed).
FIRST_BYTES_TIMEOUT = 5.0
#: Bytes of a request line and its headers: browsers send 1-2 KiB (cookies included);
#: 16 KiB is what many servers allow by default. Beyond: 431.
MAX_HEADER_BYTES = 16 << 10
#: Bytes of a request body: the only bodies are rebalance options (a few hundred bytes
#: of JSON). Beyond: 413, before any of it is read.
MAX_BODY_BYTES = 64 << 10
#: Seconds from a request's first byte (or a new connection) to its last header and
#: body byte: a slow-loris client holds a connection this long at most. A TLS handshake
#: must finish within it too.
HEADER_TIMEOUT = 10.0
#: Seconds a kept-alive connection may wait for its next request (browsers keep
#: theirs for 60-300 s; they reconnect transparently after a close).
IDLE_TIMEOUT = 30.0
#: Seconds a client gets to take a response (the largest is /metrics or a topology's
#: configuration, tens of KB).
WRITE_TIMEOUT = 30.0
#: Threads that run requests (the daemon's own code: SQLite reads, the launcher's
#: status). Requests beyond wait in the loop, one per connection at most.
REQUEST_THREADS = 4
#: Pending connections the kernel queues before accept.
BACKLOG = 128


@dataclass(frozen=True)
class HttpLimits:
    """The bounds one HTTP server applies (tests use smaller ones)."""

    max_connections: int = MAX_CONNECTIONS
    max_connections_per_address: int = MAX_CONNECTIONS_PER_ADDRESS
    handshake_timeout: float = HANDSHAKE_TIMEOUT
    first_bytes_timeout: float = FIRST_BYTES_TIMEOUT
    max_header_bytes: int = MAX_HEADER_BYTES
    max_body_bytes: int = MAX_BODY_BYTES
    header_timeout: float = HEADER_TIMEOUT
    idle_timeout: float = IDLE_TIMEOUT
    write_timeout: float = WRITE_TIMEOUT
    request_threads: int = REQUEST_THREADS


class Slot:
    """One accepted connection's place in :class:`Slots`. ``owner`` is what the
    server cancels to evict it (its task)."""

    __slots__ = ("address", "owner", "busy", "released")

    def __init__(self, address: Hashable, owner: Any) -> None:
        self.address = address
        self.owner = owner
        self.busy = False          # a request read and being answered
        self.released = False      # closed or evicted: its slot is free


class Slots:
    """Which connections hold the HTTP side's slots, and which one makes room.

    A new connection is refused, or admitted in place of a waiting one: a connection
    in its TLS handshake, or waiting for (or part way through) a request's head, is
    *waiting*; one whose request is being answered is *busy*. When the client's address
    is at ``per_address``, that address's longest-waiting connection makes room; when
    the side is at ``total``, the longest-waiting connection of any address does. Only
    with every candidate busy is the new connection refused. So connections that never
    finish a handshake or a request cannot keep a browser out: they are the oldest
    waiting ones, and a browser's kept-alive connection waits again from its last
    response. No sockets here: the server (httpserver.py) cancels the evicted owner.
    """

    def __init__(self, total: int, per_address: int) -> None:
        self.total = total
        self.per_address = per_address
        self.open = 0
        self._count: dict[Hashable, int] = {}
        #: Waiting slots, longest-waiting first, overall and per address (dicts keep
        #: insertion order: the first key is the oldest, in O(1)).
        self._waiting: dict[Slot, None] = {}
        self._waiting_of: dict[Hashable, dict[Slot, None]] = {}

    def count(self, address: Hashable) -> int:
        return self._count.get(address, 0)

    def admit(self, address: Hashable, owner: Any) -> tuple[Slot | None, Slot | None]:
        """A slot for a new connection from ``address`` (None: refused) and the
        waiting slot evicted to make room (None: there was room), already released."""
        victim = None
        if self.count(address) >= self.per_address:
            victim = next(iter(self._waiting_of.get(address, ())), None)
            if victim is None:
                return None, None
        elif self.open >= self.total:
            victim = next(iter(self._waiting), None)
            if victim is None:
                return None, None
        if victim is not None:
            self.release(victim)
        slot = Slot(address, owner)
        self.open += 1
        self._count[address] = self.count(address) + 1
        self._wait(slot)
        return slot, victim

    def busy(self, slot: Slot) -> None:
        """A request of ``slot``'s is read whole: it is not a candidate until answered."""
        if not slot.busy:
            slot.busy = True
            self._unwait(slot)

    def waiting(self, slot: Slot) -> None:
        """``slot``'s response is out: it waits for its next request, the youngest."""
        if slot.busy and not slot.released:
            slot.busy = False
            self._wait(slot)

    def release(self, slot: Slot) -> None:
        """The connection is gone (closed, or evicted); a second call does nothing."""
        if slot.released:
            return
        slot.released = True
        self._unwait(slot)
        self.open -= 1
        left = self._count[slot.address] - 1
        if left:
            self._count[slot.address] = left
        else:
            del self._count[slot.address]

    def _wait(self, slot: Slot) -> None:
        self._waiting[slot] = None
        self._waiting_of.setdefault(slot.address, {})[slot] = None

    def _unwait(self, slot: Slot) -> None:
        self._waiting.pop(slot, None)
        mine = self._waiting_of.get(slot.address)
        if mine is not None:
            mine.pop(slot, None)
            if not mine:
                del self._waiting_of[slot.address]
