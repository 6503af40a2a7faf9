"""Rate-limited log lines: at most one per key (a peer's address) per interval, with a
count of the ones held back, so a flood of refusals costs a few lines, not one each.

A refusal is worth a log line, but a client hammering a limit must not turn the log
into its amplifier (a 30-byte request would otherwise cost a 200-byte line, forever).
One rule, two faces:

- :class:`LogThrottle` decides and logs nothing: no lock, no clock (the caller passes
  ``now``). The selector uses it from its one thread, and logs what the windows that
  ended held back when it sweeps (:meth:`LogThrottle.expire`).
- :class:`RateLimitedLog` is a throttle behind a lock, with a clock and a logger, for
  the threads that run calls (the daemon's transfers): the next line logged for a key
  carries ``suppressed=N``.

The number of keys is bounded (``max_keys``); what becomes of a new key when the table
is full is the :class:`Overflow` rule.
"""

from __future__ import annotations

import enum
import threading
import time
from typing import Any, Callable


class Overflow(enum.Enum):
    """What a throttle does with a new key when it already holds ``max_keys``."""

    #: New keys share one window, :data:`OTHERS`: an attacker with many addresses gets
    #: one line per interval for all of them, and the table cannot grow either.
    SHARE = "share"
    #: Keys whose interval has passed are forgotten first, then the oldest (its count
    #: of lines held back is lost, which only makes a later line say less; it never
    #: makes the log louder).
    EVICT = "evict"


#: Seconds between two lines about the same key: a human reads a log, and one line per
#: offending address every 10 s is enough to notice and locate it, while six lines a
#: minute per address cannot flood a disk.
INTERVAL = 10.0
#: Peers with a window open at once in the selector; the rest share :data:`OTHERS`.
MAX_KEYS = 1024
#: Keys a :class:`RateLimitedLog` remembers: more distinct addresses than any one host
#: has clients, and a few hundred KB at most. Larger than :data:`MAX_KEYS` because an
#: evicted key loses its count where a shared one keeps it.
MAX_LOGGED_KEYS = 4096
#: The key peers beyond MAX_KEYS share (:attr:`Overflow.SHARE`).
OTHERS = "(other peers)"


class LogThrottle:
    """Decides which lines to log; remembers how many it held back per key."""

    def __init__(self, interval: float = INTERVAL, max_keys: int = MAX_KEYS,
                 overflow: Overflow = Overflow.SHARE) -> None:
        self.interval = interval
        self.max_keys = max_keys
        self.overflow = overflow
        #: key -> [time of the last line let through, lines held back since]
        self._windows: dict[str, list[float]] = {}

    def __len__(self) -> int:
        return len(self._windows)

    def allow(self, key: str, now: float) -> int | None:
        """None: hold this line back. Otherwise log it, with the returned count of lines
        held back since the last one (from a window that closed before being reported)."""
        windows = self._windows
        window = windows.get(key)
        if window is None and len(windows) >= self.max_keys:
            if self.overflow is Overflow.SHARE:
                key = OTHERS
                window = windows.get(key)
            else:
                self._evict(now)
        if window is not None and now - window[0] < self.interval:
            window[1] += 1
            return None
        held = int(window[1]) if window is not None else 0
        if window is not None and self.overflow is Overflow.EVICT:
            del windows[key]          # re-inserted last: the oldest go first
        windows[key] = [now, 0]
        return held

    def expire(self, now: float) -> list[tuple[str, int]]:
        """Close windows that ended: return (key, lines held back) for those that held
        some back, so the caller can log the count; forget them all."""
        ended = [key for key, (last, _) in self._windows.items()
                 if now - last >= self.interval]
        report = []
        for key in ended:
            held = int(self._windows.pop(key)[1])
            if held:
                report.append((key, held))
        return report

    def _evict(self, now: float) -> None:
        """Make room for one key (:attr:`Overflow.EVICT`)."""
        self.expire(now)              # what they held back is lost, as the rule says
        while len(self._windows) >= self.max_keys:
            del self._windows[next(iter(self._windows))]


class RateLimitedLog:
    """Logs through ``logger`` (a structlog logger) what a :class:`LogThrottle` lets
    through; thread-safe."""

    def __init__(self, logger: Any, interval: float = INTERVAL, *,
                 max_keys: int = MAX_LOGGED_KEYS, overflow: Overflow = Overflow.EVICT,
                 clock: Callable[[], float] = time.monotonic):
        self._logger = logger
        self._clock = clock
        # Worker threads log refusals concurrently; the throttle itself has no lock
        # because the selector, its other user, has one thread.
        self._lock = threading.Lock()
        self.throttle = LogThrottle(interval, max_keys, overflow)

    def warning(self, event: str, key: str, **fields: Any) -> bool:
        """Log ``event`` at warning level unless ``key`` logged within the interval.
        Returns True if a line was written."""
        now = self._clock()
        with self._lock:
            held = self.throttle.allow(key, now)
        if held is None:
            return False
        if held:
            fields["suppressed"] = held
        self._logger.warning(event, **fields)
        return True
