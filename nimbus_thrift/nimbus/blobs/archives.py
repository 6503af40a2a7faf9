"""An archive blob unpacked as it is read, within limits: the child process's side of
:mod:`.unpacker` (this file is also the script that child runs, so it imports the
standard library only).

Each member is counted as it comes (tar: ``TarFile.next()``, one header at a time, and
the members already seen forgotten; zip: the central directory's entries in order),
and a regular file's bytes are counted as they are decompressed and written, never
taken from the size its header declares. The first limit passed stops the walk with
:class:`ArchiveRefused`, whose message names the limit; what was written so far is the
caller's to remove. Only regular files and directories are written: links, devices
and fifos are counted and skipped (a link could point outside), and a member whose
path is absolute, climbs with ``..``, is too long or too deep refuses the archive.

Before, ``TarFile.getmembers()`` read every header before any limit applied: a
22.8 KB bzip2 tar of 2,000,000 empty members took the daemon from 45 to 1,425 MB
and 53 s (issue 27).

The child's command line and answer::

    python -I -S archives.py DEST MAX_BYTES MAX_ENTRIES MEMORY_BYTES UID GID
      stdin   the blob's file (opened by the daemon), read from its start
      stdout  one JSON line: {"entries": n, "bytes": n} or {"refused": "sentence"}
"""

from __future__ import annotations

import json
import lzma
import os
import resource
import sys
import tarfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, BinaryIO, Iterator

#: Entries an archive may hold to be uncompressed into a topology's work directory
#: (every member counts, directories and skipped links too).
MAX_ARCHIVE_ENTRIES = 100_000
#: Uncompressed bytes an archive may expand to, per byte of the blob: zip bombs reach
#: ratios of 1000 and more; real data sets rarely pass 10.
MAX_EXPANSION = 20
#: ... and at least this many, whatever the blob's size (a small archive of text).
MIN_EXPANDED_BYTES = 1 << 20
#: Bytes of a member's path in UTF-8: Linux's PATH_MAX is 4096 for the whole path,
#: and the work directory's own path comes first.
MAX_MEMBER_PATH_BYTES = 1024
#: Directories a member's path may go down: real archives rarely pass 15.
MAX_MEMBER_DEPTH = 64
#: Bytes read and written at a time.
CHUNK_BYTES = 1 << 20


class ArchiveRefused(Exception):
    """The archive passed a limit, is not an archive, or is damaged; the message is a
    sentence without the blob's key (the caller adds it)."""


@dataclass(frozen=True)
class ArchiveLimits:
    """What one archive may unpack to."""

    max_bytes: int
    max_entries: int = MAX_ARCHIVE_ENTRIES
    max_path_bytes: int = MAX_MEMBER_PATH_BYTES
    max_depth: int = MAX_MEMBER_DEPTH

    @classmethod
    def for_blob(cls, blob_bytes: int) -> "ArchiveLimits":
        """The limits of a blob of ``blob_bytes``: :data:`MAX_EXPANSION` times its
        size, at least :data:`MIN_EXPANDED_BYTES`."""
        return cls(max(blob_bytes * MAX_EXPANSION, MIN_EXPANDED_BYTES))


@dataclass
class Unpacked:
    """What an archive held: its entries and the bytes of its regular files."""

    entries: int = 0
    bytes: int = 0


def member_path(name: str, limits: ArchiveLimits) -> PurePosixPath | None:
    """The relative path a member may be written to; None for the archive's own
    directory (``.``, ``./``).

    Raises:
        ArchiveRefused: the path is absolute, climbs with ``..``, or passes the
            length or depth limit.
    """
    size = len(name.encode("utf-8", "surrogateescape"))
    if size > limits.max_path_bytes:
        raise ArchiveRefused(f"archive member {name[:60]!r}... has a path of {size} "
                             f"bytes, over the limit of {limits.max_path_bytes}")
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts:
        raise ArchiveRefused(f"archive member {name!r} points outside its directory")
    parts = [p for p in path.parts if p not in ("", ".")]
    if len(parts) > limits.max_depth:
        raise ArchiveRefused(f"archive member {name[:60]!r} is {len(parts)} directories "
                             f"deep, over the limit of {limits.max_depth}")
    return PurePosixPath(*parts) if parts else None


#: One member as :func:`unpack` walks it: its name, whether it is a directory, and
#: its bytes (None: not a regular file, skipped).
_Member = tuple[str, bool, "IO[bytes] | None"]


