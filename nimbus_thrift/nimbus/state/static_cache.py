"""The part of a topology's row that never changes once stored (its conf, parsed, and
its structure), kept per id so that queries read only the small columns that do
change (store.py). An id is never reused, so an entry is valid until its row goes."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

#: Bytes of stored conf and topology kept parsed in memory (least recently used go
#: first): 50 topologies with 1 MB confs fit; past that a query re-reads the row.
STATIC_CACHE_BYTES = 64 << 20


class StaticCache:
    """Thread-safe, bounded by the rows' stored bytes (least recently used go first)."""

    def __init__(self, limit: int = STATIC_CACHE_BYTES) -> None:
        self._limit = limit
        self._entries: OrderedDict[str, tuple[int, dict[str, Any], bytes]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, topology_id: str) -> tuple[dict[str, Any], bytes] | None:
        with self._lock:
            cached = self._entries.get(topology_id)
            if cached is None:
                return None
            self._entries.move_to_end(topology_id)
            return cached[1], cached[2]

    def put(self, topology_id: str, size: int, conf: dict[str, Any], topology: bytes
            ) -> None:
        """Keep it, unless it alone would take more than a quarter of the cache."""
        if size > self._limit // 4:
            return
        with self._lock:
            if topology_id not in self._entries:
                self._entries[topology_id] = (size, conf, topology)
                self._bytes += size
            while self._bytes > self._limit and self._entries:
                _, (old, _, _) = self._entries.popitem(last=False)
                self._bytes -= old

    def forget(self, topology_id: str) -> None:
        with self._lock:
            cached = self._entries.pop(topology_id, None)
            if cached is not None:
                self._bytes -= cached[0]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def ids(self) -> set[str]:
        with self._lock:
            return set(self._entries)
