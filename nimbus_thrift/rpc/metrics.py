"""Counters shared by all connections, in one named object (the selector thread is
their only writer), and the snapshot users read from ``Server.metrics()``."""

from __future__ import annotations

from dataclasses import asdict, dataclass


class ServerState:
    """Mutable counters, written only by the selector thread."""

    __slots__ = ("connections_open", "connections_accepted", "connections_refused",
                 "frames_refused", "requests_submitted", "requests_completed",
                 "requests_failed", "requests_overloaded", "timeouts")

    def __init__(self) -> None:
        self.connections_open = 0
        self.connections_accepted = 0
        self.connections_refused = 0      # over max_connections
        self.frames_refused = 0           # bad or oversized frame lengths
        self.requests_submitted = 0       # handed to the worker pool
        self.requests_completed = 0       # outcome back: a reply or nothing (oneway)
        self.requests_failed = 0          # of those, a TApplicationException or a close
        self.requests_overloaded = 0      # refused because the worker queue was full
        self.timeouts = 0                 # connections closed by idle/frame/write timeouts


@dataclass(frozen=True)
class MetricsSnapshot:
    """A point-in-time copy of the server's counters."""

    connections_open: int
    connections_accepted: int
    connections_refused: int
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

    def as_dict(self) -> dict[str, int]:
        return asdict(self)
