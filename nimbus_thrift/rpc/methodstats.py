"""Per-method figures: calls by outcome and a latency histogram, for each IDL method.

Kept only when asked (``make_server(method_metrics=True)``; the Nimbus daemon asks, for
its ``/metrics``): the dispatcher then times each handler call and books it here. A
server that does not ask pays nothing, not even a branch per call (dispatch.py swaps
in the timed call path at construction).

Labels are bounded by the IDL: only methods the services declare are booked (a
client sending made-up method names cannot grow the table).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

#: Upper bounds of the latency buckets, in seconds (+Inf is implied after the last).
#: From 100 µs (a call answered from memory) to 10 s (an upload chunk on a slow disk).
BUCKETS: tuple[float, ...] = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                              0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

#: What became of a call: a reply (``ok``), an exception the IDL declares
#: (``declared``), or a TApplicationException, the request refused before the
#: handler ran included (``failed``).
OUTCOMES: tuple[str, ...] = ("ok", "declared", "failed")


@dataclass(frozen=True)
class MethodSnapshot:
    """One method's stats at one moment."""

    #: Calls by outcome (every key of :data:`OUTCOMES` present).
    outcomes: dict[str, int]
    #: Calls per latency bucket, NOT cumulative: ``len(BUCKETS) + 1`` counts, the
    #: last one above the last bound. Requests refused before the handler ran are
    #: not timed, so these sum to at most the outcomes' total.
    bucket_counts: tuple[int, ...]
    #: Seconds spent in the handler (with decoding and encoding), all timed calls.
    seconds_sum: float


class _Row:
    __slots__ = ("outcomes", "buckets", "seconds")

    def __init__(self) -> None:
        self.outcomes = [0] * len(OUTCOMES)
        self.buckets = [0] * (len(BUCKETS) + 1)
        self.seconds = 0.0


def bucket_of(secs: float) -> int:
    """Index of the bucket ``secs`` falls in (bounds are inclusive, as Prometheus's
    ``le``)."""
    for i, bound in enumerate(BUCKETS):
        if secs <= bound:
            return i
    return len(BUCKETS)


class MethodStats:
    """The table, written by every thread that runs calls, read by :meth:`snapshot`.

    One lock: workers finish calls concurrently and ``+=`` on a list item is not
    atomic between threads, so without it a busy server would lose counts. Uncontended
    it costs well under a microsecond, against the milliseconds a daemon call takes.
    """

    def __init__(self, methods: list[str]) -> None:
        self._rows = {name: _Row() for name in methods}
        self._lock = threading.Lock()

    def record(self, method: str, outcome: int, secs: float | None) -> None:
        """Book one call of ``method`` with ``outcome`` (an index into
        :data:`OUTCOMES`), timed ``secs`` (None: refused before the handler ran)."""
        row = self._rows.get(method)
        if row is None:
            return
        with self._lock:
            row.outcomes[outcome] += 1
            if secs is not None:
                row.buckets[bucket_of(secs)] += 1
                row.seconds += secs

    def snapshot(self) -> dict[str, MethodSnapshot]:
        """Every method that has been called at least once."""
        with self._lock:
            return {name: MethodSnapshot(dict(zip(OUTCOMES, row.outcomes)),
                                         tuple(row.buckets), row.seconds)
                    for name, row in self._rows.items() if any(row.outcomes)}
