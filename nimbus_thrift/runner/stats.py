"""Per-component stats from what Spark reports (pure).

Counts come from the run's accumulator (``{component: (emitted, processed, busy
seconds)}``); rates
from the counts' change over a recent window; latency from the query's recent
progress reports. A replayed batch (after a failure) counts twice.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any, Iterable, Mapping, Sequence

from .plan import Plan
from .rundir import ReportedStats

#: Seconds of history behind a rate.
RATE_WINDOW_S = 10.0
#: Progress reports behind a mean latency.
LATENCY_BATCHES = 10


class StatsTracker:
    """Turns cumulative counts, sampled now and then, into ReportedStats."""

    def __init__(self, plan: Plan, window_s: float = RATE_WINDOW_S):
        self.plan = plan
        self.window_s = window_s
        self.history: deque[tuple[float, dict[str, tuple[int, int, float]]]] = deque()

    def counts(self, raw: Mapping[str, Sequence[float]]
               ) -> dict[str, tuple[int, int, float]]:
        """``(emitted, processed, busy seconds)`` accumulated by every component (zeros
        for those not seen, or not reported: a spout reports what it emitted only)."""
        result = {}
        for cid in self.plan.nodes:
            got = tuple(raw.get(cid, ())) + (0, 0, 0.0)
            result[cid] = (int(got[0]), int(got[1]), float(got[2]))
        return result

    def update(self, raw: Mapping[str, Sequence[float]],
               progress: Iterable[Mapping[str, Any]],
               now: float | None = None) -> dict[str, ReportedStats]:
        """Stats now, given the accumulator's value and recent progress reports."""
        now = time.monotonic() if now is None else now
        counts = self.counts(raw)
        self.history.append((now, counts))
        while len(self.history) > 2 and now - self.history[1][0] >= self.window_s:
            self.history.popleft()
        then, old = self.history[0]
        span = now - then
        durations = [float(p.get("durationMs", {}).get("triggerExecution", 0))
                     for p in list(progress)[-LATENCY_BATCHES:]]
        latency = sum(durations) / len(durations) if durations else 0.0
        figures = {}
        for cid, (emitted, processed, busy) in counts.items():
            # A spout processes nothing: its rate is what it emits.
            index = 0 if self.plan.nodes[cid].kind == "spout" else 1
            delta = counts[cid][index] - old.get(cid, (0, 0, 0.0))[index]
            figures[cid] = ReportedStats(
                emitted=emitted, processed=processed,
                rate=round(delta / span, 3) if span > 0 else 0.0,
                latency_ms=round(latency, 3), busy_ms=round(busy * 1000, 3))
        return figures
