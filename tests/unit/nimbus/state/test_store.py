"""The SQLite state (nimbus_thrift.nimbus.state.store): round trips, constraints, durable
counters and timers, cascades, the error cap, transactions and the schema guard."""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nimbus_thrift.nimbus.state import store as store_module
from nimbus_thrift.nimbus.state.store import (MAX_ERRORS_PER_TOPOLOGY, SCHEMA_VERSION, Action,
                                        Blob, BlobUpload, Store, StoreError,
                                        TopologyRecord, Upload)

from support.store_rows import record


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "nimbus.sqlite3"


@pytest.fixture
def store(db_path: Path) -> Iterator[Store]:
    s = Store(db_path)
    yield s
    s.close()


def count(store: Store, table: str) -> int:
    return store._query(f"SELECT COUNT(*) FROM {table}")[0][0]


# --- topologies -------------------------------------------------------------------------

def test_topology_round_trip(store: Store) -> None:
    rec = record()
    store.insert_topology(rec)
    assert store.topology(rec.id) == rec
    assert store.topology_named("wc") == rec
    assert store.topologies() == [rec]
    assert isinstance(store.topology(rec.id).topology, bytes)  # type: ignore[union-attr]
    assert store.topology("nope") is None and store.topology_named("nope") is None


def test_topology_round_trip_across_reopen(db_path: Path) -> None:
    s = Store(db_path)
    s.insert_topology(record())
    s.close()
    s = Store(db_path)
    try:
        assert s.topology("wc-1-1700000000") == record()
    finally:
        s.close()


def test_topologies_ordered_by_submission(store: Store) -> None:
    store.insert_topology(record("b-2-9", "b", submitted_at=20.0))
    store.insert_topology(record("a-1-9", "a", submitted_at=10.0))
    store.insert_topology(record("c-3-9", "c", submitted_at=20.0))
    assert [r.id for r in store.topologies()] == ["a-1-9", "b-2-9", "c-3-9"]


def test_name_is_unique(store: Store) -> None:
    store.insert_topology(record("wc-1-1", "wc"))
    with pytest.raises(sqlite3.IntegrityError, match="UNIQUE.*topologies.name"):
        store.insert_topology(record("wc-2-2", "wc"))
    with pytest.raises(sqlite3.IntegrityError):
        store.insert_topology(record("wc-1-1", "other"))      # id too
    assert [r.id for r in store.topologies()] == ["wc-1-1"]


def test_set_status_and_parallelism(store: Store) -> None:
    store.insert_topology(record())
    store.set_status("wc-1-1700000000", "REBALANCING", "ACTIVE")
    store.set_parallelism("wc-1-1700000000", 5, {"sentences": 3, "split": 4})
    rec = store.topology("wc-1-1700000000")
    assert rec is not None
    assert (rec.status, rec.prev_status, rec.num_workers) == ("REBALANCING", "ACTIVE", 5)
    assert rec.executors == {"sentences": 3, "split": 4}
    assert rec.tasks == {"sentences": 1, "split": 4}            # untouched


# --- counter ----------------------------------------------------------------------------

def test_counter_counts_and_persists_across_reopen(db_path: Path) -> None:
    s = Store(db_path)
    assert [s.next_counter() for _ in range(3)] == [1, 2, 3]
    s.close()
    s = Store(db_path)
    try:
        assert s.next_counter() == 4
    finally:
        s.close()


# --- actions ----------------------------------------------------------------------------

def test_set_action_rearms_one_action_per_topology(store: Store) -> None:
    store.insert_topology(record())
    tid = "wc-1-1700000000"
    store.set_action(Action(tid, "rebalance", 100.0, {"num_workers": 3}))
    store.set_action(Action(tid, "remove", 50.0, {}))
    assert store.actions() == [Action(tid, "remove", 50.0, {})]
    assert store.action(tid) == Action(tid, "remove", 50.0, {})
    store.clear_action(tid)
    assert store.action(tid) is None and store.actions() == []


def test_actions_ordered_by_due_time(store: Store) -> None:
    for i, due in enumerate([30.0, 10.0, 20.0]):
        store.insert_topology(record(f"t-{i}-0", f"t{i}"))
        store.set_action(Action(f"t-{i}-0", "remove", due, {"i": i}))
    assert [a.due_at for a in store.actions()] == [10.0, 20.0, 30.0]


