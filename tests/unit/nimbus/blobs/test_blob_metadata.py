"""Blob metadata within bounds (issue 27, item 5), over a real Store in tmp_path: ACLs
bounded in names, bytes and entries; each row's key and ACL counted in the inbox
quota and given back; a cap on the keys a principal created; the free disk checked
before every commit; the database shrinking after deletes."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Iterator

import pytest

from support.nimbus import FakeClock
from nimbus_thrift.nimbus.blobs.acl import (ALL, MAX_ACL_BYTES, MAX_PRINCIPAL_BYTES, READ,
                                            Ace, AclType, BlobError, acl_to_json,
                                            check_acl, meta_bytes, normalize_acl)
from nimbus_thrift.nimbus.blobs.store import BlobStore
from nimbus_thrift.nimbus.state.store import Store
from nimbus_thrift.nimbus.transfers.uploads import TransferLimits, TransferRefused, Transfers

CAP = 3


class Env:
    """A blob store over a real SQLite store, with a fake clock and free disk."""

    def __init__(self, tmp_path: Path, max_inbox_bytes: int = 10 << 20):
        self.data = tmp_path / "data"
        (self.data / "topologies").mkdir(parents=True)
        self.free = 1 << 40
        self.limits = TransferLimits(max_inbox_bytes=max_inbox_bytes,
                                     min_free_disk_bytes=1000)
        self.open()

    def open(self) -> None:
        clock = FakeClock()
        self.store = Store(self.data / "nimbus.sqlite3")
        self.transfers = Transfers(self.store, self.data, max_upload_bytes=100_000,
                                   expiration_secs=600, retention_secs=600,
                                   chunk_bytes=4096, clock=clock, limits=self.limits,
                                   free_bytes=lambda path: self.free)
        self.blobs = BlobStore(self.store, self.data, self.transfers,
                               topologies_dir=self.data / "topologies",
                               max_blob_bytes=100_000, expiration_secs=600,
                               chunk_bytes=4096, clock=clock, limits=self.limits,
                               max_blobs_per_principal=CAP)

    def create(self, key: str, owner: str | None = "alice",
               acl: list[Ace] | None = None, data: bytes = b"") -> None:
        session = self.blobs.begin_create(key, acl if acl is not None else
                                          normalize_acl([], owner, ALL), owner)
        if data:
            self.blobs.upload_chunk(session, data)
        self.blobs.finish(session)


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path)
    yield e
    e.store.close()


def users(count: int, name_bytes: int) -> list[Ace]:
    return [Ace(AclType.USER, f"{i:06d}".ljust(name_bytes, "x"), READ)
            for i in range(count)]


# --- ACL bounds -------------------------------------------------------------------------

def test_a_principal_name_over_its_bytes_is_refused() -> None:
    check_acl("k", users(1, MAX_PRINCIPAL_BYTES))
    # 129 two-byte characters: 258 bytes, over 256 though 129 characters.
    with pytest.raises(BlobError, match="principal of 258 bytes .* limit of 256"):
        check_acl("k", [Ace(AclType.USER, "\u00e9" * 129, READ)])


def test_a_name_that_is_not_text_is_refused() -> None:
    with pytest.raises(BlobError, match="not valid text"):
        check_acl("k", [Ace(AclType.USER, "bad\udc80", READ)])


def test_an_acl_over_its_stored_bytes_is_refused_though_its_entries_fit() -> None:
    acl = users(100, 200)                   # 100 entries (limit 256), ~21 KB of JSON
    size = len(acl_to_json(acl))
    assert size > MAX_ACL_BYTES
    with pytest.raises(BlobError, match=f"takes {size} bytes as stored, over the limit "
                                        f"of {MAX_ACL_BYTES} \\(100 entries\\)"):
        check_acl("k", acl)


def test_create_and_set_acl_check_the_bounds(env: Env) -> None:
    with pytest.raises(BlobError, match="as stored, over the limit"):
        env.blobs.begin_create("k", users(100, 200), "alice")
    assert env.store.blob_uploads() == [] and env.transfers.inbox_bytes == 0
    env.create("k")
    with pytest.raises(BlobError, match="as stored, over the limit"):
        env.blobs.set_acl("k", users(100, 200))


# --- metadata in the quota --------------------------------------------------------------

def test_an_empty_blobs_key_and_acl_count_and_come_back(env: Env) -> None:
    acl = users(50, 100)
    env.create("empty", acl=acl)
    counted = meta_bytes("empty", acl_to_json(acl))
    assert counted > 5000
    assert env.transfers.inbox_bytes == counted == env.store.stored_bytes()
    bigger = users(60, 100)
    env.blobs.set_acl("empty", bigger)
    assert env.transfers.inbox_bytes == meta_bytes("empty", acl_to_json(bigger)) \
        == env.store.stored_bytes()
    env.blobs.set_acl("empty", acl[:1])
    assert env.transfers.inbox_bytes == env.store.stored_bytes()
    env.blobs.delete("empty")
    assert env.transfers.inbox_bytes == 0 == env.store.stored_bytes()


def test_metadata_over_the_quota_is_refused(tmp_path: Path) -> None:
    env = Env(tmp_path, max_inbox_bytes=20_000)
    env.create("a", acl=users(60, 100))             # ~6.7 KB of row
    env.create("b", acl=users(60, 100), owner="bob")
    with pytest.raises(TransferRefused, match="blob upload of key 'c'.*max_inbox_bytes"):
        env.blobs.begin_create("c", users(60, 100), "carol")
    with pytest.raises(TransferRefused, match="the new ACL of blob 'a'.*max_inbox_bytes"):
        env.blobs.set_acl("a", users(130, 100))
    assert env.transfers.inbox_bytes == env.store.stored_bytes()
    assert env.store.blob_uploads() == []
    env.store.close()


def test_an_updates_row_counts_its_key_until_it_ends(env: Env) -> None:
    env.create("k", data=b"1234")
    before = env.transfers.inbox_bytes
    session = env.blobs.begin_update("k", "alice")
    assert env.transfers.inbox_bytes == before + len("k")
    env.blobs.upload_chunk(session, b"12")
    env.blobs.finish(session)
    assert env.transfers.inbox_bytes == env.store.stored_bytes() == before - 2


# --- blobs per principal ----------------------------------------------------------------

def test_a_principal_may_create_max_blobs_per_principal_keys(env: Env) -> None:
    env.create("a1")
    env.create("a2")
    pending = env.blobs.begin_create("a3", normalize_acl([], "alice", ALL), "alice")
    with pytest.raises(TransferRefused, match=r"'alice' has created 3 blobs \(creates in "
                       r"progress included; limit 3, max_blobs_per_principal\); delete "
                       r"some to create 'a4'"):
        env.blobs.begin_create("a4", normalize_acl([], "alice", ALL), "alice")
    env.create("b1", owner="bob")                   # another principal: its own count
    env.create("daemon1", owner=None)               # the daemon's are not counted
    env.blobs.cancel(pending)                       # a create given up frees its place
    env.create("a4")
    env.blobs.delete("a1")                          # so does a deleted key
    env.create("a5")
    assert env.store.blobs_of("alice") == 3 and env.store.blobs_of("bob") == 1


def test_the_count_survives_a_restart(env: Env) -> None:
    for key in ("a1", "a2", "a3"):
        env.create(key)
    env.store.close()
    env.open()
    env.blobs.recover()
    with pytest.raises(TransferRefused, match="max_blobs_per_principal"):
        env.blobs.begin_create("a4", normalize_acl([], "alice", ALL), "alice")
    assert env.transfers.inbox_bytes == env.store.stored_bytes()


# --- free disk before every commit ------------------------------------------------------

def test_every_commit_checks_the_free_disk_first(env: Env) -> None:
    env.create("k")
    session = env.blobs.begin_create("next", normalize_acl([], "alice", ALL), "alice")
    env.free = 1000                 # exactly min_free_disk_bytes: nothing more fits
    refusal = r"the disk of the blob store has 1000 bytes free.*min_free_disk_bytes"
    with pytest.raises(TransferRefused, match="blob upload of key 'other': " + refusal):
        env.blobs.begin_create("other", normalize_acl([], "alice", ALL), "alice")
    with pytest.raises(TransferRefused, match="the new ACL of blob 'k': " + refusal):
        env.blobs.set_acl("k", users(3, 10))
    with pytest.raises(TransferRefused, match=f"blob upload '{session}' of key 'next': "
                                              + refusal):
        env.blobs.finish(session)
    # Nothing committed, nothing counted beyond the rows there are; the upload waits.
    assert env.store.blob("next") is None and env.store.blob_upload(session) is not None
    assert env.transfers.inbox_bytes == env.store.stored_bytes()
    env.free = 1 << 40
    env.blobs.finish(session)
    assert env.store.blob("next") is not None


# --- the database shrinks ---------------------------------------------------------------

def test_the_database_gives_deleted_rows_pages_back_at_the_sweep(env: Env) -> None:
    db = env.data / "nimbus.sqlite3"
    for i in range(CAP):
        for owner in ("alice", "bob", "carol", "dave", "erin"):
            env.create(f"{owner}{i}", owner=owner, acl=users(100, 150))
    env.store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    grown = db.stat().st_size
    for blob in env.store.blobs():
        env.blobs.delete(blob.key)
    assert free_pages(env.store) > 0                # free, still in the file
    env.blobs.sweep()
    env.store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert free_pages(env.store) == 0
    assert db.stat().st_size < grown // 2


def free_pages(store: Store) -> int:
    return int(store._db.execute("PRAGMA freelist_count").fetchone()[0])


def test_an_older_database_is_made_incremental_once(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    old = sqlite3.connect(path)
    old.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    old.execute("INSERT INTO meta VALUES ('schema', '1')")
    old.commit()
    assert old.execute("PRAGMA auto_vacuum").fetchone()[0] == 0
    old.close()
    store = Store(path)
    try:
        assert store._db.execute("PRAGMA auto_vacuum").fetchone()[0] == 2
    finally:
        store.close()
    assert os.path.exists(path)
