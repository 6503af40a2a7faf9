"""Web access logs: files landing in a directory -> parse -> aggregate -> SQLite.

    nimbus-thrift submit examples/weblogs.py --conf weblogs.inbox=/tmp/weblogs/in \
        --conf weblogs.db=/tmp/weblogs/report.sqlite --wait

Drop access-log files (Common Log Format) into the inbox. A file must be complete when
its name appears (write it elsewhere, then rename it in) and must stay there: its place
in the directory listing is its offset, which is how a replayed batch re-reads it.
Lines that do not parse go to the ``bad`` stream and land in the ``rejects`` table, with
the file and line number; good lines are counted per (path, status) with bytes summed.
Both tables are written idempotently per batch, so a crash never counts a line twice.
"""

from __future__ import annotations

import os
import re
import sqlite3
import zlib
from pathlib import Path
from typing import Any, Iterator

from nimbus_thrift.topology import (Bolt, Context, Grouping, KeyState, Spout, StatefulBolt,
                                    Stream, Topology)

# host ident user [time] "method path proto" status bytes
LINE = re.compile(r'^(\S+) \S+ \S+ \[([^\]]+)\] "(\S+) (\S+)[^"]*" (\d{3}) (\d+|-)')


def _write(conf: dict[str, Any], sql: str, rows: list[tuple[Any, ...]]) -> None:
    """Run ``sql`` for every row in one transaction of the report database."""
    db = sqlite3.connect(conf.get("weblogs.db", "/tmp/weblogs-report.sqlite"), timeout=30)
    try:
        with db:
            db.execute("CREATE TABLE IF NOT EXISTS hits (path TEXT, status INTEGER, "
                       "hits INTEGER, bytes INTEGER, PRIMARY KEY (path, status))")
            db.execute("CREATE TABLE IF NOT EXISTS rejects (file TEXT, line INTEGER, "
                       "text TEXT, PRIMARY KEY (file, line))")
            db.executemany(sql, rows)
    finally:
        db.close()


class InboxSpout(Spout):
    """Each task owns the files whose name hashes to it; offset i is its i-th file in
    name order. New files must sort after old ones (timestamped names do)."""

    outputs = {"file": str, "line": int, "text": str}

    def initialize(self, conf: dict[str, Any], context: Context) -> None:
        self.inbox = Path(conf.get("weblogs.inbox", "/tmp/weblogs-inbox"))
        self.task, self.tasks = context.task, context.parallelism

    def _files(self) -> list[str]:
        try:
            names = sorted(e.name for e in os.scandir(self.inbox)
                           if e.is_file() and not e.name.startswith("."))
        except FileNotFoundError:
            return []
        return [n for n in names if zlib.crc32(n.encode()) % self.tasks == self.task]

    def available(self) -> int | None:
        return len(self._files())

    def read(self, start: int, end: int) -> Iterator[tuple[str, int, str]]:
        for name in self._files()[start:end]:
            with open(self.inbox / name, encoding="utf-8", errors="replace") as f:
                for number, text in enumerate(f, 1):
                    yield (name, number, text.rstrip("\n"))


class ParseBolt(Bolt):
    outputs = [Stream("default", {"path": str, "status": int, "bytes": int}),
               Stream("bad", {"file": str, "line": int, "text": str})]

    def process(self, tup: Any) -> Iterator[tuple[str, int, int]]:
        match = LINE.match(tup.text)
        if match is None:
            self.emit((tup.file, tup.line, tup.text[:500]), stream="bad")
            return
        size = match.group(6)
        yield (match.group(4).split("?", 1)[0], int(match.group(5)),
               0 if size == "-" else int(size))


class TrafficBolt(StatefulBolt):
    """Hits and bytes per (path, status), kept in Spark's state store."""

    outputs = {"path": str, "status": int, "hits": int, "bytes": int}

    def initial_state(self, key: tuple[Any, ...]) -> tuple[int, int]:
        return (0, 0)

    def process(self, tup: Any, state: KeyState) -> Iterator[tuple[str, int, int, int]]:
        hits, size = state.value
        state.value = (hits + 1, size + tup.bytes)
        yield (tup.path, tup.status, hits + 1, size + tup.bytes)


class ReportSink(Bolt):
    """Upserts the newest totals: the same batch written twice gives the same table."""

    outputs: list[str] = []

    def initialize(self, conf: dict[str, Any], context: Context) -> None:
        self.conf = conf
        self.rows: dict[tuple[str, int], tuple[int, int]] = {}

    def process(self, tup: Any) -> None:
        key = (tup.path, tup.status)
        if tup.hits > self.rows.get(key, (0, 0))[0]:
            self.rows[key] = (tup.hits, tup.bytes)

    def end_batch(self, batch_id: int) -> None:
        if self.rows:
            _write(self.conf,
                   "INSERT INTO hits VALUES (?, ?, ?, ?) ON CONFLICT(path, status) DO "
                   "UPDATE SET hits = max(hits, excluded.hits), "
                   "bytes = CASE WHEN excluded.hits >= hits THEN excluded.bytes "
                   "ELSE bytes END",
                   [(p, s, h, b) for (p, s), (h, b) in self.rows.items()])
        self.rows.clear()


class RejectSink(Bolt):
    outputs: list[str] = []

    def initialize(self, conf: dict[str, Any], context: Context) -> None:
        self.conf = conf
        self.rows: list[tuple[str, int, str]] = []

    def process(self, tup: Any) -> None:
        self.rows.append((tup.file, tup.line, tup.text))

    def end_batch(self, batch_id: int) -> None:
        if self.rows:
            _write(self.conf, "INSERT OR REPLACE INTO rejects VALUES (?, ?, ?)", self.rows)
        self.rows.clear()


class WebLogs(Topology):
    inbox = InboxSpout.spec(par=2)
    parse = ParseBolt.spec(inputs={inbox: Grouping.shuffle}, par=2)
    traffic = TrafficBolt.spec(inputs={parse: Grouping.fields("path", "status")}, par=2)
    report = ReportSink.spec(inputs={traffic: Grouping.global_}, par=1)
    rejects = RejectSink.spec(inputs={parse["bad"]: Grouping.shuffle}, par=1)
