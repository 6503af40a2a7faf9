"""Unit tier: a store's commits as journal entries (state/journal.py), replayed on a
second store to the same rows, rowids included; a journal that refuses undoes the
commit. Real SQLite files, no coordinator."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from nimbus_thrift.nimbus.state.journal import Change, JournalError, Statement
from nimbus_thrift.nimbus.state.store import Action, Store, Upload

from support.store_rows import record, rows, workload


class Recording:
    def __init__(self) -> None:
        self.changes: list[Change] = []
        self.refuse: Exception | None = None

    def record(self, change: Change) -> None:
        if self.refuse is not None:
            raise self.refuse
        # Through the wire form, as a replica gets it.
        self.changes.append(Change.decode(change.encode()))


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Store, Store, Recording]]:
    leader, replica = Store(tmp_path / "a.sqlite3"), Store(tmp_path / "b.sqlite3")
    journal = Recording()
    leader.set_journal(journal)
    yield leader, replica, journal
    leader.close()
    replica.close()


def test_replayed_changes_give_the_same_rows(pair) -> None:
    leader, replica, journal = pair
    workload(leader)
    told: list[str] = []
    replica.watch(told.append)
    for change in journal.changes:
        replica.apply(change)
    assert rows(replica) == rows(leader)
    assert {"a-1-1", "b-2-1"} <= set(told)
    # A replayed store answers as its leader does, the structure's bytes included.
    assert replica.topology("b-2-1") == leader.topology("b-2-1")
    assert replica.topology("a-1-1") is None


def test_one_transaction_is_one_entry_and_reads_are_none(pair) -> None:
    leader, _, journal = pair
    with leader.transaction():
        leader.insert_topology(record("a-1-1", "a"))
        leader.set_status("a-1-1", "INACTIVE", "ACTIVE")
        assert leader.topology("a-1-1") is not None
    leader.topologies()
    assert len(journal.changes) == 1
    assert [s.topology for s in journal.changes[0].statements] == ["a-1-1", "a-1-1"]


def test_a_refusing_journal_undoes_the_commit(pair) -> None:
    leader, _, journal = pair
    told: list[str] = []
    leader.watch(told.append)
    journal.refuse = JournalError("not the leader")
    with pytest.raises(JournalError, match="not the leader"):
        leader.insert_topology(record("a-1-1", "a"))
    with pytest.raises(JournalError):
        with leader.transaction():
            leader.next_counter()
            leader.insert_upload(Upload("u1", "/inbox/u1", "open", 0, None, 1.0, 1.0, None))
    assert leader.topology("a-1-1") is None and told == [] and journal.changes == []
    assert leader._query("SELECT value FROM meta WHERE key='counter'") == []
    assert leader.upload("u1") is None
    # The store carries on once the journal takes changes again.
    journal.refuse = None
    leader.insert_topology(record("a-1-1", "a"))
    assert leader.topology("a-1-1") is not None and told == ["a-1-1"]
    assert len(journal.changes) == 1


def test_a_replica_forgets_the_cached_conf_of_a_deleted_topology(pair) -> None:
    leader, replica, journal = pair
    leader.insert_topology(record("a-1-1", "a"))
    replica.apply(journal.changes[-1])
    assert replica.topology("a-1-1") is not None and "a-1-1" in replica.cached_ids()
    leader.delete_topology("a-1-1")
    replica.apply(journal.changes[-1])
    assert "a-1-1" not in replica.cached_ids()


def test_entries_round_trip_and_garbage_is_refused() -> None:
    change = Change((Statement("INSERT INTO t VALUES (?,?,?)", (b"\x00\xff", 1.5, None), "x"),
                     Statement("DELETE FROM t", ())))
    assert Change.decode(change.encode()) == change
    for junk in (b"", b"{", b"[[1]]", b'[["s", [{"nope": 1}], null]]'):
        with pytest.raises(JournalError, match="not a journal entry"):
            Change.decode(junk)
