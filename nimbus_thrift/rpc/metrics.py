"""Counters shared by all connections, in one named object (the selector thread is
their only writer), and the snapshot users read from ``Server.metrics()``."""

from __future__ import annotations

from dataclasses import asdict, dataclass


class ServerState:
    """Mutable counters, written only by the selector thread."""

    __slots__ = ("connections_open", "connections_accepted", "connections_refused",
                 "connections_refused_per_peer", "frames_refused", "requests_submitted",
                 "requests_completed", "requests_failed", "requests_overloaded", "timeouts",
                 "tls_handshakes", "tls_handshakes_failed", "selector_takeovers")

    def __init__(self) -> None:
        self.connections_open = 0
        self.connections_accepted = 0
        self.connections_refused = 0      # over max_connections or the per-peer cap
        self.connections_refused_per_peer = 0   # of those, over max_connections_per_peer
        self.frames_refused = 0           # bad or oversized frame lengths
        self.requests_submitted = 0       # handed to the worker pool
        self.requests_completed = 0       # outcome back: a reply or nothing (oneway)
        self.requests_failed = 0          # of those, a TApplicationException or a close
        self.requests_overloaded = 0      # refused because the worker queue was full
        # Connections closed by a deadline (first request, idle, frame read, rate, park,
        # write) or for holding the oldest unsent reply past max_unsent_reply_bytes.
        self.timeouts = 0
        self.tls_handshakes = 0           # TLS handshakes completed
        self.tls_handshakes_failed = 0    # refused, broken, plaintext, or timed out
        # Inline calls that blocked, so that a new thread took the selector's loop over
        # (inline.py). Written by the watch thread only.
        self.selector_takeovers = 0


@dataclass(frozen=True)
class MetricsSnapshot:
    """A point-in-time copy of the server's counters."""

    connections_open: int
    connections_accepted: int
    connections_refused: int
    connections_refused_per_peer: int
    bytes_reserved: int
    bytes_reserved_peak: int
    read_buffer_budget: int
    frames_parked: int
    frames_refused: int
    requests_in_flight: int
    requests_completed: int
    requests_failed: int
    requests_overloaded: int
    queue_depth: int
    timeouts: int
    #: Reply bytes held in the process for clients that have not taken them yet.
    unsent_reply_bytes: int
    #: Times the read budget admitted a frame over capacity (see memory.py).
    read_budget_overcommits: int
    #: TLS handshakes completed, and those that failed (bad or missing certificates,
    #: plaintext clients, broken connections, handshake_timeout).
    tls_handshakes: int = 0
    tls_handshakes_failed: int = 0
    #: Requests the selector ran itself (methods proven fast, see inline.py), and the
    #: times one blocked so that a new thread took over the selector's loop.
    requests_inline: int = 0
    selector_takeovers: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)
