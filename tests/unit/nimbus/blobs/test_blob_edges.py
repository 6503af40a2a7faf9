"""Blob keys and archives at their edges, over a real Store in tmp_path and a fake
clock: a key's length is counted in UTF-8 bytes (nimbus/blobacl.py), and an archive
holding links unpacks without any of them (nimbus/blobplace.py)."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path
from typing import Iterator

import pytest

from support.nimbus import FakeClock
from nimbus_thrift.nimbus.blobs.acl import MAX_KEY_BYTES, BlobError, check_key, normalize_acl
from nimbus_thrift.nimbus.blobs.placement import BlobMapping
from nimbus_thrift.nimbus.blobs.store import BlobStore
from nimbus_thrift.nimbus.state.store import Store
from nimbus_thrift.nimbus.transfers.uploads import Transfers


@pytest.fixture
def blobs(tmp_path: Path) -> Iterator[BlobStore]:
    data = tmp_path / "data"
    (data / "topologies").mkdir(parents=True)
    clock = FakeClock()
    store = Store(data / "nimbus.sqlite3")
    transfers = Transfers(store, data, max_upload_bytes=100_000, expiration_secs=600,
                          retention_secs=600, chunk_bytes=4096, clock=clock)
    yield BlobStore(store, data, transfers, topologies_dir=data / "topologies",
                    max_blob_bytes=100_000, expiration_secs=600, chunk_bytes=4096,
                    clock=clock)
    store.close()


def create(blobs: BlobStore, key: str, data: bytes) -> None:
    session = blobs.begin_create(key, normalize_acl([], "alice", 7), "alice")
    blobs.upload_chunk(session, data)
    blobs.finish(session)


def test_a_key_is_measured_in_utf8_bytes(blobs: BlobStore) -> None:
    # 128 characters, 256 bytes: over the limit (a local file name stops at 255 bytes).
    key = "\u00e9" * 128
    assert (len(key), len(key.encode()), MAX_KEY_BYTES) == (128, 256, 255)
    with pytest.raises(BlobError, match="is 256 bytes long, over the limit of 255"):
        check_key(key)
    with pytest.raises(BlobError, match="over the limit"):
        create(blobs, key, b"x")
    # 255 bytes is a key.
    assert check_key("\u00e9" * 127 + "k") == "\u00e9" * 127 + "k"


def _tar_with_links() -> bytes:
    """A tar.gz with a regular file, a symlink to /etc/passwd, a dangling symlink, a
    symlink to a directory outside, and a hard link to the regular file."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        data = b"real data"
        info = tarfile.TarInfo("d/file.txt")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
        for name, kind, target in [("d/passwd", tarfile.SYMTYPE, "/etc/passwd"),
                                   ("d/dangling", tarfile.SYMTYPE, "no/such/file"),
                                   ("d/etc", tarfile.SYMTYPE, "/etc"),
                                   ("d/hard.txt", tarfile.LNKTYPE, "d/file.txt")]:
            link = tarfile.TarInfo(name)
            link.type = kind
            link.linkname = target
            tf.addfile(link)
    return buf.getvalue()


def test_links_in_an_archive_are_not_placed(blobs: BlobStore) -> None:
    create(blobs, "links", _tar_with_links())
    work = blobs.work_dirs.topologies_dir / "t-1-1"
    work.mkdir()
    problems = blobs.work_dirs.place(work, [BlobMapping("links", "links", True)], "alice",
                                     lambda owner, blob: True)
    assert problems == []
    root = work / "blobs" / "links"
    assert (root / "d" / "file.txt").read_bytes() == b"real data"
    # The regular file alone: no symlink, no hard link (not even as a copy), nothing
    # of /etc/passwd's.
    assert sorted(p.name for p in (root / "d").iterdir()) == ["file.txt"]
    assert os.stat(root / "d" / "file.txt").st_nlink == 1
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            assert not os.path.islink(os.path.join(dirpath, name)), name
