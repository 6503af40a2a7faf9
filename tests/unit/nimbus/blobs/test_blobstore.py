"""The blob store over a real Store in tmp_path and a fake clock: keys and ACLs as Storm
has them (nimbus_thrift.nimbus.blobs.acl), versions, the shared quota, sessions that end or
expire, recovery after a crash at each step (nimbus_thrift.nimbus.blobs.store), and blobs
placed in work directories (nimbus_thrift.nimbus.blobs.placement)."""

from __future__ import annotations

import io
import os
import tarfile
import zipfile
from pathlib import Path

import pytest

from support.nimbus import FakeClock
from nimbus_thrift.nimbus.blobs import archives
from nimbus_thrift.nimbus.blobs.acl import (ADMIN, ALL, READ, WRITE, Ace, AclType, BadAcl,
                                          BlobError, KeyExists, KeyNotFound, allowed,
                                          acl_to_json, check_acl, check_key, meta_bytes,
                                          normalize_acl)
from nimbus_thrift.nimbus.blobs.placement import BlobMapping, parse_blob_map, topologies_using
from nimbus_thrift.nimbus.blobs.store import BlobStore
from nimbus_thrift.nimbus.state.store import Store
from nimbus_thrift.nimbus.transfers.uploads import TransferLimits, TransferRefused, Transfers
from nimbus_thrift.topology.blobs import BLOBSTORE_MAP

EXPIRATION = 600.0
MAX_BYTES = 1000
CHUNK = 7


class Env:
    def __init__(self, tmp_path: Path, max_inbox_bytes: int = 10_000):
        self.data_dir = tmp_path / "data"
        self.data_dir.mkdir()
        self.topologies = self.data_dir / "topologies"
        self.topologies.mkdir()
        self.clock = FakeClock()
        self.limits = TransferLimits(max_inbox_bytes=max_inbox_bytes, min_free_disk_bytes=0)
        self.store = Store(self.data_dir / "nimbus.sqlite3")
        self.make()

    def make(self) -> None:
        self.transfers = Transfers(self.store, self.data_dir, max_upload_bytes=MAX_BYTES,
                                   expiration_secs=EXPIRATION, retention_secs=3600,
                                   chunk_bytes=CHUNK, clock=self.clock, limits=self.limits)
        self.blobs = BlobStore(self.store, self.data_dir, self.transfers,
                               topologies_dir=self.topologies, max_blob_bytes=MAX_BYTES,
                               expiration_secs=EXPIRATION, chunk_bytes=CHUNK,
                               clock=self.clock, limits=self.limits)

    def restart(self) -> None:
        self.store.close()
        self.store = Store(self.data_dir / "nimbus.sqlite3")
        self.make()
        self.transfers.recover()
        self.blobs.recover()

    def create(self, key: str, data: bytes, owner: str | None = "alice",
               acl: list[Ace] | None = None) -> int:
        session = self.blobs.begin_create(key, acl or normalize_acl([], owner, ALL), owner)
        for i in range(0, len(data), CHUNK):
            self.blobs.upload_chunk(session, data[i:i + CHUNK])
        return self.blobs.finish(session).version

    def update(self, key: str, data: bytes) -> int:
        session = self.blobs.begin_update(key, "alice")
        self.blobs.upload_chunk(session, data)
        return self.blobs.finish(session).version

    def download(self, key: str) -> bytes:
        session = self.blobs.begin_download(self.blobs.get(key), "alice")
        out = b""
        while chunk := self.blobs.download_chunk(session):
            out += chunk
        return out

    def files(self) -> list[str]:
        return sorted(p.name for p in self.blobs.dir.iterdir())


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return Env(tmp_path)


# --- keys and ACLs ----------------------------------------------------------------------

@pytest.mark.parametrize("key", ["a", "data.tgz", "my file", "tab\there", "ünïcode_1-2.x",
                                 "..."])
def test_valid_keys(key: str) -> None:
    assert check_key(key) == key


@pytest.mark.parametrize("key", ["", ".", "..", "a/b", "../etc", "x:y", "a\nb", "a\n",
                                 "k" * 256, None, 5])
def test_invalid_keys_are_refused_with_the_rule(key: object) -> None:
    with pytest.raises(BlobError, match="blob key|over the limit"):
        check_key(key)


