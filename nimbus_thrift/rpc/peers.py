"""What the server counts per client address (the host part of the peer): its open
connections, for max_connections_per_peer; the declared bytes of its frames being read
or handled, for max_read_buffer_bytes_per_peer (one address cannot fill the read
budget with frames it never finishes, and starve everyone else's small calls); and its
requests in the worker pool, for the pool's fair lane.

Why the second count: the pool's queue is first come, first served, so a client that
sends a thousand requests at once (over a thousand connections) would make every other
client's next call wait behind all of them. A request from an address with fewer
than :data:`FAIR_SHARE` requests in the pool joins the lane the workers take first;
the rest of a busy address's requests wait in the other. Nobody is refused and no
worker idles: a client alone on the server is served as fast as before, and a busy one
only yields to lighter ones. The counts are bookkeeping for the order, never a limit,
so a count that drifts costs ordering, not service.
"""

from __future__ import annotations

#: Requests one address may have in the pool and still go ahead of busier addresses.
#: A well-behaved client has one per connection it calls on; 8 covers a CLI, a driver
#: and a few executors on one host.
FAIR_SHARE = 8


class PeerShare:
    """One client address's counts (shared by its connections)."""

    __slots__ = ("connections", "busy", "declared")

    def __init__(self) -> None:
        self.connections = 0      # open connections from this address
        self.busy = 0             # its requests queued or running in the pool
        self.declared = 0         # declared lengths of its frames read or being handled

    def __repr__(self) -> str:
        return (f"<PeerShare connections={self.connections} busy={self.busy} "
                f"declared={self.declared}>")
