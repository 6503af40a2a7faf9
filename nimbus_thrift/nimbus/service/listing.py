"""``getClusterInfo``'s topology summaries from stored rows, cheaply and defensively.

Cheap: a listing reads only a row's small columns (never its conf or structure), and
what is derived from them (the executor and task counts) is cached per topology id
and recomputed only when the stored text changes (a rebalance). Defensive: a row
written by an older daemon, or edited by hand, may hold values that do not fit the
IDL (an ``i32`` above 2**31-1, JSON that is not a count per component); such a value
is clamped and the summary's ``sched_status`` says what was wrong, so one bad row
never breaks the listing of the others.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any

from ..state.store import TopologyListing

#: The IDL's i32 range.
I32_MAX = 2**31 - 1
I32_MIN = -2**31


@dataclass(frozen=True)
class SummaryCounts:
    """What a summary shows of a row, checked; ``problems`` says what was clamped."""

    num_workers: int
    num_executors: int
    num_tasks: int
    problems: tuple[str, ...]


def fit_i32(what: str, value: Any, problems: list[str], lowest: int = 0) -> int:
    """``value`` as an i32 no lower than ``lowest``; a note in ``problems`` if not."""
    if isinstance(value, bool) or not isinstance(value, int):
        problems.append(f"stored {what} {value!r} is not an integer (shown as 0)")
        return 0
    if value > I32_MAX or value < max(lowest, I32_MIN):
        shown = I32_MAX if value > I32_MAX else max(lowest, I32_MIN)
        problems.append(f"stored {what} {value} does not fit the IDL's i32 "
                        f"(shown as {shown})")
        return shown
    return value


def _sum_counts(what: str, text: Any, problems: list[str]) -> int:
    try:
        counts = json.loads(text)
    except (TypeError, ValueError):
        problems.append(f"stored {what} are not readable")
        return 0
    if not isinstance(counts, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in counts.values()):
        problems.append(f"stored {what} are not a count per component")
        return 0
    return fit_i32(f"{what} total", sum(counts.values()), problems)


class SummaryCountsCache:
    """Summary counts per topology id, keyed by the stored text they were computed from."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cache: dict[Any, tuple[Any, Any, Any, SummaryCounts]] = {}

    def counts(self, row: TopologyListing) -> SummaryCounts:
        with self._lock:
            hit = self._cache.get(row.id)
        if hit is not None and hit[:3] == (row.num_workers, row.executors, row.tasks):
            return hit[3]
        problems: list[str] = []
        counts = SummaryCounts(fit_i32("num_workers", row.num_workers, problems),
                        _sum_counts("executors", row.executors, problems),
                        _sum_counts("tasks", row.tasks, problems), tuple(problems))
        with self._lock:
            self._cache[row.id] = (row.num_workers, row.executors, row.tasks, counts)
        return counts

    def forget(self, topology_id: str) -> None:
        with self._lock:
            self._cache.pop(topology_id, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._cache)


def text(value: Any) -> str:
    """A stored text column as the IDL's string (a row edited by hand may hold a number
    or a blob)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None else str(value)


def number(value: Any) -> float:
    """A stored REAL column (a time), 0 if it is not a number."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return 0.0


def secs(seconds: float) -> int:
    """Seconds as the IDL's i32, never negative (clocks can step back)."""
    return max(0, min(int(seconds), I32_MAX))
