"""One thread that runs the daemon's due work: topology actions whose wait is over
(remove after a kill, apply a rebalance) and periodic housekeeping.

The durable copy of every action is in the database; this heap is only an index of
when to look. A fired entry asks the handler to run whatever action is due for that
topology *now*, so a stale entry (a kill re-armed later, a topology already removed)
does nothing. Wall-clock times, because due times survive restarts.
"""

from __future__ import annotations

import heapq
import threading
from typing import Callable

import structlog

log = structlog.get_logger(__name__)


class Timers:
    """Call ``fire(topology_id)`` at armed times and ``sweep()`` every ``sweep_every``."""

    def __init__(self, fire: Callable[[str], None], sweep: Callable[[], None], *,
                 sweep_every: float, clock: Callable[[], float]):
        self._fire = fire
        self._sweep = sweep
        self._sweep_every = sweep_every
        self._clock = clock
        self._heap: list[tuple[float, str]] = []
        self._cond = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None

    def arm(self, topology_id: str, due_at: float) -> None:
        with self._cond:
            heapq.heappush(self._heap, (due_at, topology_id))
            self._cond.notify()

    def clear(self) -> None:
        """Forget every armed entry (a nimbus that stops leading: the durable actions
        are the new leader's to run)."""
        with self._cond:
            self._heap.clear()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="nimbus-timers", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join()

    def run_due(self) -> int:
        """Fire every entry due now; return how many fired. (The thread's step; tests
        with a fake clock call it directly.)"""
        fired = 0
        while True:
            with self._cond:
                if not self._heap or self._heap[0][0] > self._clock():
                    return fired
                _, topology_id = heapq.heappop(self._heap)
            self._call(self._fire, topology_id)
            fired += 1

    def _run(self) -> None:
        next_sweep = self._clock()
        while True:
            self.run_due()
            now = self._clock()
            if now >= next_sweep:
                self._call(self._sweep)
                next_sweep = now + self._sweep_every
            with self._cond:
                if self._stopping:
                    return
                due = min(self._heap[0][0] if self._heap else next_sweep, next_sweep)
                self._cond.wait(max(0.0, due - self._clock()))
                if self._stopping:
                    return

    @staticmethod
    def _call(func: Callable[..., None], *args: str) -> None:
        try:
            func(*args)
        except Exception:  # noqa: BLE001 - the timer thread must outlive one bad action
            log.exception("timer_action_failed", args=args)