def test_action_needs_an_existing_topology(store: Store) -> None:
    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
        store.set_action(Action("ghost", "remove", 1.0, {}))


def test_delete_topology_cascades_actions_and_errors(store: Store) -> None:
    store.insert_topology(record("a-1-0", "a"))
    store.insert_topology(record("b-2-0", "b"))
    for tid in ("a-1-0", "b-2-0"):
        store.set_action(Action(tid, "remove", 1.0, {}))
        store.add_error(tid, "split", "boom", 7)
    store.delete_topology("a-1-0")
    assert store.topology("a-1-0") is None
    assert store.action("a-1-0") is None and store.errors("a-1-0") == []
    assert store.action("b-2-0") is not None and store.errors("b-2-0") == [("split", "boom", 7)]
    assert count(store, "actions") == 1 and count(store, "errors") == 1


# --- errors -----------------------------------------------------------------------------

def test_errors_oldest_first(store: Store) -> None:
    store.insert_topology(record())
    store.add_error("wc-1-1700000000", "split", "first", 1)
    store.add_error("wc-1-1700000000", "count", "second", 2)
    store.add_error("wc-1-1700000000", "split", "third", 3)
    assert store.errors("wc-1-1700000000") == [("split", "first", 1), ("count", "second", 2),
                                               ("split", "third", 3)]
    assert store.error_counts() == {"wc-1-1700000000": {"split": 2, "count": 1}}


def test_error_cap_keeps_the_newest(store: Store) -> None:
    store.insert_topology(record("a-1-0", "a"))
    store.insert_topology(record("b-2-0", "b"))
    store.add_error("b-2-0", "x", "other topology", 0)
    extra = 7
    for i in range(MAX_ERRORS_PER_TOPOLOGY + extra):
        store.add_error("a-1-0", "split", f"error {i}", i)
    errors = store.errors("a-1-0")
    assert len(errors) == MAX_ERRORS_PER_TOPOLOGY
    assert errors[0] == ("split", f"error {extra}", extra)
    assert errors[-1][1] == f"error {MAX_ERRORS_PER_TOPOLOGY + extra - 1}"
    assert store.errors("b-2-0") == [("x", "other topology", 0)]   # not capped away


def test_error_cap_is_the_constant(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_module, "MAX_ERRORS_PER_TOPOLOGY", 3)
    store.insert_topology(record())
    for i in range(5):
        store.add_error("wc-1-1700000000", "c", str(i), i)
    assert [m for _, m, _ in store.errors("wc-1-1700000000")] == ["2", "3", "4"]


# --- uploads ----------------------------------------------------------------------------

def test_upload_rows(store: Store) -> None:
    up = Upload("u1", "/inbox/u1.zip", "open", 0, None, 1.0, 1.0, None)
    store.insert_upload(up)
    assert store.upload("u1") == up and store.upload_at("/inbox/u1.zip") == up
    store.grow_upload("u1", 10, 2.0)
    assert store.upload("u1") == dataclasses.replace(up, bytes=10, touched_at=2.0)
    store.complete_upload("u1", "cafe", 3.0)
    done = dataclasses.replace(up, state="complete", bytes=10, sha256="cafe",
                               touched_at=3.0, completed_at=3.0)
    assert store.upload("u1") == done
    store.grow_upload("u1", 99, 4.0)                    # complete: no longer grows
    assert store.upload("u1") == done
    assert not store.upload_in_use("u1")
    store.insert_topology(record(code_upload="u1"))
    assert store.upload_in_use("u1")
    store.delete_upload("u1")
    assert store.upload("u1") is None and store.uploads() == []


def test_sweepable_uploads_are_idle_open_ones_and_old_unused_complete_ones(
        store: Store) -> None:
    rows = {"idle": ("open", 10.0, None), "busy": ("open", 50.0, None),
            "old": ("complete", 10.0, 10.0), "new": ("complete", 50.0, 50.0),
            "used": ("complete", 10.0, 10.0)}
    for uid, (state, touched, completed) in rows.items():
        store.insert_upload(Upload(uid, f"/inbox/{uid}", state, 1, None, 1.0, touched,
                                   completed))
    store.insert_topology(record(code_upload="used"))
    assert {u.id for u in store.sweepable_uploads(20.0, 20.0)} == {"idle", "old"}
    assert {u.id for u in store.sweepable_uploads(60.0, 5.0)} == {"idle", "busy"}
    assert {u.id for u in store.sweepable_uploads(60.0, 60.0)} == {"idle", "busy", "old",
                                                                  "new"}
    assert store.open_upload_count() == 2


