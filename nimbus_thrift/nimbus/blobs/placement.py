"""Blobs in topologies' work directories: ``topology.blobstore.map`` and the files it
makes.

A topology's ``topology.blobstore.map`` (key -> ``{"localname": name, "uncompress":
bool}``) makes its blobs files in ``<work dir>/blobs/<localname>``
(:func:`parse_blob_map`, :meth:`WorkDirBlobs.place`); a new version replaces them
atomically, so user code that opens the file again sees it
(:mod:`nimbus_thrift.topology.blobs`).

Every placement decides from the daemon's own records, never from the work
directory, which the topology can write (under ``run_as_user`` it is its user's): the
caller passes the map of the topology's stored conf and its owner, and each blob is
placed only if ``may_read(owner, blob)`` says so on the blob's row as read at that
moment (its ACL, from the database). When it does not, or the key is gone, what was
placed under that local name is removed and the placement reports a problem naming the
blob. Placement happens at each launch, at each start of the daemon, after each new
version of a key and after each change of its ACL (:mod:`.calls`).

A work directory's blobs::

    <work dir>/blobs/<localname>           a copy of the current version, or (uncompress)
                                           a symlink to .<localname>.v<version>.<random>/
    <work dir>/blobs/.<name>.<random>.tmp  a copy being made (renamed into place)

Files are written as the work directory's owner (:func:`.runas.as_owner_of`): what the
topology planted there (a ``blobs`` that is a link to ``/etc``) is followed, if at all,
with its own rights. The blob's own file is opened first, as the daemon.

An archive is unpacked only as regular files and directories, with no member outside
its directory, bounded in entries, decompressed bytes and path length as it is read
(:mod:`.archives`), in a child process with memory and time limits (:mod:`.unpacker`);
one that passes a limit is removed and is a problem naming the blob and the limit.

Each work directory has its own lock: a placement in one never waits for another's (a
bomb refused in one topology once held every topology's placements for 53 s).
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterable, Mapping

import structlog

from ...topology.blobs import BLOBS_DIR, BLOBSTORE_MAP
from .acl import BlobError, check_key
from ..security.runas import as_owner_of
from ..state.locks import KeyedLocks
from ..state.store import Blob
from .archives import ArchiveLimits, ArchiveRefused
from .unpacker import unpack_in_child

log = structlog.get_logger(__name__)

# The conf key and the directory are the DSL's (what user code reads): one home.
WORK_DIR_BLOBS = BLOBS_DIR
#: The blob map an older daemon kept in each work directory and read back (the
#: topology could rewrite it): removed at the next placement, never read.
OLD_MAP_FILE = ".blobstore-map.json"

#: What :class:`WorkDirBlobs` reads a blob through: the current version of a key and its
#: file, kept on disk until the block ends; None if there is no such key.
OpenVersion = Callable[[str], AbstractContextManager["tuple[Blob, Path] | None"]]
#: Whether a topology's owner (a principal) may read a blob (its row as of now): the
#: daemon's rule, given by the caller (:mod:`.calls`).
MayRead = Callable[[str, Blob], bool]


@dataclass(frozen=True)
class BlobMapping:
    """One entry of ``topology.blobstore.map``."""

    key: str
    localname: str
    uncompress: bool


def parse_blob_map(conf: Mapping[str, Any]) -> list[BlobMapping]:
    """The entries of a topology conf's ``topology.blobstore.map`` (Storm's format:
    key -> ``{"localname": str, "uncompress": bool}``, both optional; the local name
    defaults to the key), in key order.

    Raises:
        ValueError: the map is malformed, a key or local name is invalid, or two keys
            share a local name (the message says which).
    """
    value = conf.get(BLOBSTORE_MAP)
    if value is None:
        return []
    if not isinstance(value, dict):
        raise ValueError(f"{BLOBSTORE_MAP} must be a map of blob key to "
                         f"{{localname, uncompress}}, not {type(value).__name__}")
    out: list[BlobMapping] = []
    names: dict[str, str] = {}
    for key in sorted(value):
        try:
            check_key(key)
        except BlobError as exc:
            raise ValueError(f"{BLOBSTORE_MAP}: {exc}") from None
        entry = value[key] if value[key] is not None else {}
        if not isinstance(entry, dict):
            raise ValueError(f"{BLOBSTORE_MAP}[{key!r}] must be a map with localname and "
                             f"uncompress, not {entry!r}")
        localname = entry.get("localname", key)
        uncompress = entry.get("uncompress", False)
        if not isinstance(uncompress, bool):
            raise ValueError(f"{BLOBSTORE_MAP}[{key!r}].uncompress must be true or false, "
                             f"not {uncompress!r}")
        try:
            check_key(localname)
        except BlobError:
            raise ValueError(f"{BLOBSTORE_MAP}[{key!r}].localname {localname!r} is not a "
                             "plain file name (the blob key rules apply)") from None
        if localname.startswith("."):
            raise ValueError(f"{BLOBSTORE_MAP}[{key!r}].localname {localname!r} must not "
                             "start with '.' (hidden names are the store's own)")
        if localname in names:
            raise ValueError(f"{BLOBSTORE_MAP}: keys {names[localname]!r} and {key!r} "
                             f"both use the local name {localname!r}")
        names[localname] = key
        out.append(BlobMapping(key, localname, uncompress))
    return out


def topologies_using(key: str, confs: Iterable[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """The ids among ``(id, conf)`` whose blob map names ``key``."""
    out = []
    for topology_id, conf in confs:
        value = conf.get(BLOBSTORE_MAP)
        if isinstance(value, dict) and key in value:
            out.append(topology_id)
    return out


class WorkDirBlobs:
    """Copies blobs into the work directories under ``topologies_dir``, reading each
    version through ``open_version`` (the blob store's). Thread-safe: one placement at
    a time per work directory, so a check of READ and the copy it allows are never
    split by another placement there (an ACL change places again after it commits,
    and so comes after); placements in different work directories run side by side."""

    def __init__(self, topologies_dir: Path, open_version: OpenVersion):
        self.topologies_dir = topologies_dir
        self._open_version = open_version
        self._locks = KeyedLocks()          # writes into one work directory

    def place(self, work_dir: Path, mappings: Iterable[BlobMapping], owner: str,
              may_read: MayRead) -> list[str]:
        """Make each mapped blob that ``owner`` may read (``may_read``, on the blob's
        row as of now) a file (or, uncompressed, a directory) in
        ``<work_dir>/blobs/<localname>``, replacing what is there atomically; remove
        what is there for a blob ``owner`` may not read or that does not exist.
        ``mappings`` come from the topology's stored conf (:func:`parse_blob_map`),
        never from the work directory.

        Returns the problems (refused, missing, cannot be unpacked), one sentence each
        naming the blob; the other blobs are placed.
        """
        mappings = list(mappings)
        if not mappings:
            return []
        problems = []
        with self._locks.hold(str(work_dir)):
            for mapping in mappings:
                problem = self._place(work_dir, mapping, owner, may_read)
                if problem:
                    problems.append(problem)
        return problems

    def _place(self, work_dir: Path, mapping: BlobMapping, owner: str,
               may_read: MayRead) -> str:
        """Place or remove one blob (caller holds the lock); a problem as a sentence,
        or ``""``."""
        key, name = mapping.key, mapping.localname
        try:
            with self._open_version(key) as current:
                if current is None:
                    self._remove(work_dir, name)
                    return f"blob {key!r} does not exist (deleted?); {name} is not there"
                blob, path = current
                if not may_read(owner, blob):
                    self._remove(work_dir, name)
                    return (f"blob {key!r} may no longer be read by the topology's owner "
                            f"{owner!r} (its ACL gives it no READ); {name} was removed "
                            "from the work directory")
                # The blob's file as the daemon; everything in the work directory as
                # its owner.
                with open(path, "rb") as source, as_owner_of(work_dir):
                    target = work_dir / WORK_DIR_BLOBS
                    target.mkdir(mode=0o700, exist_ok=True)
                    (target / OLD_MAP_FILE).unlink(missing_ok=True)
                    if mapping.uncompress:
                        _place_unpacked(source, target, name, blob, work_dir)
                    else:
                        _place_file(source, target, name)
                return ""
        except ArchiveRefused as exc:
            log.warning("blob_archive_refused", key=key, localname=name,
                        work_dir=str(work_dir), owner=owner, reason=str(exc))
            return f"blob {key!r} cannot be uncompressed as {name!r}: {exc}; nothing of " \
                   "it was placed"
        except (OSError, BlobError) as exc:
            return f"blob {key!r} cannot be placed as {name!r}: " \
                   f"{getattr(exc, 'strerror', None) or exc}"

    @staticmethod
    def _remove(work_dir: Path, localname: str) -> None:
        """Remove what ``localname`` is in the work directory's blobs (a copy, or the
        link to an unpacked version and the versions), as the directory's owner: a
        link is removed, never what it points to."""
        target = work_dir / WORK_DIR_BLOBS
        if not os.path.lexists(work_dir):
            return
        with as_owner_of(work_dir):
            try:
                entries = list(os.scandir(target))
            except (FileNotFoundError, NotADirectoryError):
                return
            for entry in entries:
                if entry.name != localname and not _hidden_of(entry.name, localname):
                    continue
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path)
                else:
                    os.unlink(entry.path)


# --- files ------------------------------------------------------------------------

def _tmp_name(target: Path, name: str) -> Path:
    return target / f".{name}.{uuid.uuid4().hex[:12]}.tmp"


def _unpacked_name(localname: str, version: int) -> str:
    return f".{localname}.v{version}.{uuid.uuid4().hex[:8]}"


_HIDDEN = re.compile(r"\.(?P<name>.+)\.(?:v\d+\.[0-9a-f]{8}|(?P<tmp>[0-9a-f]{12}\.tmp))")


def _hidden_of(entry: str, localname: str, *, tmp: bool = True) -> bool:
    """Whether ``entry`` is one of ``localname``'s hidden names: an unpacked version
    (:func:`_unpacked_name`) or, with ``tmp``, a copy being made (:func:`_tmp_name`);
    never another local name's (``a`` and ``a.v1``)."""
    match = _HIDDEN.fullmatch(entry)
    return match is not None and match["name"] == localname \
        and (tmp or match["tmp"] is None)