def _tar_members(tf: tarfile.TarFile) -> Iterator[_Member]:
    while True:
        member = tf.next()
        if member is None:
            return
        # next() keeps every header it read (for getmembers()): forgotten here, so
        # memory stays flat however many members follow.
        tf.members.clear()                 # type: ignore[attr-defined]
        # extractfile would follow a link: only a regular file is opened.
        yield member.name, member.isdir(), tf.extractfile(member) if member.isfile() \
            else None


def _zip_members(zf: zipfile.ZipFile) -> Iterator[_Member]:
    for info in zf.infolist():
        mode = info.external_attr >> 16
        link = mode and (mode & 0o170000) not in (0, 0o100000, 0o040000)
        yield info.filename, info.is_dir(), None if link or info.is_dir() \
            else zf.open(info)


def unpack(source: BinaryIO, dest: Path, limits: ArchiveLimits) -> Unpacked:
    """Write the regular files and directories of the archive ``source`` (zip, jar,
    tar, tar.gz, tar.bz2, tar.xz) under ``dest``, counting as it goes.

    Raises:
        ArchiveRefused: a limit passed, a member's path refused, not an archive, or
            damaged (what was written stays: the caller removes ``dest``).
        OSError: a write failed.
    """
    source.seek(0)
    if zipfile.is_zipfile(source):
        source.seek(0)
        try:
            with zipfile.ZipFile(source) as zf:
                return _walk(_zip_members(zf), dest, limits)
        except _DAMAGED as exc:
            _reraise_ours(exc)
            raise ArchiveRefused(f"the zip archive is damaged or unsupported "
                                 f"({exc})") from None
    source.seek(0)
    try:
        tf = tarfile.open(fileobj=source, mode="r:*")
    except tarfile.TarError:
        raise ArchiveRefused("it is neither a zip nor a tar archive, so it cannot be "
                             "uncompressed") from None
    with tf:
        try:
            return _walk(_tar_members(tf), dest, limits)
        except _DAMAGED as exc:
            _reraise_ours(exc)
            raise ArchiveRefused(f"the tar archive is damaged ({exc})") from None


#: What a damaged archive raises as it is read: the formats' own errors, the
#: decompressors' (bz2 and gzip raise OSError without an errno), a truncated stream.
_DAMAGED = (tarfile.TarError, zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error,
            lzma.LZMAError, EOFError, OSError, ValueError, NotImplementedError,
            RuntimeError)


def _reraise_ours(exc: BaseException) -> None:
    """Raise ``exc`` again if it is a write of ours that failed (an OSError with an
    errno), not the archive's fault."""
    if isinstance(exc, OSError) and exc.errno is not None:
        raise exc


def _walk(members: Iterator[_Member], dest: Path, limits: ArchiveLimits) -> Unpacked:
    done = Unpacked()
    for name, is_dir, stream in members:
        done.entries += 1
        if done.entries > limits.max_entries:
            raise ArchiveRefused(f"it holds more than {limits.max_entries} entries "
                                 "(counted as read; the limit)")
        rel = member_path(name, limits)        # every member, even one skipped
        if rel is None:
            continue
        if is_dir:
            dest.joinpath(*rel.parts).mkdir(parents=True, exist_ok=True)
            continue
        if stream is None:
            continue            # links, devices and fifos: they could point outside
        with stream:
            out = dest.joinpath(*rel.parts)
            out.parent.mkdir(parents=True, exist_ok=True)
            with open(out, "wb") as f:     # a tar may hold a name twice
                while chunk := stream.read(CHUNK_BYTES):
                    done.bytes += len(chunk)
                    if done.bytes > limits.max_bytes:
                        raise ArchiveRefused(
                            f"it unpacks to more than {limits.max_bytes} bytes "
                            "(decompressed bytes counted as read; the limit)")
                    f.write(chunk)
    return done


def _child_main(argv: list[str]) -> None:
    """The child: cap the address space, become the work directory's owner, unpack
    stdin into DEST, answer one JSON line (see the module docstring)."""
    dest, max_bytes, max_entries, memory, uid, gid = argv
    resource.setrlimit(resource.RLIMIT_AS, (int(memory), int(memory)))
    if int(uid) != os.geteuid():
        # For good: this child unpacks one archive for one owner, then exits.
        os.setgroups([])
        os.setgid(int(gid))
        os.setuid(int(uid))
    limits = ArchiveLimits(int(max_bytes), int(max_entries))
    try:
        with os.fdopen(0, "rb", closefd=False) as source:
            done = unpack(source, Path(dest), limits)
        answer: dict[str, object] = {"entries": done.entries, "bytes": done.bytes}
    except ArchiveRefused as exc:
        answer = {"refused": str(exc)}
    except OSError as exc:
        answer = {"refused": f"cannot write {exc.filename or 'a member'} "
                             f"({exc.strerror or exc})"}
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    _child_main(sys.argv[1:])
