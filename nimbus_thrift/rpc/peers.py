"""What the server counts per client address (the host part of the peer): its open
connections, for max_connections_per_peer; the declared bytes of its small frames
being read or handled, for max_read_buffer_bytes_per_peer (one party cannot fill the
read budget with frames it never finishes, and starve everyone else's small calls);
and its requests in the worker pool, for the pool's fair lane. Large frames' declared
bytes (over memory.SMALL_FRAME) count against the same share per group of addresses
one party can hold (:func:`read_group`; memory.ReadGroup keeps that count): five
addresses of one /24 get one share of large frames, and a neighbour's large frames
never refuse an address's small call.

Why the second count: the pool's queue is first come, first served, so a client that
sends a thousand requests at once (over a thousand connections) would make every other
client's next call wait behind all of them. A request from an address with fewer
than :data:`FAIR_SHARE` requests in the pool joins the lane the workers take first;
the rest of a busy address's requests wait in the other. Nobody is refused and no
worker idles: a client alone on the server is served as fast as before, and a busy one
only yields to lighter ones. The counts are bookkeeping for the order, never a limit,
so a count that drifts costs ordering, not service.

The third: which connection to close to make room (:func:`eviction_choice`). A server
at max_connections, or an address at its share, closes an idle connection instead of
refusing the new one: otherwise whoever opened connections first and keeps them silent
(the idle-connection attack: 1,010 from one address) holds the server shut until
idle_timeout, and a client that comes back is refused. The victim is an idle
connection that never completed a request, the one quiet longest (else any idle one),
taken from the address holding the most connections, so a light client's connections
and those that have called are the last to go.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

from .states import State

#: Requests one address may have in the pool and still go ahead of busier addresses.
#: A well-behaved client has one per connection it calls on; 8 covers a CLI, a driver
#: and a few executors on one host.
FAIR_SHARE = 8


class PeerShare:
    """One client address's counts (shared by its connections)."""

    __slots__ = ("connections", "busy", "declared", "channels")

    def __init__(self) -> None:
        self.connections = 0      # open connections from this address
        self.busy = 0             # its requests queued or running in the pool
        self.declared = 0         # declared lengths of its small frames read or handled
        #: Its open connections' channels by descriptor, for :func:`eviction_choice`
        #: (the selector's table holds the same; kept by rpc/lifetime.py).
        self.channels: dict[int, Any] = {}

    def __repr__(self) -> str:
        return (f"<PeerShare connections={self.connections} busy={self.busy} "
                f"declared={self.declared}>")


def idle(conn: Any) -> bool:
    """Whether closing ``conn`` (a :class:`~.connection.Connection`) loses nothing a
    client sent: its TLS handshake is not done, it is closing after an error reply
    already, or it is between calls with no byte of the next one read."""
    state = conn.state
    if state is State.HANDSHAKING or state is State.LINGERING:
        return True
    return state is State.READING_HEADER and not conn.hdr and not conn.leftover


def oldest_idle(channels: Iterable[Any]) -> Any | None:
    """The channel among ``channels`` to close first, or None if none is :func:`idle`:
    among idle connections that have not completed a request yet (``fresh``), the one
    quiet longest (oldest ``last_activity``); only with none of those, the idle one
    quiet longest. A client that has called is what a server is for; a connection that
    never asked anything may be a flood, and a real client whose fresh connection goes
    reconnects. Without the first rule, a flood of new connections from the address a
    good client shares (loopback, or one user under identify_local_peers) made each of
    them younger than the client's pause between calls, and its connection went."""
    best = None
    best_key = (True, 0.0)
    for ch in channels:
        conn = ch.conn
        if idle(conn):
            key = (not conn.fresh, conn.last_activity)
            if best is None or key < best_key:
                best = ch
                best_key = key
    return best


def eviction_choice(per_peer: Mapping[str, PeerShare]) -> Any | None:
    """The channel to close to make room for a new connection: the oldest idle one of
    the address with the most open connections; if that address has none idle, the
    oldest idle one anywhere; None when every connection is in a call."""
    busiest = max(per_peer.values(), key=_connections, default=None)
    if busiest is None:
        return None
    victim = oldest_idle(busiest.channels.values())
    if victim is None:
        victim = oldest_idle(ch for share in per_peer.values()
                             for ch in share.channels.values())
    return victim


def _connections(share: PeerShare) -> int:
    return share.connections


#: How much of an address one party is taken to hold, for the read budget's per-peer
#: share: an IPv4 /24 and an IPv6 /64 are what a host, a cloud VM or a home line is
#: routinely given (five loopback addresses, 127.0.0.2 to .6, filled a 64 MiB budget
#: with nearly complete frames, issue 27). A Unix socket's or a loopback client's OS
#: user is one party already.
IPV4_GROUP_BITS = 24
IPV6_GROUP_BITS = 64


def read_group(host: str) -> str:
    """The group of client address ``host`` whose frames share one per-peer share of
    the read budget (max_read_buffer_bytes_per_peer): its IPv4 /24 or IPv6 /64 (an
    IPv4-mapped IPv6 address as IPv4), e.g. ``"192.0.2.0/24"``; any other host (a Unix
    socket's ``unix:<user>``, ``local:<user>``) is its own group."""
    try:
        address = ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    bits = IPV4_GROUP_BITS if address.version == 4 else IPV6_GROUP_BITS
    return str(ipaddress.ip_network(f"{address}/{bits}", strict=False))