def _place_file(source: BinaryIO, target: Path, localname: str) -> None:
    """Copy ``source`` (the blob's file, open) to ``target/localname`` by rename: a
    reader opening the name gets the old file or the new one, whole. A copy, not a
    link: user code that writes to its copy cannot damage the stored version."""
    tmp = _tmp_name(target, localname)
    try:
        source.seek(0)
        with open(tmp, "xb") as dst:        # x: never through a name planted there
            shutil.copyfileobj(source, dst, 1 << 20)
        final = target / localname
        if final.is_dir() and not final.is_symlink():
            shutil.rmtree(final)        # was uncompressed by an older map of the dir
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _place_unpacked(source: BinaryIO, target: Path, localname: str, blob: Blob,
                    work_dir: Path) -> None:
    """Unpack the archive ``source`` (zip, jar, tar, tar.gz..., open) into a new hidden
    directory, in a child process as the work directory's owner (:mod:`.unpacker`),
    then point the symlink ``target/localname`` at it (a rename: atomic); older
    unpacked versions are removed.

    Raises:
        ArchiveRefused: the archive passed a limit (nothing of it stays).
    """
    owner = os.lstat(work_dir)
    unpacked = target / _unpacked_name(localname, blob.version)
    try:
        unpacked.mkdir(mode=0o700)
        done = unpack_in_child(source, unpacked, ArchiveLimits.for_blob(blob.bytes),
                               uid=owner.st_uid, gid=owner.st_gid)
        link = _tmp_name(target, localname)
        os.symlink(unpacked.name, link)
        final = target / localname
        if final.exists() and not final.is_symlink():
            if final.is_dir():
                shutil.rmtree(final)
            else:
                final.unlink()
        os.replace(link, final)
    except BaseException:
        shutil.rmtree(unpacked, ignore_errors=True)
        raise
    log.info("blob_unpacked", key=blob.key, version=blob.version, entries=done.entries,
             bytes=done.bytes, directory=str(unpacked))
    for entry in target.iterdir():
        if entry.name != unpacked.name and _hidden_of(entry.name, localname, tmp=False):
            shutil.rmtree(entry, ignore_errors=True)
