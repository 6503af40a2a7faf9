"""The blob store's IDL methods through a handler (the fakes tier): Storm's ACL rules per
call, sessions owned by who began them, the IDL's exceptions, topologies that map
blobs (checked at submit, copied before launch, refreshed on update), audit events."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from thriftpy2.thrift import TApplicationException

from support.handler_env import HandlerEnv
from support.nimbus import N, audit_events, make_zip, request_as
from support.nimbus import upload as upload_code
from support.nimbus import wordcount
from nimbus_thrift.idl import NIMBUS_COMPONENT
from nimbus_thrift.nimbus.blobs.acl import ADMIN, READ, WRITE

USER, OTHER = N.AccessControlType.USER, N.AccessControlType.OTHER


class Env(HandlerEnv):
    def create(self, key: str, data: bytes, acl: list[Any] | None = None) -> None:
        h = self.handler
        session = h.beginCreateBlob(key, N.SettableBlobMeta(acl=acl or []))
        for i in range(0, len(data), 5):
            h.uploadBlobChunk(session, data[i:i + 5])
        h.finishBlobUpload(session)

    def update(self, key: str, data: bytes) -> None:
        session = self.handler.beginUpdateBlob(key)
        self.handler.uploadBlobChunk(session, data)
        self.handler.finishBlobUpload(session)

    def read(self, key: str) -> bytes:
        result = self.handler.beginBlobDownload(key)
        out = b""
        while chunk := self.handler.downloadBlobChunk(result.session):
            out += chunk
        assert len(out) == result.data_size
        return out

    def submit(self, name: str, conf: dict[str, Any]) -> str:
        location = upload_code(self.handler, make_zip())
        self.handler.submitTopology(name, location, json.dumps(conf), wordcount())
        assert self.handler.background.wait_idle(10)
        return next(t.id for t in self.handler.getClusterInfo().topologies
                    if t.name == name)


@pytest.fixture
def env(tmp_path: Path) -> Env:
    # Everyone the tests call as may use the service (users), then the blob ACLs decide.
    return Env(tmp_path / "data", admins=["root"],
               users=["alice", "bob", "reader", "writer", "stranger"])


def ace(kind: int, name: str | None, access: int) -> Any:
    return N.AccessControl(type=kind, name=name, access=access)


def acl_text(meta: Any) -> list[tuple[int, str | None, int]]:
    return sorted((a.type, a.name, a.access) for a in meta.settable.acl)


# --- round trips --------------------------------------------------------------------------

def test_round_trip_meta_version_and_replication(env: Env) -> None:
    with request_as("alice"):
        env.create("data.txt", b"hello, blobs", [ace(OTHER, None, READ)])
        meta = env.handler.getBlobMeta("data.txt")
        assert acl_text(meta) == sorted([(OTHER, None, READ), (USER, "alice", 7)])
        assert meta.settable.replication_factor == 1
        assert env.read("data.txt") == b"hello, blobs"
        env.clock.advance(1)
        env.update("data.txt", b"v2")
        assert env.handler.getBlobMeta("data.txt").version > meta.version
        assert env.read("data.txt") == b"v2"
        assert env.handler.getBlobReplication("data.txt") == 1
        assert env.handler.updateBlobReplication("data.txt", 3) == 1
        assert env.handler.isRemoteBlobExists("data.txt") is True
        assert env.handler.isRemoteBlobExists("nope") is False
        assert env.handler.isRemoteBlobExists("not/valid") is False
        env.handler.deleteBlob("data.txt")
        assert env.handler.isRemoteBlobExists("data.txt") is False


def test_list_blobs_pages_through_every_key(env: Env) -> None:
    for i in range(120):
        env.create(f"k{i:03d}", b"")
    first = env.handler.listBlobs("")
    second = env.handler.listBlobs(first.session)
    last = env.handler.listBlobs(first.session)
    assert len(first.keys) == 100 and first.keys[0] == "k000"
    assert second.keys == [f"k{i:03d}" for i in range(100, 120)]
    assert last.keys == [] and last.session == first.session


# --- errors as the IDL declares them -----------------------------------------------------

def test_idl_exceptions(env: Env) -> None:
    h = env.handler
    env.create("k", b"x")
    with pytest.raises(N.KeyAlreadyExistsException, match="'k' already exists"):
        h.beginCreateBlob("k", N.SettableBlobMeta(acl=[]))
    for call, args in [(h.beginUpdateBlob, ("nope",)), (h.getBlobMeta, ("nope",)),
                       (h.setBlobMeta, ("nope", N.SettableBlobMeta(acl=[]))),
                       (h.beginBlobDownload, ("nope",)), (h.deleteBlob, ("nope",)),
                       (h.getBlobReplication, ("nope",)),
                       (h.updateBlobReplication, ("nope", 1))]:
        with pytest.raises(N.KeyNotFoundException, match="no blob with key 'nope'"):
            call(*args)
    with pytest.raises(N.AuthorizationException, match="more than once"):
        h.beginCreateBlob("dup", N.SettableBlobMeta(acl=[ace(USER, "bob", 1),
                                                         ace(USER, "bob", 2)]))


@pytest.mark.parametrize("call, args", [
    ("uploadBlobChunk", ("no-such-session", b"x")),
    ("finishBlobUpload", ("no-such-session",)),
    ("cancelBlobUpload", ("no-such-session",)),
    ("downloadBlobChunk", ("no-such-session",)),
    ("listBlobs", ("no-such-session",)),
    ("getBlobMeta", ("../etc/passwd",)),
    ("beginCreateBlob", ("a/b", N.SettableBlobMeta(acl=[]))),
])
def test_client_mistakes_are_one_sentence_internal_errors(env: Env, call: str,
                                                          args: tuple[Any, ...]) -> None:
    with pytest.raises(TApplicationException) as info:
        getattr(env.handler, call)(*args)
    assert info.value.type == TApplicationException.INTERNAL_ERROR
    assert "does not exist" in info.value.message or "not a valid blob key" in \
        info.value.message


def test_finish_of_an_update_whose_key_was_deleted_is_an_internal_error(env: Env) -> None:
    env.create("k", b"x")
    session = env.handler.beginUpdateBlob("k")
    env.handler.deleteBlob("k")
    # finishBlobUpload declares no KeyNotFoundException: a sentence, not a dropped call.
    with pytest.raises(TApplicationException, match="no blob with key 'k'"):
        env.handler.finishBlobUpload(session)


# --- ACLs -------------------------------------------------------------------------------

def test_storm_acl_rules_per_call(env: Env) -> None:
    h = env.handler
    with request_as("alice"):
        env.create("k", b"secret", [ace(USER, "reader", READ), ace(USER, "writer", WRITE)])
    with request_as("reader"):
        assert env.read("k") == b"secret"
        assert h.getBlobReplication("k") == 1
        for call, args in [(h.beginUpdateBlob, ("k",)), (h.deleteBlob, ("k",)),
                           (h.updateBlobReplication, ("k", 2)),
                           (h.setBlobMeta, ("k", N.SettableBlobMeta(acl=[])))]:
            with pytest.raises(N.AuthorizationException, match="'reader' may not call"):
                call(*args)
    with request_as("writer"):
        h.getBlobMeta("k")                         # any right reads the metadata
        with pytest.raises(N.AuthorizationException, match="needs READ"):
            h.beginBlobDownload("k")
        env.update("k", b"new")
        with pytest.raises(N.AuthorizationException, match="needs ADMIN"):
            h.setBlobMeta("k", N.SettableBlobMeta(acl=[]))
    with request_as("stranger"):
        with pytest.raises(N.AuthorizationException, match="gives it nothing"):
            h.getBlobMeta("k")
        with pytest.raises(N.AuthorizationException):
            h.isRemoteBlobExists("k")              # as Storm: getBlobMeta's check
        assert "k" in h.listBlobs("").keys         # keys are listed to all, as Storm
    with request_as("root"):                       # admins pass every ACL
        assert env.read("k") == b"new"
    with request_as("alice"):
        h.setBlobMeta("k", N.SettableBlobMeta(acl=[ace(OTHER, None, READ)]))
        # The caller keeps ADMIN: an ACL change cannot lock out who made it.
        assert acl_text(h.getBlobMeta("k")) == sorted([(OTHER, None, READ),
                                                        (USER, "alice", ADMIN)])
    with request_as("stranger"):
        assert env.read("k") == b"new"


def test_sessions_belong_to_who_began_them(env: Env) -> None:
    h = env.handler
    with request_as("alice"):
        env.create("k", b"data", [ace(OTHER, None, READ | WRITE)])
        upload = h.beginUpdateBlob("k")
        download = h.beginBlobDownload("k").session
    with request_as("bob"):
        for call, args in [(h.uploadBlobChunk, (upload, b"evil")),
                           (h.finishBlobUpload, (upload,)),
                           (h.cancelBlobUpload, (upload,)),
                           (h.downloadBlobChunk, (download,))]:
            with pytest.raises(N.AuthorizationException, match="only the principal"):
                call(*args)
    with request_as("root"):
        h.cancelBlobUpload(upload)                 # an admin may end an upload
        with pytest.raises(N.AuthorizationException, match="only the principal"):
            h.downloadBlobChunk(download)          # but reads only its own downloads
    with request_as("alice"):
        assert h.downloadBlobChunk(download) == b"data"


def test_blob_calls_are_audited(env: Env) -> None:
    with audit_events() as events, request_as("alice"):
        env.create("k", b"x")
        with request_as("bob"):
            with pytest.raises(N.AuthorizationException):
                env.handler.deleteBlob("k")
        env.handler.deleteBlob("k")
    seen = [(e["operation"], e["outcome"], e.get("blob")) for e in events()]
    assert ("beginCreateBlob", "ok", "k") in seen
    assert ("finishBlobUpload", "ok", "k") in seen
    assert ("deleteBlob", "refused", "k") in seen
    assert ("deleteBlob", "ok", "k") in seen
    assert not any(op == "uploadBlobChunk" for op, _, _ in seen)


# --- topologies -----------------------------------------------------------------------------

def test_a_topology_sees_its_blobs_and_their_updates(env: Env) -> None:
    env.create("words", b"alpha beta")
    topology_id = env.submit("wc", {"topology.blobstore.map": {
        "words": {"localname": "words.txt"}}})
    path = env.data_dir / "topologies" / topology_id / "blobs" / "words.txt"
    assert path.read_bytes() == b"alpha beta"
    assert env.launcher.methods(topology_id) == ["launch"]
    env.update("words", b"gamma")
    assert path.read_bytes() == b"gamma"
    with pytest.raises(N.IllegalStateException, match=f"used by topology {topology_id}"):
        env.handler.deleteBlob("words")
    env.handler.killTopologyWithOpts("wc", N.KillOptions(wait_secs=0))
    env.clock.advance(1)
    env.handler.timers.run_due()
    assert env.handler.background.wait_idle(10)
    env.handler.deleteBlob("words")                # removed: the blob is free


def test_submit_checks_the_blob_map(env: Env) -> None:
    with pytest.raises(N.InvalidTopologyException, match="'missing', which does not exist"):
        env.submit("wc", {"topology.blobstore.map": {"missing": {}}})
    with pytest.raises(N.InvalidTopologyException, match="must be a map"):
        env.submit("wc", {"topology.blobstore.map": ["x"]})
    with request_as("alice"):
        env.create("private", b"x")
    with request_as("bob"):
        with pytest.raises(N.AuthorizationException, match="does not give the submitter"):
            env.submit("wc", {"topology.blobstore.map": {"private": {}}})
    assert env.handler.getClusterInfo().topologies == []


def test_blobs_are_placed_again_at_restart_and_a_missing_one_is_a_topology_error(
        env: Env) -> None:
    env.create("a", b"A")
    topology_id = env.submit("wc", {"topology.blobstore.map": {"a": {}}})
    path = env.data_dir / "topologies" / topology_id / "blobs" / "a"
    path.unlink()
    env.store.delete_blob("a")          # behind the daemon's back (deleteBlob refuses)
    env.restart()
    assert not path.exists()
    errors = env.handler.getTopologyInfo(topology_id).errors[NIMBUS_COMPONENT]
    assert any("blob 'a' does not exist" in e.error for e in errors)


def test_blob_bytes_count_in_the_upload_quota(tmp_path: Path) -> None:
    env = Env(tmp_path / "data", max_inbox_bytes=1000, min_free_disk_bytes=0)
    code = len(make_zip())
    env.create("k", b"x" * (1000 - code + 1))     # one byte too many for the code
    with pytest.raises(TApplicationException, match="max_inbox_bytes"):
        upload_code(env.handler, make_zip())
    env.handler.deleteBlob("k")
    upload_code(env.handler, make_zip())
