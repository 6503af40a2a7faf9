"""The store's readers and its writer apart (issue 26): reads use read-only connections
of their own and see the last commit; a write never waits for a read in progress, nor a
read for a write (WAL); a pooled reader sees what was committed after it was last used;
a commit's fsync runs outside the writer's lock, before the commit returns."""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from nimbus_thrift.nimbus.state.store import Store, TopologyRecord

#: A hang bound only (no test measures time): a thread that waits for the other side's
#: event this long is stuck behind it.
HANG = 10.0


def record() -> TopologyRecord:
    return TopologyRecord(
        id="wc-1-1700000000", name="wc", status="ACTIVE", prev_status=None,
        owner="alice", submitted_at=1_700_000_000.5, num_workers=1,
        executors={"split": 1}, tasks={"split": 1}, conf={}, topology=b"\x00",
        code_upload="u1", code_sha256="ab" * 32, code_bytes=1)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "nimbus.sqlite3")
    yield s
    s.close()


def test_a_pooled_reader_sees_each_later_commit(store: Store) -> None:
    rec = record()
    store.insert_topology(rec)
    assert store.topology(rec.id).status == "ACTIVE"     # type: ignore[union-attr]
    pooled = list(store._readers.idle)
    assert pooled                                       # the reader went back to the pool
    for status in ("INACTIVE", "ACTIVE", "KILLED"):
        store.set_status(rec.id, status, None)
        assert store.topology(rec.id).status == status   # type: ignore[union-attr]
    assert store._readers.idle == pooled                     # ... and was the one reused


def test_readers_are_read_only(store: Store) -> None:
    conn = store._readers.lend()
    try:
        with pytest.raises(sqlite3.OperationalError):
            conn.execute("DELETE FROM topologies")
    finally:
        store._readers.give_back(conn)


def test_a_write_commits_while_a_read_holds_its_snapshot(store: Store) -> None:
    """A reader in the middle of a read (its snapshot open, on another thread) does not
    hold up a commit: under a rollback journal the commit would wait for it (and then
    fail with 'database is locked'), so this would never finish."""
    rec = record()
    store.insert_topology(rec)
    reading, written, seen = threading.Event(), threading.Event(), []

    def slow_read() -> None:
        conn = store._readers.lend()
        try:
            conn.execute("BEGIN")
            seen.append(conn.execute("SELECT status FROM topologies").fetchall())
            reading.set()
            assert written.wait(HANG)
            # Its snapshot is the one it began with, whatever committed since.
            seen.append(conn.execute("SELECT status FROM topologies").fetchall())
            conn.execute("COMMIT")
        finally:
            store._readers.give_back(conn)

    reader = threading.Thread(target=slow_read)
    reader.start()
    try:
        assert reading.wait(HANG)
        store.set_status(rec.id, "INACTIVE", None)           # while the read is open
        with store.transaction():
            store.set_status(rec.id, "ACTIVE", None)
            store.set_status(rec.id, "KILLED", None)
        assert store.topology(rec.id).status == "KILLED"      # type: ignore[union-attr]
    finally:
        written.set()
        reader.join(HANG)
    assert not reader.is_alive()
    assert seen == [[("ACTIVE",)], [("ACTIVE",)]]
    # The reader went back to the pool and sees the last commit now.
    assert store.topology(rec.id).status == "KILLED"          # type: ignore[union-attr]


def test_many_reads_in_flight_do_not_hold_up_a_write(store: Store) -> None:
    """Reads on as many threads as the pool keeps (and more), each stopped in the middle
    of its read: every write still commits, and each read then sees it."""
    rec = record()
    store.insert_topology(rec)
    count = 24
    started = threading.Barrier(count + 1)
    go = threading.Event()
    after: list[str] = []
    lock = threading.Lock()

    def read() -> None:
        conn = store._readers.lend()
        try:
            conn.execute("BEGIN")
            conn.execute("SELECT status FROM topologies").fetchall()
            started.wait(HANG)
            assert go.wait(HANG)
            conn.execute("COMMIT")
        finally:
            store._readers.give_back(conn)
        status = store.topology(rec.id).status                # type: ignore[union-attr]
        with lock:
            after.append(status)

    threads = [threading.Thread(target=read) for _ in range(count)]
    for thread in threads:
        thread.start()
    try:
        started.wait(HANG)
        for status in ("INACTIVE", "ACTIVE", "INACTIVE"):
            store.set_status(rec.id, status, None)
    finally:
        go.set()
        for thread in threads:
            thread.join(HANG)
    assert not any(thread.is_alive() for thread in threads)
    assert after == ["INACTIVE"] * count


