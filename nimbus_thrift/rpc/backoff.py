"""Exponential back-off: how long to wait before trying again after ``n`` tries failed.

One schedule for every retry in the package: a client's connection attempts
(:func:`backoff_delays`), a crashed server child's restart
(:class:`.multiprocess.supervision.RestartBackoff`), and the daemon's relaunch of a
failed Spark application or standby (``nimbus/spark/recovery.py``, ``standby.py``).
Each keeps its own numbers and its own count of failures; only the rule is here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """Waits of ``initial`` seconds, then ``factor`` times longer each, never more than
    ``cap``. No jitter: none of the schedules this replaced had any, and the waits they
    make are kept as they were."""

    initial: float
    factor: float
    cap: float

    def delay(self, n: int) -> float:
        """Seconds to wait after ``n`` + 1 failures in a row (``n`` from 0): the first wait
        is ``initial``."""
        # Grown one step at a time and stopped at the cap: ``factor ** n`` alone is a
        # float overflow (OverflowError) after about 1,024 failures at a factor of 2,
        # which a child crash-looping for a few hours reaches, in the supervisor's loop.
        wait = self.initial
        for _ in range(max(0, n)):
            if wait >= self.cap:
                break
            wait *= self.factor
        return float(min(wait, self.cap))

    def delays(self, count: int) -> list[float]:
        """The first ``count`` waits (none for ``count`` <= 0)."""
        return [self.delay(n) for n in range(max(0, count))]


def backoff_delays(attempts: int, initial: float, factor: float,
                   maximum: float) -> list[float]:
    """Seconds to wait before attempts 2..``attempts``: ``initial`` times ``factor``
    to the power of the attempt's index, capped at ``maximum``."""
    return Backoff(initial, factor, maximum).delays(attempts - 1)
