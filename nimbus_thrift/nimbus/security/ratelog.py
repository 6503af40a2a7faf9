"""Rate-limited log lines: at most one line per key (a peer address) per interval.

A refusal is worth a log line, but a client hammering a limit must not turn the log
into its amplifier (a 30-byte request would otherwise cost a 200-byte line, forever).
The first refusal of a key is logged at once; the ones after it within ``interval``
are only counted, and the next line logged for that key carries ``suppressed=N``.

Memory is bounded: at most ``max_keys`` keys are remembered; when full, keys whose
interval has passed are forgotten first, then the oldest (its pending count is lost,
which only makes a later line say less; it never makes the log louder).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

#: A human reads a log: one line per offending address every 10 s is enough to notice
#: and locate it, and 6 lines a minute per address cannot flood a disk.
DEFAULT_INTERVAL_SECS = 10.0
#: Keys remembered at once: more distinct addresses than any one host has clients, and
#: a few hundred KB at most.
DEFAULT_MAX_KEYS = 4096


class RateLimitedLog:
    """Logs through ``logger`` (a structlog logger); thread-safe."""

    def __init__(self, logger: Any, interval: float = DEFAULT_INTERVAL_SECS, *,
                 max_keys: int = DEFAULT_MAX_KEYS,
                 clock: Callable[[], float] = time.monotonic):
        self._logger = logger
        self.interval = interval
        self.max_keys = max_keys
        self._clock = clock
        self._lock = threading.Lock()
        # key -> [time of the last line logged, lines suppressed since]
        self._keys: dict[str, list[float]] = {}

    def warning(self, event: str, key: str, **fields: Any) -> bool:
        """Log ``event`` at warning level unless ``key`` logged within the interval.
        Returns True if a line was written."""
        now = self._clock()
        with self._lock:
            entry = self._keys.get(key)
            if entry is not None and now - entry[0] < self.interval:
                entry[1] += 1
                return False
            suppressed = int(entry[1]) if entry is not None else 0
            if entry is None:
                self._make_room(now)
            else:
                del self._keys[key]          # re-inserted last: the oldest go first
            self._keys[key] = [now, 0]
        if suppressed:
            fields["suppressed"] = suppressed
        self._logger.warning(event, **fields)
        return True

    def _make_room(self, now: float) -> None:
        if len(self._keys) < self.max_keys:
            return
        for key in [k for k, (last, _) in self._keys.items() if now - last >= self.interval]:
            del self._keys[key]
        while len(self._keys) >= self.max_keys:
            del self._keys[next(iter(self._keys))]
