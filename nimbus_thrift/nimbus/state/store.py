"""The daemon's durable state: one SQLite database (WAL) under the data directory.

What is here is what was acknowledged: a call that changes state commits before it
returns, and its commit survives a killed process and a power cut: the WAL is fsynced
before the commit returns (what ``synchronous=FULL`` does, done by ``Store._sync``
after the writer's lock is let go, see below). Files (uploaded code) live beside the
database; their rows say which are complete.

Tables::

    meta        key/value: schema version, the topology id counter
    topologies  one row per known topology (KILLED ones too, until removed)
    actions     the pending timer of a topology: 'remove' after a kill, 'rebalance'
    errors      errors reported for a topology's components
    uploads     code uploads: 'open' (chunks arriving) or 'complete' (checksummed)
    blobs       the blob store's keys: the current version's file, size, checksum, ACL
    blob_uploads  blob uploads in progress (creates and updates of a key)
    blob_owners the principal that created each key (blobs per principal)

Writes go through one connection, serialised by a lock: every statement takes
microseconds, and the RPC workers would only queue on SQLite's own lock otherwise. The
commit's fsync is not under that lock: the writer commits with ``synchronous=NORMAL``
(WAL frames written, not synced) and fsyncs the WAL after it lets the lock go. A thread
that waits for the disk gives the GIL away and, under a read-heavy load, waits its turn
to get it back behind every busy worker; holding the writer's lock through that made
every other state change wait behind the reads too (measured in-process, 500
topologies, 16 threads reading, 5 deactivating and activating: 87-268 ms of each
deactivate+activate went in waiting for the writer's lock with the fsync under it,
18-20 ms without; p50 105-162 ms, then 66-88 ms). One fsync covers every frame written
before it, so a commit is durable when its own ``_sync`` returns; another thread may
read it a moment before that (a power cut then takes back what nobody was told).

Reads never wait behind a writer: outside a transaction they use a pooled read-only
connection of their own (WAL lets readers see the last commit while
a write is in progress); a read inside a transaction of the same thread uses the
writer's connection, so it sees that transaction's uncommitted rows. SQLite connections
are not shared between threads at once: each pooled connection is lent to one thread
at a time.

A topology's conf and structure never change once stored (an id is never reused), so
they are cached, parsed, per id (bounded by bytes; dropped when the row is deleted):
queries then read only the small columns that do change. Listing reads only those.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from .journal import Change, Journal, Statement
from .readers import ReaderPool
from .static_cache import StaticCache
from .rows import Action, Blob, BlobUpload, TopologyListing, TopologyRecord, Upload

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS topologies (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    status TEXT NOT NULL,
    prev_status TEXT,
    owner TEXT NOT NULL,
    submitted_at REAL NOT NULL,
    num_workers INTEGER NOT NULL,
    executors TEXT NOT NULL,
    tasks TEXT NOT NULL,
    conf TEXT NOT NULL,
    topology BLOB NOT NULL,
    code_upload TEXT NOT NULL,
    code_sha256 TEXT NOT NULL,
    code_bytes INTEGER NOT NULL
);
-- Which topologies use an upload (the sweep, recovery): without it a sweep scanned
-- every row once per kept upload, ~70 s at 10,000 topologies.
CREATE INDEX IF NOT EXISTS topologies_by_upload ON topologies(code_upload);
CREATE TABLE IF NOT EXISTS actions (
    topology_id TEXT PRIMARY KEY REFERENCES topologies(id) ON DELETE CASCADE,
    kind TEXT NOT NULL,
    due_at REAL NOT NULL,
    options TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS errors (
    topology_id TEXT NOT NULL REFERENCES topologies(id) ON DELETE CASCADE,
    component TEXT NOT NULL,
    message TEXT NOT NULL,
    time_secs INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS errors_by_topology ON errors(topology_id);
CREATE TABLE IF NOT EXISTS uploads (
    id TEXT PRIMARY KEY,
    location TEXT NOT NULL UNIQUE,
    state TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    sha256 TEXT,
    created_at REAL NOT NULL,
    touched_at REAL NOT NULL,
    completed_at REAL
);
CREATE TABLE IF NOT EXISTS blobs (
    key TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    file TEXT NOT NULL UNIQUE,
    bytes INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    acl TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS blob_uploads (
    id TEXT PRIMARY KEY,
    key TEXT NOT NULL,
    kind TEXT NOT NULL,
    acl TEXT,
    bytes INTEGER NOT NULL,
    owner TEXT,
    created_at REAL NOT NULL,
    touched_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS blob_uploads_by_key ON blob_uploads(key);
CREATE TABLE IF NOT EXISTS blob_owners (key TEXT PRIMARY KEY, owner TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS blob_owners_by_owner ON blob_owners(owner);
"""