# --- the commit's fsync, outside the writer's lock ---------------------------------------

def _fsyncs(monkeypatch: pytest.MonkeyPatch, store: Store) -> list[tuple[str, bool]]:
    """Record each fdatasync: the file's name, and whether another thread could take the
    writer's lock meanwhile (it cannot while the committing thread holds it)."""
    calls: list[tuple[str, bool]] = []
    fdatasync = os.fdatasync

    def recording(fd: int) -> None:
        got: list[bool] = []

        def take() -> None:
            got.append(store._lock.acquire(timeout=HANG))
            if got[-1]:
                store._lock.release()
        other = threading.Thread(target=take)
        other.start()
        other.join()
        calls.append((os.readlink(f"/proc/self/fd/{fd}"), got == [True]))
        fdatasync(fd)

    monkeypatch.setattr(os, "fdatasync", recording)
    return calls


def test_a_commit_is_synced_before_it_returns_and_outside_the_lock(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    rec = record()
    store.insert_topology(rec)
    calls = _fsyncs(monkeypatch, store)
    store.set_status(rec.id, "INACTIVE", None)
    assert calls == [(f"{store.path}-wal", True)]
    with store.transaction():               # nested: one commit, one fsync, at the end
        store.set_status(rec.id, "ACTIVE", None)
        with store.transaction():
            store.set_status(rec.id, "KILLED", None)
        assert len(calls) == 1
    assert len(calls) == 2 and calls[1][1]


def test_a_rolled_back_transaction_syncs_nothing(store: Store,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    rec = record()
    store.insert_topology(rec)
    calls = _fsyncs(monkeypatch, store)
    with pytest.raises(RuntimeError):
        with store.transaction():
            store.set_status(rec.id, "INACTIVE", None)
            raise RuntimeError("changed my mind")
    assert calls == []
    assert store.topology(rec.id).status == "ACTIVE"      # type: ignore[union-attr]


def _open_files() -> set[str]:
    names = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            names.add(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:         # the listing's own descriptor, closed by now
            pass
    return names


def test_close_leaves_no_descriptor_of_the_wal(tmp_path: Path) -> None:
    s = Store(tmp_path / "nimbus.sqlite3")
    s.insert_topology(record())
    wal = str(tmp_path / "nimbus.sqlite3-wal")
    assert wal in _open_files()
    s.close()
    # SQLite removes the WAL with its last connection: a descriptor left open would
    # read "...-wal (deleted)".
    assert not [name for name in _open_files() if name.startswith(wal)]


def test_without_a_wal_sqlite_syncs_each_commit_itself(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file system that refuses the WAL (journal_mode answers 'delete'): the writer
    keeps synchronous=FULL, and there is no WAL to sync."""
    connect = sqlite3.connect

    class NoWal(sqlite3.Connection):
        def execute(self, sql: str, *args: object) -> sqlite3.Cursor:
            if sql == "PRAGMA journal_mode=WAL":
                sql = "PRAGMA journal_mode=DELETE"
            return super().execute(sql, *args)                          # type: ignore[arg-type]

    monkeypatch.setattr(sqlite3, "connect",
                        lambda *a, **k: connect(*a, **k, factory=NoWal))
    s = Store(tmp_path / "nimbus.sqlite3")
    try:
        calls = _fsyncs(monkeypatch, s)
        s.insert_topology(record())
        s.set_status("wc-1-1700000000", "INACTIVE", None)
        assert s._db.execute("PRAGMA synchronous").fetchall() == [(2,)]     # FULL
        assert calls == []
        assert s.topology("wc-1-1700000000").status == "INACTIVE"  # type: ignore[union-attr]
    finally:
        s.close()
