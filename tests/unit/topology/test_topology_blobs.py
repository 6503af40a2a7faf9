"""The DSL's blob helpers (nimbus_thrift.topology.blobs) over a work directory the blob
store filled: where they look, reading the version current at each use, parsing again
only after an update, and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.nimbus import FakeClock
from nimbus_thrift.nimbus.blobs.acl import normalize_acl
from nimbus_thrift.nimbus.blobs.placement import BlobMapping
from nimbus_thrift.nimbus.blobs.store import BlobStore
from nimbus_thrift.nimbus.state.store import Store
from nimbus_thrift.nimbus.transfers.uploads import Transfers
from nimbus_thrift.topology import BlobNotFound, blob_path, load_blob, open_blob, read_blob
from nimbus_thrift.topology.blobs import WORK_DIR_ENV, blob_dir


@pytest.fixture
def store_and_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                  ) -> tuple[BlobStore, Path]:
    data = tmp_path / "data"
    data.mkdir()
    work = data / "topologies" / "wc-1-1"
    work.mkdir(parents=True)
    store = Store(data / "nimbus.sqlite3")
    clock = FakeClock()
    transfers = Transfers(store, data, max_upload_bytes=10_000, expiration_secs=600,
                          retention_secs=600, chunk_bytes=100, clock=clock)
    blobs = BlobStore(store, data, transfers, topologies_dir=data / "topologies",
                      max_blob_bytes=10_000, expiration_secs=600, chunk_bytes=100,
                      clock=clock)
    monkeypatch.setenv(WORK_DIR_ENV, str(work))
    return blobs, work


def put(blobs: BlobStore, key: str, data: bytes, create: bool) -> None:
    session = (blobs.begin_create(key, normalize_acl([], None, 7), None) if create
               else blobs.begin_update(key, None))
    blobs.upload_chunk(session, data)
    blobs.finish(session)


def place(blobs: BlobStore, work: Path, mapping: BlobMapping) -> list[str]:
    """Place as the blob calls do, for an owner who may read every blob."""
    return blobs.work_dirs.place(work, [mapping], "alice", lambda owner, blob: True)


def test_a_component_sees_each_update_at_its_next_use(store_and_dir: tuple[BlobStore, Path]
                                                       ) -> None:
    blobs, work = store_and_dir
    put(blobs, "stopwords", b"a the", create=True)
    stopwords = BlobMapping("stopwords", "stop.txt", False)
    assert place(blobs, work, stopwords) == []
    assert blob_path("stop.txt") == work / "blobs" / "stop.txt"
    parsed: list[bytes] = []

    def parse(data: bytes) -> set[str]:
        parsed.append(data)
        return set(data.decode().split())

    assert load_blob("stop.txt", parse) == {"a", "the"}
    assert load_blob("stop.txt", parse) == {"a", "the"}
    assert parsed == [b"a the"]                       # cached while unchanged
    with open_blob("stop.txt") as held:
        put(blobs, "stopwords", b"an", create=False)   # the daemon replaces the file
        assert place(blobs, work, stopwords) == []
        assert held.read() == b"a the"                 # an open file keeps its version
    assert read_blob("stop.txt") == b"an"
    assert load_blob("stop.txt", parse) == {"an"}
    assert parsed == [b"a the", b"an"]
    with open_blob("stop.txt", "r") as text:
        assert text.read() == "an"


def test_without_the_variable_the_working_directory_is_the_work_dir(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(WORK_DIR_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    assert blob_dir() == tmp_path / "blobs"


def test_errors_name_the_blob_and_what_there_is(store_and_dir: tuple[BlobStore, Path]
                                                ) -> None:
    blobs, work = store_and_dir
    put(blobs, "k", b"x", create=True)
    place(blobs, work, BlobMapping("k", "present.txt", False))
    with pytest.raises(BlobNotFound, match=r"no blob 'absent'.*there are: present.txt"):
        blob_path("absent")
    for bad in ("../etc/passwd", "a/b", ".", "..", "", ".blobstore-map.json"):
        with pytest.raises(ValueError, match="not a blob's local name"):
            blob_path(bad)
    with pytest.raises(ValueError, match="read-only"):
        open_blob("present.txt", "wb")