#: Errors kept per topology: the newest, so a crash loop cannot grow the database.
MAX_ERRORS_PER_TOPOLOGY = 100

#: The columns of a topology that change after submit, in table order, then the size
#: of the immutable ones (for the cache's accounting).
_MUTABLE_COLUMNS = ("id, name, status, prev_status, owner, submitted_at, num_workers, "
                    "executors, tasks, code_upload, code_sha256, code_bytes, "
                    "length(conf) + length(topology)")

#: The columns of a topology a listing reads (TopologyListing's fields, in order).
_LISTING_COLUMNS = ("id, name, status, prev_status, owner, submitted_at, num_workers, "
                    "executors, tasks")


class StoreError(Exception):
    """The database is unusable (newer schema, corrupt file); the message says which."""


class Store:
    """Typed access to the state database. Thread-safe."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot open the state database {path}: {exc}") from None
        try:
            # Pages freed by deletes go back to the file system (vacuum): before any
            # table, or for a database made before, with one VACUUM below.
            self._db.execute("PRAGMA auto_vacuum=INCREMENTAL")
            mode = self._db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            # The commit's fsync is _sync's, outside the lock (see the module docstring);
            # checkpoints still sync the WAL and the database file themselves. A file
            # system that cannot hold a WAL keeps its journal, and SQLite syncs it.
            self._wal_synced = str(mode).lower() == "wal"
            self._db.execute("PRAGMA synchronous=" +
                             ("NORMAL" if self._wal_synced else "FULL"))
            self._db.execute("PRAGMA foreign_keys=ON")
            self._db.execute("PRAGMA busy_timeout=5000")
        except sqlite3.DatabaseError as exc:
            self._db.close()            # a file that is not a database stays closed
            raise StoreError(f"cannot open the state database {path}: {exc}") from None
        self._lock = threading.RLock()
        self._wal: int | None = None            # the WAL's descriptor, for _sync
        self._wal_lock = threading.Lock()
        self._syncing = 0                       # fsyncs running (close waits for none)
        self._depth = 0
        self._owner: int | None = None      # the thread inside a transaction
        self._readers = ReaderPool(path)
        self._closed = False
        self._static = StaticCache()
        #: Told a topology's id after each commit that changed its row or its errors
        #: (:meth:`watch`); ids changed by the transaction in progress wait in _changed.
        self._watchers: list[Callable[[str], None]] = []
        self._changed: set[str] = set()
        #: Where commits go first in HA mode (journal.py), and the transaction's writes.
        self._journal: Journal | None = None
        self._pending: list[Statement] = []
        try:
            with self.transaction():
                for statement in filter(str.strip, _SCHEMA.split(";")):
                    self._db.execute(statement)
                row = self._db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
                if row is None:
                    self._db.execute("INSERT INTO meta VALUES ('schema', ?)",
                                     (SCHEMA_VERSION,))
                elif int(row[0]) > SCHEMA_VERSION:
                    raise StoreError(f"{path} has schema version {row[0]}, newer than this "
                                     f"nimbus-thrift understands ({SCHEMA_VERSION})")
            if self._db.execute("PRAGMA auto_vacuum").fetchone()[0] != 2:   # INCREMENTAL
                self._db.execute("VACUUM")
        except BaseException:
            # The caller never gets the object to close: do not leave the file open.
            self._db.close()
            raise

    def close(self) -> None:
        self._closed = True
        self._readers.close()
        with self._lock:
            self._db.close()
        with self._wal_lock:
            if self._wal is not None and not self._syncing:
                os.close(self._wal)
            self._wal = None                    # else the last _sync closes it

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Group statements into one atomic commit; nested uses join the outer one. The
        outer one returns once its commit is on disk."""
        committed = False
        with self._lock:
            if self._depth == 0:
                self._db.execute("BEGIN IMMEDIATE")
                self._owner = threading.get_ident()
            self._depth += 1
            try:
                yield
            except BaseException:
                self._depth -= 1
                if self._depth == 0:
                    self._end_failed()
                raise
            self._depth -= 1
            if self._depth == 0:
                if self._pending:
                    pending, self._pending = self._pending, []
                    if self._journal is not None:
                        try:
                            position = self._journal.record(Change(tuple(pending)))
                        except BaseException:
                            self._end_failed()
                            raise
                        if position is not None:
                            self._set_position(position)
                self._owner = None
                self._db.execute("COMMIT")
                committed = True
                changed, self._changed = self._changed, set()
                for topology_id in changed:     # told after the commit: a reader
                    self.notify(topology_id)    # told earlier could cache the old row
        if committed and self._wal_synced:
            self._sync()

    def _end_failed(self) -> None:
        self._owner = None
        self._changed.clear()
        self._pending.clear()
        self._db.execute("ROLLBACK")

    def set_journal(self, journal: Journal | None) -> None:
        """Send every commit to ``journal`` first (HA mode); None: commit alone."""
        with self._lock:
            self._journal = journal

    def journal_position(self) -> int:
        """The position of the last journal entry this store holds (0: none)."""
        rows = self._query("SELECT value FROM meta WHERE key='journal_position'")
        return int(rows[0][0]) if rows else 0

    def _set_position(self, position: int) -> None:
        # Beside the rows it brought, in the same transaction; not journaled itself.
        self._db.execute("INSERT OR REPLACE INTO meta VALUES ('journal_position', ?)",
                         (position,))

    def apply(self, change: Change, position: int | None = None) -> bool:
        """Replay a change another store committed (a replica's side of the journal):
        its statements in one transaction, not journaled again, with its journal
        ``position``; the watchers are told as after a commit of this store's own.
        Returns False, changing nothing, for a position this store already holds."""
        with self._lock:
            if position is not None and position <= self.journal_position():
                return False
            journal, self._journal = self._journal, None
            try:
                with self.transaction():
                    for statement in change.statements:
                        self._db.execute(statement.sql, statement.params)
                        if statement.topology is not None:
                            self._changed.add(statement.topology)
                            if statement.sql.startswith("DELETE FROM topologies"):
                                self._forget(statement.topology)
                    if position is not None:      # after them, as the leader wrote it
                        self._set_position(position)
                    self._pending.clear()
            finally:
                self._journal = journal
        return True

    # --- a replica's copy as a whole (HA mode) -----------------------------------------
    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """No commit of this store happens while the block runs."""
        with self._lock:
            yield

    def is_empty(self) -> bool:
        """True when no table holds a row (meta aside): nothing to lose."""
        return not any(self._query(f"SELECT 1 FROM {table} LIMIT 1") for table in (
            "topologies", "uploads", "blobs", "blob_uploads", "errors", "actions"))

    def local_meta(self, key: str) -> str | None:
        rows = self._query("SELECT value FROM meta WHERE key=?", (key,))
        return str(rows[0][0]) if rows else None

    def set_local_meta(self, key: str, value: str | int | None) -> None:
        """A meta value of this copy alone (not journaled): its cluster, its position;
        None removes it."""
        with self._lock:
            if value is None:
                self._db.execute("DELETE FROM meta WHERE key=?", (key,))
            else:
                self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def backup_to(self, path: Path) -> None:
        """A consistent copy of the database at ``path`` (SQLite's backup)."""
        with self._lock:
            target = sqlite3.connect(path)
            try:
                self._db.backup(target)
            finally:
                target.close()

    def restore_from(self, path: Path) -> None:
        """Replace every row with those of the database at ``path`` (a snapshot of
        another copy); the watchers are told of every topology before and after."""
        with self._lock:
            before = set(self.topology_ids())
            source = sqlite3.connect(path)
            try:
                source.backup(self._db)
            finally:
                source.close()
            self._static.clear()
            changed = before | set(self.topology_ids())
        for topology_id in changed:
            self.notify(topology_id)

    def _sync(self) -> None:
        """Make every commit so far durable: fsync the WAL (its frames are written at
        the commit, under the writer's lock; this runs after it)."""
        with self._wal_lock:
            if self._wal is None:
                if self._closed:
                    return
                # The writer keeps the database open, so its WAL is never removed
                # (SQLite deletes it when the last connection closes).
                self._wal = os.open(f"{self.path}-wal", os.O_RDONLY | os.O_CLOEXEC)
            wal = self._wal
            self._syncing += 1
        try:
            # fdatasync, as SQLite syncs its WAL on Linux: the frames and the file's
            # size, not its times.
            os.fdatasync(wal)
        finally:
            with self._wal_lock:
                self._syncing -= 1
                if self._wal is None and not self._syncing:     # closed meanwhile
                    os.close(wal)

    def watch(self, watcher: Callable[[str], None]) -> None:
        """Call ``watcher(topology_id)`` after each commit that changed the topology's
        row or its errors, and at :meth:`notify` (what caches answers from them)."""
        self._watchers.append(watcher)

    def notify(self, topology_id: str) -> None:
        """Tell the watchers ``topology_id`` changed (its work directory's settings:
        the callers that write them say so)."""
        for watcher in self._watchers:
            watcher(topology_id)

    def _run(self, sql: str, params: tuple[Any, ...] = (),
             topology: str | None = None) -> sqlite3.Cursor:
        with self.transaction():
            if topology is not None:
                self._changed.add(topology)
            self._pending.append(Statement(sql, params, topology))
            return self._db.execute(sql, params)

    def _in_transaction(self) -> bool:
        return self._owner == threading.get_ident()

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        if self._in_transaction():
            with self._lock:
                return self._db.execute(sql, params).fetchall()
        conn = self._readers.lend()
        try:
            return conn.execute(sql, params).fetchall()
        finally:
            self._readers.give_back(conn)

    # --- ids ------------------------------------------------------------------------
    def next_counter(self) -> int:
        """The next value of the topology id counter (Storm's ``name-N-secs``)."""
        with self.transaction():
            row = self._db.execute("SELECT value FROM meta WHERE key='counter'").fetchone()
            value = int(row[0]) + 1 if row else 1
            self._run("INSERT OR REPLACE INTO meta VALUES ('counter', ?)", (value,))
            return value

    # --- topologies -----------------------------------------------------------------
    def insert_topology(self, rec: TopologyRecord) -> None:
        self._run("INSERT INTO topologies VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                  (rec.id, rec.name, rec.status, rec.prev_status, rec.owner,
                   rec.submitted_at, rec.num_workers, json.dumps(rec.executors),
                   json.dumps(rec.tasks), json.dumps(rec.conf), rec.topology,
                   rec.code_upload, rec.code_sha256, rec.code_bytes), rec.id)

    def topology(self, topology_id: str) -> TopologyRecord | None:
        rows = self._query(f"SELECT {_MUTABLE_COLUMNS} FROM topologies WHERE id=?",
                           (topology_id,))
        return self._record(rows[0]) if rows else None

    def topology_named(self, name: str) -> TopologyRecord | None:
        rows = self._query(f"SELECT {_MUTABLE_COLUMNS} FROM topologies WHERE name=?",
                           (name,))
        return self._record(rows[0]) if rows else None

    def name_taken(self, name: str) -> bool:
        return bool(self._query("SELECT 1 FROM topologies WHERE name=?", (name,)))

    def topologies(self) -> list[TopologyRecord]:
        records = [self._record(r) for r in self._query(
            f"SELECT {_MUTABLE_COLUMNS} FROM topologies ORDER BY submitted_at, id")]
        return [rec for rec in records if rec is not None]

    def topology_ids(self) -> list[str]:
        """Every topology's id, in submission order (nothing decoded)."""
        return [r[0] for r in self._query(
            "SELECT id FROM topologies ORDER BY submitted_at, id")]

    def topology_count(self) -> int:
        """How many topologies are stored (SQLite counts them; no row is read)."""
        return int(self._query("SELECT count(*) FROM topologies")[0][0])

    def listing(self) -> list[TopologyListing]:
        """The small columns of every topology, in submission order, undecoded."""
        return [TopologyListing(*r) for r in self._query(
            f"SELECT {_LISTING_COLUMNS} FROM topologies ORDER BY submitted_at, id")]

    def listing_of(self, topology_ids: list[str]) -> list[TopologyListing]:
        """The small columns of those of ``topology_ids`` that exist (at most a few
        hundred: one statement), undecoded, in no particular order."""
        marks = ",".join("?" * len(topology_ids))
        return [TopologyListing(*r) for r in self._query(
            f"SELECT {_LISTING_COLUMNS} FROM topologies WHERE id IN ({marks})",
            tuple(topology_ids))]

    def _record(self, row: Any) -> TopologyRecord | None:
        """The record of ``row`` (the small columns); None if it was deleted meanwhile."""
        (tid, name, status, prev, owner, submitted, workers, executors, tasks,
         upload, sha, size, static_bytes) = row
        static = self._static_of(tid, static_bytes or 0)
        if static is None:
            return None
        conf, topology = static
        return TopologyRecord(tid, name, status, prev, owner, submitted, workers,
                              json.loads(executors), json.loads(tasks), conf, topology,
                              upload, sha, size)

    def _static_of(self, topology_id: str, size: int
                   ) -> tuple[dict[str, Any], bytes] | None:
        """The topology's conf (parsed) and structure (bytes), from the cache or read."""
        cached = self._static.get(topology_id)
        if cached is not None:
            return cached
        rows = self._query("SELECT conf, topology FROM topologies WHERE id=?",
                           (topology_id,))
        if not rows:       # deleted between the two reads: as if read a moment later
            return None
        conf, topology = json.loads(rows[0][0]), bytes(rows[0][1])
        # Not inside a transaction: what it reads may still be rolled back.
        if not self._in_transaction():
            self._static.put(topology_id, size, conf, topology)
        return conf, topology

    def _forget(self, topology_id: str) -> None:
        self._static.forget(topology_id)

    def cached_ids(self) -> set[str]:
        """Ids whose conf and structure are cached (for tests and diagnostics)."""
        return self._static.ids()

    def set_status(self, topology_id: str, status: str, prev_status: str | None) -> None:
        self._run("UPDATE topologies SET status=?, prev_status=? WHERE id=?",
                  (status, prev_status, topology_id), topology_id)

    def set_parallelism(self, topology_id: str, num_workers: int,
                        executors: dict[str, int]) -> None:
        self._run("UPDATE topologies SET num_workers=?, executors=? WHERE id=?",
                  (num_workers, json.dumps(executors), topology_id), topology_id)

    def delete_topology(self, topology_id: str) -> None:
        self._run("DELETE FROM topologies WHERE id=?", (topology_id,), topology_id)
        self._forget(topology_id)

    # --- actions (durable timers) ----------------------------------------------------
    def set_action(self, action: Action) -> None:
        """Arm (or re-arm) the topology's one pending action."""
        self._run("INSERT OR REPLACE INTO actions VALUES (?,?,?,?)",
                  (action.topology_id, action.kind, action.due_at,
                   json.dumps(action.options)))

    def clear_action(self, topology_id: str) -> None:
        self._run("DELETE FROM actions WHERE topology_id=?", (topology_id,))

    def action(self, topology_id: str) -> Action | None:
        rows = self._query("SELECT * FROM actions WHERE topology_id=?", (topology_id,))
        return _action(rows[0]) if rows else None

    def actions(self) -> list[Action]:
        return [_action(r) for r in self._query("SELECT * FROM actions ORDER BY due_at")]

    # --- errors ---------------------------------------------------------------------
    def add_error(self, topology_id: str, component: str, message: str,
                  time_secs: int) -> None:
        with self.transaction():
            self._run("INSERT INTO errors VALUES (?,?,?,?)",
                      (topology_id, component, message, time_secs), topology_id)
            self._run(
                "DELETE FROM errors WHERE topology_id=? AND rowid NOT IN (SELECT rowid "
                "FROM errors WHERE topology_id=? ORDER BY rowid DESC LIMIT ?)",
                (topology_id, topology_id, MAX_ERRORS_PER_TOPOLOGY))

    def errors(self, topology_id: str) -> list[tuple[str, str, int]]:
        """``(component, message, time_secs)``, oldest first."""
        return [tuple(r) for r in self._query(
            "SELECT component, message, time_secs FROM errors WHERE topology_id=? "
            "ORDER BY rowid", (topology_id,))]

    def error_counts(self) -> dict[str, dict[str, int]]:
        """Errors on record per topology and component, in one statement (what a
        /metrics scrape shows of every topology)."""
        counts: dict[str, dict[str, int]] = {}
        for topology_id, component, count in self._query(
                "SELECT topology_id, component, COUNT(*) FROM errors "
                "GROUP BY topology_id, component"):
            counts.setdefault(topology_id, {})[component] = count
        return counts

    # --- uploads --------------------------------------------------------------------
    def insert_upload(self, up: Upload) -> None:
        self._run("INSERT INTO uploads VALUES (?,?,?,?,?,?,?,?)",
                  (up.id, up.location, up.state, up.bytes, up.sha256, up.created_at,
                   up.touched_at, up.completed_at))

    def upload(self, upload_id: str) -> Upload | None:
        rows = self._query("SELECT * FROM uploads WHERE id=?", (upload_id,))
        return Upload(*rows[0]) if rows else None

    def upload_at(self, location: str) -> Upload | None:
        rows = self._query("SELECT * FROM uploads WHERE location=?", (location,))
        return Upload(*rows[0]) if rows else None

    def uploads(self) -> list[Upload]:
        return [Upload(*r) for r in self._query("SELECT * FROM uploads ORDER BY created_at")]

    def grow_upload(self, upload_id: str, size: int, touched_at: float) -> None:
        self._run("UPDATE uploads SET bytes=?, touched_at=? WHERE id=? AND state='open'",
                  (size, touched_at, upload_id))

    def complete_upload(self, upload_id: str, sha256: str, completed_at: float) -> None:
        self._run("UPDATE uploads SET state='complete', sha256=?, completed_at=?, "
                  "touched_at=? WHERE id=?", (sha256, completed_at, completed_at, upload_id))

    def delete_upload(self, upload_id: str) -> None:
        self._run("DELETE FROM uploads WHERE id=?", (upload_id,))

    def upload_in_use(self, upload_id: str) -> bool:
        return bool(self._query("SELECT 1 FROM topologies WHERE code_upload=? LIMIT 1",
                                (upload_id,)))

    def sweepable_uploads(self, idle_before: float, unused_before: float) -> list[Upload]:
        """What a sweep may delete: open uploads untouched since ``idle_before``, and
        complete ones finished before ``unused_before`` that no topology's code is.
        Chosen in SQLite: every stored topology keeps its upload, and reading each row
        into Python at every sweep cost 60-500 ms at 10,000 topologies."""
        return [Upload(*r) for r in self._query(
            "SELECT * FROM uploads WHERE (state='open' AND touched_at<=?) OR "
            "(state='complete' AND completed_at<=? AND NOT EXISTS "
            "(SELECT 1 FROM topologies WHERE code_upload=uploads.id)) ORDER BY created_at",
            (idle_before, unused_before))]

    def open_upload_count(self) -> int:
        return int(self._query("SELECT COUNT(*) FROM uploads WHERE state='open'")[0][0])

    # --- blobs ----------------------------------------------------------------------
    def blob(self, key: str) -> Blob | None:
        rows = self._query("SELECT * FROM blobs WHERE key=?", (key,))
        return Blob(*rows[0]) if rows else None

    def blobs(self) -> list[Blob]:
        return [Blob(*r) for r in self._query("SELECT * FROM blobs ORDER BY key")]

    def blob_keys(self, after: str | None, limit: int) -> list[str]:
        """Up to ``limit`` keys in order, those after ``after`` (None: from the first)."""
        if after is None:
            return [r[0] for r in self._query("SELECT key FROM blobs ORDER BY key LIMIT ?",
                                              (limit,))]
        return [r[0] for r in self._query(
            "SELECT key FROM blobs WHERE key>? ORDER BY key LIMIT ?", (after, limit))]

    def put_blob(self, blob: Blob) -> None:
        """Insert the key, or replace its row (a new version, a new ACL)."""
        self._run("INSERT OR REPLACE INTO blobs VALUES (?,?,?,?,?,?,?,?)",
                  (blob.key, blob.version, blob.file, blob.bytes, blob.sha256, blob.acl,
                   blob.created_at, blob.updated_at))

    def set_blob_acl(self, key: str, acl: str) -> None:
        self._run("UPDATE blobs SET acl=? WHERE key=?", (acl, key))

    def delete_blob(self, key: str) -> None:
        with self.transaction():
            self._run("DELETE FROM blobs WHERE key=?", (key,))
            self._run("DELETE FROM blob_owners WHERE key=?", (key,))

    def set_blob_owner(self, key: str, owner: str) -> None:
        self._run("INSERT OR REPLACE INTO blob_owners VALUES (?,?)", (key, owner))

    def blobs_of(self, owner: str) -> int:
        """The keys ``owner`` created, and its creates in progress."""
        return int(self._query(
            "SELECT (SELECT COUNT(*) FROM blob_owners WHERE owner=?) + (SELECT COUNT(*) "
            "FROM blob_uploads WHERE owner=? AND kind='create')", (owner, owner))[0][0])

    def insert_blob_upload(self, up: BlobUpload) -> None:
        self._run("INSERT INTO blob_uploads VALUES (?,?,?,?,?,?,?,?)",
                  (up.id, up.key, up.kind, up.acl, up.bytes, up.owner, up.created_at,
                   up.touched_at))

    def blob_upload(self, upload_id: str) -> BlobUpload | None:
        rows = self._query("SELECT * FROM blob_uploads WHERE id=?", (upload_id,))
        return BlobUpload(*rows[0]) if rows else None

    def blob_uploads(self) -> list[BlobUpload]:
        return [BlobUpload(*r) for r in self._query(
            "SELECT * FROM blob_uploads ORDER BY created_at")]

    def creating(self, key: str) -> BlobUpload | None:
        """The create in progress of ``key``, if any."""
        rows = self._query("SELECT * FROM blob_uploads WHERE key=? AND kind='create' "
                           "LIMIT 1", (key,))
        return BlobUpload(*rows[0]) if rows else None

    def grow_blob_upload(self, upload_id: str, size: int, touched_at: float) -> None:
        self._run("UPDATE blob_uploads SET bytes=?, touched_at=? WHERE id=?",
                  (size, touched_at, upload_id))

    def delete_blob_upload(self, upload_id: str) -> None:
        self._run("DELETE FROM blob_uploads WHERE id=?", (upload_id,))

    def stored_bytes(self) -> int:
        """What the inbox quota counts: uploads, blobs and blob uploads (acknowledged),
        and each blob row's key and ACL in UTF-8 bytes (blobs.acl.meta_bytes)."""
        meta = "LENGTH(CAST(key AS BLOB)) + COALESCE(LENGTH(CAST(acl AS BLOB)), 0)"
        rows = self._query(
            "SELECT (SELECT COALESCE(SUM(bytes), 0) FROM uploads) + "
            f"(SELECT COALESCE(SUM(bytes + {meta}), 0) FROM blobs) + "
            f"(SELECT COALESCE(SUM(bytes + {meta}), 0) FROM blob_uploads)")
        return int(rows[0][0])

    def vacuum(self, pages: int) -> int:
        """Give up to ``pages`` free pages back to the file system; the free left.
        (execute() would free one page: the pragma runs a step per page.)"""
        with self._lock:
            if not self._depth:             # executescript commits a transaction first
                self._db.executescript(f"PRAGMA incremental_vacuum({int(pages)});")
            return int(self._db.execute("PRAGMA freelist_count").fetchone()[0])


def _action(row: Any) -> Action:
    return Action(row[0], row[1], row[2], json.loads(row[3]))