def test_normalize_gives_the_creator_every_right_and_drops_empty_other() -> None:
    acl = normalize_acl([Ace(AclType.USER, "bob", READ), Ace(AclType.OTHER, None, 0)],
                        "alice", ALL)
    assert acl == [Ace(AclType.USER, "bob", READ), Ace(AclType.USER, "alice", ALL)]
    # An entry of the caller's gains the mask; an unnamed USER entry becomes the caller's.
    assert normalize_acl([Ace(AclType.USER, "alice", READ)], "alice", ADMIN) == \
        [Ace(AclType.USER, "alice", READ | ADMIN)]
    assert normalize_acl([Ace(AclType.USER, None, READ)], "alice", ADMIN) == \
        [Ace(AclType.USER, "alice", READ | ADMIN)]
    # The daemon itself (no principal): everyone gets everything, as Storm without a subject.
    assert normalize_acl([], None, ALL) == [Ace(AclType.OTHER, None, ALL)]


def test_allowed_sums_user_and_other_entries() -> None:
    acl = [Ace(AclType.USER, "bob", WRITE), Ace(AclType.OTHER, None, READ)]
    assert allowed(acl, "bob") == READ | WRITE
    assert allowed(acl, "carol") == READ


def test_a_user_named_twice_is_refused_as_storm_does() -> None:
    with pytest.raises(BadAcl, match=r"\['bob'\] can't appear more than once"):
        check_acl("k", [Ace(AclType.USER, "bob", READ), Ace(AclType.USER, "bob", WRITE)])
    with pytest.raises(BlobError, match="not a combination"):
        check_acl("k", [Ace(AclType.OTHER, None, 8)])
    assert Ace(AclType.USER, "bob", READ | ADMIN).text() == "u:bob:r-a"
    assert Ace(AclType.OTHER, None, READ).text() == "o::r--"


def meta(key: str, acl: list[Ace] | None = None) -> int:
    """What a blob's row counts in the quota besides its file: its key and ACL (by
    default Env.create's: alice with every right)."""
    return meta_bytes(key, acl_to_json(acl if acl is not None else
                                       normalize_acl([], "alice", ALL)))


# --- the life of a blob -------------------------------------------------------------------

def test_create_download_update_delete(env: Env) -> None:
    v1 = env.create("k", b"hello blob store")
    assert env.download("k") == b"hello blob store"
    blob = env.blobs.get("k")
    assert (blob.bytes, blob.version) == (16, v1)
    env.clock.advance(0.001)
    v2 = env.update("k", b"v2")
    assert v2 > v1
    assert env.download("k") == b"v2"
    assert env.files() == [f"{env.blobs.get('k').file}.data"]     # the old file is gone
    assert env.transfers.inbox_bytes == 2 + meta("k")
    env.blobs.delete("k")
    with pytest.raises(KeyNotFound):
        env.blobs.get("k")
    assert env.files() == [] and env.transfers.inbox_bytes == 0


def test_versions_never_repeat_even_when_the_clock_does_not_move(env: Env) -> None:
    versions = [env.create("k", b"a")]
    for data in (b"b", b"c"):
        versions.append(env.update("k", data))
    env.blobs.delete("k")
    versions.append(env.create("k", b"d"))          # re-created: a fresh clock version
    assert versions[:3] == sorted(set(versions[:3]))
    assert versions[3] >= versions[0]


def test_a_key_that_exists_or_is_being_created_cannot_be_created(env: Env) -> None:
    env.create("k", b"x")
    with pytest.raises(KeyExists):
        env.blobs.begin_create("k", [], "alice")
    session = env.blobs.begin_create("new", [], "alice")
    with pytest.raises(KeyExists, match="being created"):
        env.blobs.begin_create("new", [], "bob")
    env.blobs.cancel(session)
    env.create("new", b"y", owner="bob")          # the key is free again after cancel
    assert env.download("new") == b"y"


def test_a_blob_is_invisible_until_finished_and_cancel_keeps_nothing(env: Env) -> None:
    session = env.blobs.begin_create("k", [], "alice")
    env.blobs.upload_chunk(session, b"partial")
    with pytest.raises(KeyNotFound):
        env.blobs.get("k")
    assert env.transfers.inbox_bytes == 7 + meta("k", [])
    env.blobs.cancel(session)
    assert env.files() == [] and env.transfers.inbox_bytes == 0
    with pytest.raises(BlobError, match="does not exist"):
        env.blobs.upload_chunk(session, b"more")


def test_an_update_keeps_the_old_version_until_it_finishes(env: Env) -> None:
    env.create("k", b"old")
    session = env.blobs.begin_update("k", "alice")
    env.blobs.upload_chunk(session, b"new!")
    assert env.download("k") == b"old"
    env.blobs.cancel(session)
    assert env.download("k") == b"old"


