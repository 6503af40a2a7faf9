"""Rate-limited log lines: at most one per key (a peer's address) per interval, with a
count of the ones held back, so a flood of refusals costs a few lines, not one each.

Only the selector thread uses it (no lock). The number of keys is bounded: past
:data:`MAX_KEYS`, new keys share one window, so an attacker with many addresses cannot
grow it without bound either.
"""

from __future__ import annotations

#: Seconds between two lines about the same peer: a burst of refusals shows up within
#: seconds, and a sustained one costs six lines a minute per peer.
INTERVAL = 10.0
#: Peers with a window open at once; the rest share :data:`OTHERS`.
MAX_KEYS = 1024
#: The key peers beyond MAX_KEYS share.
OTHERS = "(other peers)"


class LogThrottle:
    """Decides which lines to log; remembers how many it held back per key."""

    def __init__(self, interval: float = INTERVAL, max_keys: int = MAX_KEYS) -> None:
        self.interval = interval
        self.max_keys = max_keys
        #: key -> [window end, lines held back in this window]
        self._windows: dict[str, list[float]] = {}

    def __len__(self) -> int:
        return len(self._windows)

    def allow(self, key: str, now: float) -> int | None:
        """None: hold this line back. Otherwise log it, with the returned count of lines
        held back since the last one (from a window that closed before being reported)."""
        windows = self._windows
        window = windows.get(key)
        if window is None and len(windows) >= self.max_keys:
            key = OTHERS
            window = windows.get(key)
        if window is not None and now < window[0]:
            window[1] += 1
            return None
        held = int(window[1]) if window is not None else 0
        windows[key] = [now + self.interval, 0]
        return held

    def expire(self, now: float) -> list[tuple[str, int]]:
        """Close windows that ended: return (key, lines held back) for those that held
        some back, so the caller can log the count; forget them all."""
        ended = [key for key, (end, _) in self._windows.items() if now >= end]
        report = []
        for key in ended:
            held = int(self._windows.pop(key)[1])
            if held:
                report.append((key, held))
        return report
