"""Per-component figures and failure messages from what Spark reports (pure).

Counts come from the run's accumulator (``{component: (emitted, processed, busy
seconds)}``); rates
from the counts' change over a recent window; latency from the query's recent
progress reports. A replayed batch (after a failure) counts twice.
"""

from __future__ import annotations

import re
import time
from collections import deque
from typing import Any, Iterable, Mapping, Sequence

from .plan import Plan
from .rundir import ComponentFigures
from .usercode import UserCodeError

#: Seconds of history behind a rate.
RATE_WINDOW_S = 10.0
#: Progress reports behind a mean latency.
LATENCY_BATCHES = 10
#: Longest error line put in status.json.
MAX_ERROR_LENGTH = 1000


class FigureTracker:
    """Turns cumulative counts, sampled now and then, into ComponentFigures."""

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
               now: float | None = None) -> dict[str, ComponentFigures]:
        """Figures now, given the accumulator's value and recent progress reports."""
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
            figures[cid] = ComponentFigures(
                emitted=emitted, processed=processed,
                rate=round(delta / span, 3) if span > 0 else 0.0,
                latency_ms=round(latency, 3), busy_ms=round(busy * 1000, 3))
        return figures


_COMPONENT_PREFIX = re.compile(r"^(spout|bolt) ")


def describe_failure(text: str, component_ids: Iterable[str]) -> tuple[str, str]:
    """``(component, one-line message)`` of a failed query's error text.

    User code failures carry :class:`~.usercode.UserCodeError`'s message inside
    Spark's text (a Python traceback); the last one names the component. Anything
    else gives the last line of a Python traceback if there is one, else the first
    line, and no component.
    """
    marker = UserCodeError.MARKER
    found = ""
    for line in text.splitlines():
        at = line.find(marker)
        if at >= 0:
            found = line[at + len(marker):].strip()
    if found:
        for cid in sorted(component_ids, key=len, reverse=True):
            for kind in ("spout", "bolt"):
                if found.startswith(f"{kind} {cid!r} "):
                    return cid, found[:MAX_ERROR_LENGTH]
        return "", found[:MAX_ERROR_LENGTH]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return "", "the query failed without a message"
    python = [line for line in lines if re.match(r"^[A-Za-z_][\w.]*(Error|Exception): ", line)]
    return "", (python[-1] if python else lines[0])[:MAX_ERROR_LENGTH]