def test_an_update_of_a_key_deleted_meanwhile_is_not_found_and_leaves_nothing(env: Env
                                                                               ) -> None:
    env.create("k", b"old")
    session = env.blobs.begin_update("k", "alice")
    env.blobs.upload_chunk(session, b"new")
    env.blobs.delete("k")
    with pytest.raises(KeyNotFound):
        env.blobs.finish(session)
    assert env.files() == [] and env.transfers.inbox_bytes == 0
    assert env.store.blob_uploads() == []


def test_a_download_reads_its_version_even_after_an_update_or_delete(env: Env) -> None:
    env.create("k", b"first version")
    session = env.blobs.begin_download(env.blobs.get("k"), "alice")
    first = env.blobs.download_chunk(session)
    env.update("k", b"second")
    env.blobs.delete("k")
    rest = b""
    while chunk := env.blobs.download_chunk(session):
        rest += chunk
    assert first + rest == b"first version"
    assert env.files() == []         # deleted once its last reader ended
    with pytest.raises(BlobError, match="does not exist"):
        env.blobs.download_chunk(session)


def test_an_empty_blob_round_trips(env: Env) -> None:
    env.create("empty", b"")
    assert env.download("empty") == b""


# --- limits and quota -------------------------------------------------------------------

def test_a_blob_over_the_size_limit_is_discarded(env: Env) -> None:
    session = env.blobs.begin_create("big", [], "alice")
    env.blobs.upload_chunk(session, b"x" * MAX_BYTES)
    with pytest.raises(BlobError, match=f"over the limit of {MAX_BYTES}"):
        env.blobs.upload_chunk(session, b"x")
    assert env.files() == [] and env.transfers.inbox_bytes == 0


def test_blobs_and_code_uploads_share_one_quota(tmp_path: Path) -> None:
    # Room for the blob's row and the update's (its key) too.
    env = Env(tmp_path, max_inbox_bytes=21 + meta("k"))
    env.create("k", b"x" * 15)
    location = env.transfers.begin_upload()
    with pytest.raises(TransferRefused, match="max_inbox_bytes"):
        env.transfers.upload_chunk(location, b"y" * 7)
    env.transfers.upload_chunk(location, b"y" * 5)
    session = env.blobs.begin_update("k", "alice")
    with pytest.raises(TransferRefused, match=r"blob upload .* of key 'k'.*max_inbox_bytes"):
        env.blobs.upload_chunk(session, b"z")
    env.blobs.cancel(session)
    env.blobs.delete("k")                         # its bytes come back
    assert env.transfers.inbox_bytes == 5
    env.transfers.upload_chunk(location, b"y" * 15)


def test_the_free_disk_reserve_refuses_a_chunk_and_keeps_the_upload(tmp_path: Path) -> None:
    env = Env(tmp_path)
    env.transfers.free_bytes = lambda path: 100
    env.transfers.limits = env.blobs.limits = TransferLimits(min_free_disk_bytes=95)
    session = env.blobs.begin_create("k", [], "alice")
    with pytest.raises(TransferRefused, match="min_free_disk_bytes"):
        env.blobs.upload_chunk(session, b"123456")
    assert env.transfers.inbox_bytes == meta("k", [])
    env.blobs.upload_chunk(session, b"12345")
    env.blobs.finish(session)
    assert env.download("k") == b"12345"


def test_uploads_per_peer_are_bounded_and_come_back(env: Env) -> None:
    limit = env.limits.max_uploads_per_peer
    sessions = [env.blobs.begin_create(f"k{i}", [], "alice", peer="10.0.0.1")
                for i in range(limit)]
    with pytest.raises(TransferRefused, match="max_uploads_per_peer"):
        env.blobs.begin_create("one-more", [], "alice", peer="10.0.0.1")
    env.blobs.begin_create("other-peer", [], "alice", peer="10.0.0.2")
    env.blobs.cancel(sessions[0])
    env.blobs.finish(sessions[1])
    env.clock.advance(EXPIRATION)
    env.blobs.sweep()                              # the rest expire
    assert env.blobs._uploads_of == {}
    assert [b.key for b in env.store.blobs()] == ["k1"]


# --- expiry -------------------------------------------------------------------------------

