"""The store's read-only connections: lent to one thread at a time, kept for reuse (a
connection costs ~100 us to open), so that reads never wait behind the writer (WAL
lets them see the last commit while a write is in progress)."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

#: Idle read-only connections kept for reuse: more than this many concurrent readers
#: are rare (extra ones are closed after use).
MAX_IDLE_READERS = 16


class ReaderPool:
    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()
        #: The idle connections, the last returned last.
        self.idle: list[sqlite3.Connection] = []
        self._closed = False

    def lend(self) -> sqlite3.Connection:
        with self._lock:
            if self._closed:
                raise sqlite3.ProgrammingError("Cannot operate on a closed database.")
            if self.idle:
                return self.idle.pop()
        conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        try:
            # The writer's settings, so that a read answers the same (synchronous is
            # moot: a reader never commits); query_only makes a write through a reader
            # an error rather than a second writer.
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("PRAGMA busy_timeout=5000")
            conn.execute("PRAGMA query_only=ON")
        except BaseException:
            conn.close()
            raise
        return conn

    def give_back(self, conn: sqlite3.Connection) -> None:
        with self._lock:
            if not self._closed and len(self.idle) < MAX_IDLE_READERS:
                self.idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self.idle = self.idle, []
        for conn in idle:
            conn.close()
