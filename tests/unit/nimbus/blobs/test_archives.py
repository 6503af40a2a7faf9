"""Archives unpacked as they are read (nimbus/blobs/archives.py), in process and in the
capped child (nimbus/blobs/unpacker.py): a bzip2 tar of many empty members and one of
a highly compressible member are refused at their limit, counting what is read; paths
too long or too deep are refused; a good tar or zip still unpacks; the child's memory
and time limits hold."""

from __future__ import annotations

import bz2
import io
import os
import tarfile
import zipfile
from pathlib import Path

import pytest

from nimbus_thrift.nimbus.blobs import unpacker
from nimbus_thrift.nimbus.blobs.archives import (ArchiveLimits, ArchiveRefused, Unpacked,
                                                 unpack)
from nimbus_thrift.nimbus.blobs.unpacker import unpack_in_child


def many_empty_members(count: int) -> bytes:
    """A bzip2 tar of ``count`` empty files (one header repeated: a name may repeat)."""
    info = tarfile.TarInfo("e")
    header = info.tobuf(format=tarfile.USTAR_FORMAT)
    return bz2.compress(header * count + b"\0" * 1024)


def one_big_member(size: int) -> bytes:
    """A bzip2 tar of one file of ``size`` zero bytes (compresses to ~150 bytes)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:bz2") as tf:
        info = tarfile.TarInfo("zeros")
        info.size = size
        tf.addfile(info, io.BytesIO(bytes(size)))
    return buf.getvalue()


def tar_of(files: dict[str, bytes], mode: str = "w:gz") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def in_child(tmp_path: Path, data: bytes, limits: ArchiveLimits | None = None,
             **kwargs: object) -> Unpacked:
    blob = tmp_path / "blob"
    blob.write_bytes(data)
    dest = tmp_path / "out"
    dest.mkdir(exist_ok=True)
    with open(blob, "rb") as source:
        return unpack_in_child(source, dest, limits or ArchiveLimits.for_blob(len(data)),
                               uid=os.geteuid(), gid=os.getegid(), **kwargs)  # type: ignore[arg-type]


def written(dest: Path) -> int:
    return sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())


def test_many_empty_members_are_refused_at_the_entry_limit(tmp_path: Path) -> None:
    data = many_empty_members(5_000)
    assert len(data) < 2_000                    # the attack: a tiny blob
    with pytest.raises(ArchiveRefused, match="more than 1000 entries"):
        in_child(tmp_path, data, ArchiveLimits(1 << 20, max_entries=1000))


def test_the_entry_limit_counts_as_it_reads_not_after(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    headers = 0
    real_next = tarfile.TarFile.next

    def counting_next(self: tarfile.TarFile) -> tarfile.TarInfo | None:
        nonlocal headers
        headers += 1
        return real_next(self)

    monkeypatch.setattr(tarfile.TarFile, "next", counting_next)
    with pytest.raises(ArchiveRefused, match="more than 100 entries"):
        unpack(io.BytesIO(many_empty_members(20_000)), tmp_path,
               ArchiveLimits(1 << 20, max_entries=100))
    # getmembers() read all 20,000 headers before counting them; now the walk stops
    # at the 101st (open() reads the first one ahead).
    assert headers <= 103


def test_a_highly_compressible_member_is_refused_by_the_bytes_read(tmp_path: Path) -> None:
    data = one_big_member(8 << 20)
    assert len(data) < 1_000
    limits = ArchiveLimits.for_blob(len(data))
    assert limits.max_bytes == 1 << 20          # MIN_EXPANDED_BYTES for a tiny blob
    with pytest.raises(ArchiveRefused, match=r"more than 1048576 bytes \(decompressed"):
        in_child(tmp_path, data)
    assert written(tmp_path / "out") <= limits.max_bytes


def test_a_zip_bomb_is_refused_by_the_bytes_read(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("zeros", bytes(4 << 20))
    with pytest.raises(ArchiveRefused, match="more than 1048576 bytes"):
        in_child(tmp_path, buf.getvalue())


@pytest.mark.parametrize("name, match", [
    ("a/" * 70 + "f", "71 directories deep, over the limit of 64"),
    ("x" * 1100, "path of 1100 bytes, over the limit of 1024"),
    ("/etc/passwd", "points outside its directory"),
    ("a/../../f", "points outside its directory"),
])
def test_a_member_path_too_deep_long_or_outside_is_refused(tmp_path: Path, name: str,
                                                            match: str) -> None:
    with pytest.raises(ArchiveRefused, match=match):
        unpack(io.BytesIO(tar_of({name: b"x"})), tmp_path, ArchiveLimits(1 << 20))


@pytest.mark.parametrize("mode", ["w:gz", "w:bz2", "w:xz", "w"])
def test_a_good_tar_unpacks_in_the_child(tmp_path: Path, mode: str) -> None:
    files = {"model/weights.txt": b"w" * 1000, "readme": b"hello", "model/more/x": b""}
    done = in_child(tmp_path, tar_of(files, mode))
    assert done == Unpacked(entries=3, bytes=1005)
    for name, data in files.items():
        assert (tmp_path / "out" / name).read_bytes() == data


def test_a_good_zip_unpacks_in_the_child(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("dir/", b"")
        zf.writestr("dir/a.txt", b"a" * 500)
    assert in_child(tmp_path, buf.getvalue()) == Unpacked(entries=2, bytes=500)
    assert (tmp_path / "out" / "dir" / "a.txt").read_bytes() == b"a" * 500


def test_not_an_archive_is_refused_in_a_sentence(tmp_path: Path) -> None:
    with pytest.raises(ArchiveRefused, match="neither a zip nor a tar archive"):
        in_child(tmp_path, b"just text")


def test_a_damaged_stream_is_refused_not_a_crash(tmp_path: Path) -> None:
    data = tar_of({"a": os.urandom(200_000)}, "w:gz")
    with pytest.raises(ArchiveRefused, match="damaged"):
        in_child(tmp_path, data[:len(data) // 2])


def test_the_childs_address_space_is_capped(tmp_path: Path) -> None:
    # 1 MiB is below what the interpreter holds already: the first decompressor fails.
    with pytest.raises(ArchiveRefused, match="needs more than 1 MiB"):
        in_child(tmp_path, tar_of({"a": b"x" * 10}, "w:bz2"), memory_bytes=1 << 20)


def test_the_child_is_stopped_past_its_time(tmp_path: Path) -> None:
    with pytest.raises(ArchiveRefused, match="took over 0 s"):
        in_child(tmp_path, tar_of({"a": b"x"}), timeout=0.001)


def test_the_time_limit_grows_with_the_bytes_allowed() -> None:
    small = unpacker.time_limit(ArchiveLimits(1 << 20))
    large = unpacker.time_limit(ArchiveLimits(10 << 30))
    assert small >= unpacker.CHILD_MIN_SECS and large > small + 60