def test_idle_sessions_expire_and_active_ones_do_not(env: Env) -> None:
    env.create("k", b"0123456789")
    idle = env.blobs.begin_create("idle", [], "alice")
    env.blobs.upload_chunk(idle, b"abc")
    busy = env.blobs.begin_create("busy", [], "alice")
    download = env.blobs.begin_download(env.blobs.get("k"), "alice")
    _, listing = env.blobs.list_page("")
    env.clock.advance(EXPIRATION - 1)
    env.blobs.upload_chunk(busy, b"x")
    env.clock.advance(1)
    env.blobs.sweep()
    env.blobs.upload_chunk(busy, b"y")             # touched: still there
    with pytest.raises(BlobError, match="does not exist"):
        env.blobs.upload_chunk(idle, b"d")
    with pytest.raises(BlobError, match="does not exist"):
        env.blobs.download_chunk(download)
    with pytest.raises(BlobError, match="does not exist"):
        env.blobs.list_page(listing)
    assert env.transfers.inbox_bytes == 10 + meta("k") + 2 + meta("busy", [])
    assert env.blobs._readers == {} and env.blobs.downloads.peers() == {}


# --- listing ------------------------------------------------------------------------------

def test_list_pages_of_100_then_an_empty_page(env: Env) -> None:
    for i in range(150):
        env.create(f"key{i:03d}", b"")
    keys, session = env.blobs.list_page("")
    assert len(keys) == 100 and keys[0] == "key000"
    more, again = env.blobs.list_page(session)
    assert again == session and more == [f"key{i:03d}" for i in range(100, 150)]
    assert env.blobs.list_page(session) == ([], session)
    with pytest.raises(BlobError, match="does not exist"):
        env.blobs.list_page(session)              # ended with the empty page


# --- crash recovery ---------------------------------------------------------------------

def test_recovery_keeps_what_was_acknowledged_and_trims_the_rest(env: Env) -> None:
    env.create("done", b"finished data")
    session = env.blobs.begin_create("open", [], "alice")
    env.blobs.upload_chunk(session, b"acked")
    with open(env.blobs.part_path(session), "ab") as f:
        f.write(b"unacknowledged tail")          # written, then killed before the row
    (env.blobs.dir / "stray.part").write_bytes(b"leftover")
    env.restart()
    assert env.download("done") == b"finished data"
    assert env.blobs.part_path(session).read_bytes() == b"acked"
    assert env.transfers.inbox_bytes == len(b"finished data") + meta("done") + 5 + \
        meta("open", [])
    env.blobs.upload_chunk(session, b"+more")     # the upload carries on
    env.blobs.finish(session)
    assert env.download("open") == b"acked+more"
    assert "stray.part" not in env.files()


def test_a_crash_between_rename_and_commit_loses_the_finish_not_the_upload(env: Env
                                                                           ) -> None:
    env.create("k", b"version one")
    session = env.blobs.begin_update("k", "alice")
    env.blobs.upload_chunk(session, b"two")
    os.replace(env.blobs.part_path(session), env.blobs.data_path(session))  # then killed
    env.restart()
    assert env.download("k") == b"version one"
    env.blobs.finish(session)                     # retried after the restart
    assert env.download("k") == b"two"


def test_a_crash_after_the_commit_leaves_only_a_leftover_old_file(env: Env) -> None:
    env.create("k", b"one")
    old = env.blobs.get("k").file
    keep = env.blobs.data_path(old).read_bytes()
    env.update("k", b"two")
    env.blobs.data_path(old).write_bytes(keep)     # as if killed before the unlink
    env.restart()
    assert env.download("k") == b"two"
    assert env.files() == [f"{env.blobs.get('k').file}.data"]


def test_an_upload_whose_file_is_shorter_than_acknowledged_is_dropped(env: Env) -> None:
    session = env.blobs.begin_create("k", [], "alice")
    env.blobs.upload_chunk(session, b"abcdef")
    env.blobs.part_path(session).write_bytes(b"ab")       # a power cut ate the data
    env.restart()
    assert env.store.blob_uploads() == [] and env.transfers.inbox_bytes == 0
    env.create("k", b"again")                             # the key is free
    assert env.download("k") == b"again"


# --- topology.blobstore.map -------------------------------------------------------------

def test_parse_blob_map() -> None:
    conf = {BLOBSTORE_MAP: {"b": {"localname": "words.txt"}, "a": {"uncompress": True},
                            "c": None}}
    assert parse_blob_map(conf) == [BlobMapping("a", "a", True),
                                    BlobMapping("b", "words.txt", False),
                                    BlobMapping("c", "c", False)]
    assert parse_blob_map({}) == []