def test_blob_rows_and_the_bytes_the_quota_counts(store: Store) -> None:
    assert store.stored_bytes() == 0
    store.insert_upload(Upload("u1", "/inbox/u1.zip", "open", 5, None, 1.0, 1.0, None))
    blob = Blob("k", 1, "f1", 7, "ab", "[]", 1.0, 1.0)
    store.put_blob(blob)
    store.put_blob(dataclasses.replace(blob, key="j", file="f0"))
    up = BlobUpload("s1", "new", "create", "[]", 11, "alice", 1.0, 1.0)
    store.insert_blob_upload(up)
    # Blob rows count their key and ACL too (UTF-8 bytes): 'k', 'j', 'new' and '[]'.
    assert store.stored_bytes() == 5 + (7 + 1 + 2) * 2 + (11 + 3 + 2)
    assert store.blob("k") == blob and store.blob("nope") is None
    assert [b.key for b in store.blobs()] == ["j", "k"]
    assert store.blob_keys(None, 1) == ["j"] and store.blob_keys("j", 10) == ["k"]
    assert store.creating("new") == up and store.creating("k") is None
    store.grow_blob_upload("s1", 12, 2.0)
    assert store.blob_upload("s1") == dataclasses.replace(up, bytes=12, touched_at=2.0)
    store.put_blob(dataclasses.replace(blob, version=2, file="f2"))     # a new version
    assert store.blob("k").file == "f2"  # type: ignore[union-attr]
    store.set_blob_acl("k", "[[1, null, 1]]")
    assert store.blob("k").acl == "[[1, null, 1]]"  # type: ignore[union-attr]
    store.delete_blob("k")
    store.delete_blob_upload("s1")
    assert store.blob("k") is None and store.blob_uploads() == []
    assert store.stored_bytes() == 5 + 7 + 1 + 2


def test_blob_tables_are_added_to_an_older_database(db_path: Path) -> None:
    old = sqlite3.connect(db_path)
    old.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    old.execute("INSERT INTO meta VALUES ('schema', '1')")
    old.commit()
    old.close()
    store = Store(db_path)
    try:
        assert store.blobs() == [] and store.blob_uploads() == []
    finally:
        store.close()


def test_upload_location_is_unique(store: Store) -> None:
    store.insert_upload(Upload("u1", "/l", "open", 0, None, 1.0, 1.0, None))
    with pytest.raises(sqlite3.IntegrityError):
        store.insert_upload(Upload("u2", "/l", "open", 0, None, 1.0, 1.0, None))


# --- transactions -----------------------------------------------------------------------

class Boom(Exception):
    pass


def test_transaction_rolls_back_on_exception(store: Store, db_path: Path) -> None:
    store.insert_topology(record("keep-1-0", "keep"))
    with pytest.raises(Boom):
        with store.transaction():
            store.insert_topology(record())
            store.next_counter()
            store.delete_topology("keep-1-0")
            assert store.topology("wc-1-1700000000") is not None    # visible inside
            raise Boom
    assert store.topology("wc-1-1700000000") is None
    assert [r.id for r in store.topologies()] == ["keep-1-0"]
    assert store.next_counter() == 1                    # the increment was undone
    other = sqlite3.connect(db_path)
    try:
        assert other.execute("SELECT id FROM topologies").fetchall() == [("keep-1-0",)]
    finally:
        other.close()


def test_transaction_rolls_back_on_failed_statement(store: Store) -> None:
    store.insert_topology(record("wc-1-1", "wc"))
    with pytest.raises(sqlite3.IntegrityError):
        with store.transaction():
            store.insert_topology(record("x-2-2", "x"))
            store.insert_topology(record("wc-3-3", "wc"))         # name taken
    assert [r.id for r in store.topologies()] == ["wc-1-1"]
    store.insert_topology(record("x-2-2", "x"))                   # usable afterwards
    assert len(store.topologies()) == 2


