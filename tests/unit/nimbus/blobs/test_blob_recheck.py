"""Blob placement decides from the daemon's records at each placement (issue 24): the
owner's READ on the blob's ACL as stored at that moment, the map of the stored conf.
A READ revoked reaches a running topology (its file goes, its errors name the blob);
what the topology writes in its work directory (a map file, a link) changes nothing.
Fakes tier: a handler over a real Store with the fake launcher."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from nimbus_thrift.idl import NIMBUS_COMPONENT
from nimbus_thrift.nimbus.blobs.acl import ALL, READ
from nimbus_thrift.nimbus.blobs.placement import BlobMapping
from nimbus_thrift.nimbus.state.store import Blob
from support.handler_env import HandlerEnv
from support.nimbus import N, make_zip, request_as, wordcount
from support.nimbus import upload as upload_code

USER, OTHER = N.AccessControlType.USER, N.AccessControlType.OTHER
MAP = "topology.blobstore.map"


class Env(HandlerEnv):
    def __init__(self, data_dir: Path):
        # Users named: the test is about blob ACLs, not about who may use the service.
        super().__init__(data_dir, admins=["root"], users=["alice", "bob"])

    def put(self, key: str, data: bytes, acl: list[Any] | None = None) -> None:
        h = self.handler
        if h.isRemoteBlobExists(key):
            session = h.beginUpdateBlob(key)
        else:
            session = h.beginCreateBlob(key, N.SettableBlobMeta(acl=acl or []))
        h.uploadBlobChunk(session, data)
        h.finishBlobUpload(session)

    def submit(self, name: str, blob_map: dict[str, Any]) -> str:
        location = upload_code(self.handler, make_zip())
        self.handler.submitTopology(name, location, json.dumps({MAP: blob_map}),
                                    wordcount())
        assert self.handler.background.wait_idle(10)
        return next(t.id for t in self.handler.getClusterInfo().topologies
                    if t.name == name)

    def blobs_dir(self, topology_id: str) -> Path:
        return self.data_dir / "topologies" / topology_id / "blobs"

    def errors(self, topology_id: str) -> list[str]:
        info = self.handler.getTopologyInfo(topology_id)
        return [e.error for e in (info.errors or {}).get(NIMBUS_COMPONENT, [])]


def ace(kind: int, name: str | None, access: int) -> Any:
    return N.AccessControl(type=kind, name=name, access=access)


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return Env(tmp_path / "data")


def test_a_revoked_read_removes_the_blob_from_a_running_topology(env: Env) -> None:
    with request_as("bob"):
        env.put("model", b"weights v1", [ace(USER, "alice", READ)])
        env.put("shared", b"everyone's", [ace(OTHER, None, READ)])
        bobs = env.submit("bobs", {"model": {"localname": "model.bin"}})
    with request_as("alice"):
        alices = env.submit("alices", {"model": {"localname": "model.bin"},
                                       "shared": {"localname": "shared.txt"}})
    mine, theirs = env.blobs_dir(alices), env.blobs_dir(bobs)
    assert (mine / "model.bin").read_bytes() == b"weights v1"
    assert env.errors(alices) == []

    with request_as("bob"), capture_logs() as logs:     # alice's READ goes, bob's stays
        env.handler.setBlobMeta("model", N.SettableBlobMeta(acl=[ace(USER, "bob", ALL)]))

    # At once, in the running topology: the file is gone, the error names the blob.
    assert not (mine / "model.bin").exists()
    [error] = env.errors(alices)
    assert "blob 'model'" in error and "'alice'" in error and "model.bin" in error
    assert any(e["event"] == "topology_blob_missing" and e["topology"] == alices
               and "blob 'model'" in e["problem"] for e in logs)
    # Nothing else changes: the other blob, the other topology, the application.
    assert (mine / "shared.txt").read_bytes() == b"everyone's"
    assert (theirs / "model.bin").read_bytes() == b"weights v1"
    assert env.errors(bobs) == []
    assert env.launcher.methods(alices) == ["launch"]

    # A new version reaches the owner who may read it, not the one who may not.
    env.clock.advance(1)
    with request_as("bob"):
        env.put("model", b"weights v2")
    assert (theirs / "model.bin").read_bytes() == b"weights v2"
    assert not (mine / "model.bin").exists()
    assert len(env.errors(alices)) == 2

    # Nor at a restart of the daemon (a launch places again).
    env.restart()
    assert not (mine / "model.bin").exists()
    assert (theirs / "model.bin").read_bytes() == b"weights v2"

    # READ given back: the current version is placed again at once.
    with request_as("bob"):
        env.handler.setBlobMeta("model", N.SettableBlobMeta(acl=[ace(USER, "alice", READ),
                                                                 ace(USER, "bob", ALL)]))
    assert (mine / "model.bin").read_bytes() == b"weights v2"


def test_a_revoked_read_removes_an_uncompressed_blob_and_its_versions(env: Env) -> None:
    import io
    import zipfile
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("data/part-0", b"rows")
    with request_as("bob"):
        env.put("set", buf.getvalue(), [ace(USER, "alice", READ)])
    with request_as("alice"):
        alices = env.submit("alices", {"set": {"localname": "set", "uncompress": True}})
    blobs = env.blobs_dir(alices)
    assert (blobs / "set" / "data" / "part-0").read_bytes() == b"rows"
    with request_as("bob"):
        env.handler.setBlobMeta("set", N.SettableBlobMeta(acl=[]))
    assert sorted(os.listdir(blobs)) == []          # the link and the unpacked version


def test_the_work_directorys_map_file_changes_nothing(env: Env) -> None:
    with request_as("bob"):
        env.put("secret", b"bob's only")                       # bob alone may read it
        env.put("shared", b"v1", [ace(OTHER, None, READ)])
    with request_as("alice"):
        alices = env.submit("alices", {"shared": {"localname": "shared.txt"}})
    blobs = env.blobs_dir(alices)
    # What an older daemon kept there and read back: the topology rewrites it to name
    # bob's blob, to drop its own, and to ask for an unpacking.
    (blobs / ".blobstore-map.json").write_text(json.dumps({
        "secret": {"localname": "stolen", "uncompress": False},
        "shared": {"localname": "elsewhere", "uncompress": True}}))
    env.clock.advance(1)
    with request_as("bob"):
        env.put("secret", b"bob's only, v2")
        env.put("shared", b"v2")
    assert not (blobs / "stolen").exists()
    assert not (blobs / "elsewhere").exists()
    assert (blobs / "shared.txt").read_bytes() == b"v2"       # the stored map's entry
    assert not (blobs / "shared.txt").is_symlink()
    assert env.errors(alices) == []
    # Removed at the placement: nothing reads it, and it must not look like it matters.
    assert not (blobs / ".blobstore-map.json").exists()


def test_links_planted_in_the_work_directory_are_replaced_or_removed_never_followed(
        env: Env, tmp_path: Path) -> None:
    precious = tmp_path / "precious"
    precious.write_bytes(b"not the topology's")
    with request_as("bob"):
        env.put("model", b"m1", [ace(USER, "alice", READ)])
        env.put("shared", b"s1", [ace(OTHER, None, READ)])
    with request_as("alice"):
        alices = env.submit("alices", {"model": {"localname": "model.bin"},
                                       "shared": {"localname": "shared.txt"}})
    blobs = env.blobs_dir(alices)
    for name in ("model.bin", "shared.txt"):
        (blobs / name).unlink()
        (blobs / name).symlink_to(precious)
    env.clock.advance(1)
    with request_as("bob"):
        env.put("shared", b"s2")                    # replaces the link, not its target
        env.handler.setBlobMeta("model", N.SettableBlobMeta(acl=[]))   # removes the link
    assert precious.read_bytes() == b"not the topology's"
    assert not (blobs / "shared.txt").is_symlink()
    assert (blobs / "shared.txt").read_bytes() == b"s2"
    assert not os.path.lexists(blobs / "model.bin")


def test_a_refusal_removes_only_its_own_names(tmp_path: Path) -> None:
    """``a`` refused takes its copy and its hidden names, never those of ``a.v1``
    (whose unpacked versions start with ``.a.v1.``)."""
    from nimbus_thrift.nimbus.blobs.placement import WorkDirBlobs
    from contextlib import contextmanager
    from typing import Iterator

    data = tmp_path / "blob.data"
    data.write_bytes(b"x")
    rows = {k: Blob(k, 1, k, 1, "", "[]", 0.0, 0.0) for k in ("a", "a.v1")}

    @contextmanager
    def open_version(key: str) -> Iterator[tuple[Blob, Path] | None]:
        yield rows[key], data

    work = tmp_path / "t-1-1"
    blobs = work / "blobs"
    blobs.mkdir(parents=True)
    kept = [".a.v1.v5.0123abcd", ".a.v1.0123456789ab.tmp", "a.v1"]
    gone = [".a.v5.0123abcd", ".a.0123456789ab.tmp"]
    for name in kept + gone:
        (blobs / name).mkdir() if ".v5." in name else (blobs / name).write_bytes(b"")
    placer = WorkDirBlobs(tmp_path, open_version)
    [problem] = placer.place(work, [BlobMapping("a", "a", False)], "alice",
                             lambda owner, blob: blob.key != "a")
    assert "blob 'a'" in problem
    assert sorted(os.listdir(blobs)) == sorted(kept)