@pytest.mark.parametrize("value, message", [
    ([], "must be a map"),
    ({"a/b": {}}, "not a valid blob key"),
    ({"a": {"localname": "../x"}}, "not a plain file name"),
    ({"a": {"localname": ".hidden"}}, "must not start with '.'"),
    ({"a": {"uncompress": "yes"}}, "true or false"),
    ({"a": {"localname": "x"}, "b": {"localname": "x"}}, "both use the local name"),
    ({"a": 3}, "must be a map with localname"),
])
def test_bad_blob_maps_are_refused_with_a_sentence(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_blob_map({BLOBSTORE_MAP: value})


def _tgz(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _zip(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return buf.getvalue()


def anyone(owner: str, blob: object) -> bool:
    """A placement's rule that lets every owner read every blob."""
    return True


def place(env: Env, work: Path, *mappings: BlobMapping) -> list[str]:
    return env.blobs.work_dirs.place(work, mappings, "alice", anyone)


def test_placing_again_replaces_the_file_in_each_work_dir(env: Env) -> None:
    env.create("words", b"one two")
    a, b, other = (env.topologies / n for n in ("t-1-1", "t-2-2", "t-3-3"))
    for d in (a, b, other):
        d.mkdir()
    assert place(env, a, BlobMapping("words", "words.txt", False)) == []
    assert place(env, b, BlobMapping("words", "w", False)) == []
    held = open(a / "blobs" / "words.txt", "rb")         # a reader with the old file open
    env.update("words", b"three four")
    assert (a / "blobs" / "words.txt").read_bytes() == b"one two"   # until placed
    assert place(env, a, BlobMapping("words", "words.txt", False)) == []
    assert place(env, b, BlobMapping("words", "w", False)) == []
    assert (a / "blobs" / "words.txt").read_bytes() == b"three four"
    assert (b / "blobs" / "w").read_bytes() == b"three four"
    assert not (other / "blobs").exists()
    assert held.read() == b"one two"                      # replaced, not rewritten in place
    held.close()
    # No temporary files are left behind, no map file, and no version stays pinned.
    assert sorted(p.name for p in (a / "blobs").iterdir()) == ["words.txt"]
    assert env.blobs._readers == {}
    assert env.files() == [f"{env.blobs.get('words').file}.data"]


@pytest.mark.parametrize("pack", [_tgz, _zip])
def test_uncompress_unpacks_and_an_update_switches_the_directory(env: Env, pack: object
                                                                  ) -> None:
    assert callable(pack)
    env.create("model", pack({"model/weights.txt": b"w1", "readme": b"r"}))
    work = env.topologies / "t-1-1"
    work.mkdir()
    assert place(env, work, BlobMapping("model", "model", True)) == []
    root = work / "blobs" / "model"
    assert (root / "model" / "weights.txt").read_bytes() == b"w1"
    env.update("model", pack({"model/weights.txt": b"w2"}))
    assert place(env, work, BlobMapping("model", "model", True)) == []
    assert (root / "model" / "weights.txt").read_bytes() == b"w2"
    assert not (root / "readme").exists()
    unpacked = [p for p in (work / "blobs").iterdir() if p.name.startswith(".model.v")]
    assert len(unpacked) == 1                               # the old version is removed


def test_an_archive_that_escapes_or_is_not_an_archive_is_a_problem_not_a_crash(env: Env
                                                                                ) -> None:
    env.create("evil", _tgz({"../../escape.txt": b"x"}))
    env.create("plain", b"not an archive")
    work = env.topologies / "t-1-1"
    work.mkdir()
    problems = place(env, work, BlobMapping("evil", "evil", True),
                     BlobMapping("plain", "plain", True), BlobMapping("gone", "gone", False))
    assert len(problems) == 3
    assert "outside its directory" in problems[0]
    assert "neither a zip nor a tar" in problems[1]
    assert "does not exist" in problems[2]
    assert not (env.topologies / "escape.txt").exists()
    assert not (env.data_dir / "escape.txt").exists()


def test_a_zip_bomb_is_refused_before_it_is_written(env: Env,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(archives, "MIN_EXPANDED_BYTES", 0)
    env.create("bomb", _zip({"zeros": b"\0" * 200_000}))
    work = env.topologies / "t-1-1"
    work.mkdir()
    [problem] = place(env, work, BlobMapping("bomb", "bomb", True))
    assert "unpacks to more than" in problem and "decompressed bytes" in problem
    assert list((work / "blobs").glob(".bomb.v*")) == []


def test_users_of_a_key() -> None:
    confs = [("t1", {BLOBSTORE_MAP: {"k": {}}}), ("t2", {}), ("t3", {BLOBSTORE_MAP: 7})]
    assert topologies_using("k", confs) == ["t1"]