def test_nested_transaction_joins_the_outer_one(store: Store, db_path: Path) -> None:
    other = sqlite3.connect(db_path)
    try:
        with pytest.raises(Boom):
            with store.transaction():
                with store.transaction():
                    store.insert_topology(record())
                # The inner block is over, yet nothing is committed: another connection
                # does not see the row.
                assert other.execute("SELECT COUNT(*) FROM topologies").fetchone() == (0,)
                raise Boom
        assert store.topologies() == []
        with store.transaction():
            with store.transaction():
                store.insert_topology(record())
            assert other.execute("SELECT COUNT(*) FROM topologies").fetchone() == (0,)
        assert other.execute("SELECT COUNT(*) FROM topologies").fetchone() == (1,)
    finally:
        other.close()


def test_inner_exception_rolls_back_everything(store: Store) -> None:
    with pytest.raises(Boom):
        with store.transaction():
            store.insert_topology(record("a-1-0", "a"))
            with store.transaction():
                store.insert_topology(record("b-2-0", "b"))
                raise Boom
    assert store.topologies() == []
    with store.transaction():                           # depth back to zero: works
        store.insert_topology(record("c-3-0", "c"))
    assert [r.id for r in store.topologies()] == ["c-3-0"]


def test_committed_work_survives_reopen(db_path: Path) -> None:
    s = Store(db_path)
    with s.transaction():
        s.insert_topology(record())
        s.set_action(Action("wc-1-1700000000", "remove", 5.0, {"k": 1}))
    s.close()
    s = Store(db_path)
    try:
        assert s.action("wc-1-1700000000") == Action("wc-1-1700000000", "remove", 5.0,
                                                     {"k": 1})
    finally:
        s.close()


# --- the database itself ----------------------------------------------------------------

def test_wal_mode_and_pragmas(store: Store) -> None:
    assert store._query("PRAGMA journal_mode") == [("wal",)]
    assert store._query("PRAGMA foreign_keys") == [(1,)]
    assert store._query("PRAGMA synchronous") == [(2,)]           # FULL


def test_schema_version_recorded(store: Store) -> None:
    assert store._query("SELECT value FROM meta WHERE key='schema'") == [(str(SCHEMA_VERSION),)]


def test_newer_schema_refused(db_path: Path) -> None:
    Store(db_path).close()
    raw = sqlite3.connect(db_path)
    raw.execute("UPDATE meta SET value=? WHERE key='schema'", (SCHEMA_VERSION + 1,))
    raw.commit()
    raw.close()
    with pytest.raises(StoreError) as info:
        Store(db_path)
    assert str(db_path) in str(info.value)
    assert f"schema version {SCHEMA_VERSION + 1}" in str(info.value)
    assert f"({SCHEMA_VERSION})" in str(info.value)


def test_same_schema_reopens(db_path: Path) -> None:
    Store(db_path).close()
    Store(db_path).close()


def test_not_a_database_refused(db_path: Path) -> None:
    db_path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="cannot open the state database"):
        Store(db_path)


def test_missing_directory_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="cannot open the state database"):
        Store(tmp_path / "absent" / "nimbus.sqlite3")


def test_refused_database_is_closed(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Store() raised, so the caller has nothing to close: Store must close it itself.
    opened: list[sqlite3.Connection] = []
    real_connect = sqlite3.connect

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = real_connect(*args, **kwargs)
        opened.append(conn)
        return conn

    Store(db_path).close()
    raw = real_connect(db_path)
    raw.execute("UPDATE meta SET value='99' WHERE key='schema'")
    raw.commit()
    raw.close()
    monkeypatch.setattr(store_module.sqlite3, "connect", connect)
    with pytest.raises(StoreError, match="schema version 99"):
        Store(db_path)
    bad = db_path.with_name("bad.sqlite3")
    bad.write_bytes(b"garbage" * 1000)
    with pytest.raises(StoreError, match="cannot open"):
        Store(bad)
    assert len(opened) == 2
    for conn in opened:
        with pytest.raises(sqlite3.ProgrammingError, match="closed"):
            conn.execute("SELECT 1")
