"""The handler's locks: one per topology for state-changing calls, made on demand and
dropped when nobody holds or waits for them (so the table stays as small as the
number of topologies being changed right now).

Why per topology: a slow change to one topology (a launcher stopping a job, a timer
action) must not delay a change to another one, nor any read (reads take no lock).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator


class _Entry:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        # Reentrant: a timer action may call helpers that take the same topology's lock.
        self.lock = threading.RLock()
        self.users = 0


class KeyedLocks:
    """``with locks.hold(key):`` serialises the holders of one key, never two keys."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._entries: dict[str, _Entry] = {}

    @contextmanager
    def hold(self, key: str) -> Iterator[None]:
        with self._guard:
            entry = self._entries.get(key)
            if entry is None:
                entry = self._entries[key] = _Entry()
            entry.users += 1
        try:
            with entry.lock:
                yield
        finally:
            with self._guard:
                entry.users -= 1
                if entry.users == 0:
                    del self._entries[key]

    def __len__(self) -> int:
        """Keys held or waited for right now."""
        with self._guard:
            return len(self._entries)
