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
its directory, and bounded in entries and bytes before anything is written
(:data:`MAX_ARCHIVE_ENTRIES`, :data:`MAX_EXPANSION`).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import tarfile
import threading
import uuid
import zipfile
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any, BinaryIO, Callable, Iterable, Mapping

import structlog

from ...topology.blobs import BLOBS_DIR, BLOBSTORE_MAP
from .acl import BlobError, check_key
from ..security.runas import as_owner_of
from ..state.store import Blob

log = structlog.get_logger(__name__)

#: Entries an archive may hold to be uncompressed into a topology's work directory.
MAX_ARCHIVE_ENTRIES = 100_000
#: Uncompressed bytes an archive may expand to, per byte of the blob: zip bombs reach
#: ratios of 1000 and more; real data sets rarely pass 10.
MAX_EXPANSION = 20
#: ... and at least this many, whatever the blob's size (a small archive of text).
MIN_EXPANDED_BYTES = 1 << 20

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
    a time, so a check of READ and the copy it allows are never split by another
    placement (an ACL change places again after it commits, and so comes after)."""

    def __init__(self, topologies_dir: Path, open_version: OpenVersion):
        self.topologies_dir = topologies_dir
        self._open_version = open_version
        self._lock = threading.Lock()       # writes into work directories

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
        with self._lock:
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
                        _place_unpacked(source, target, name, blob,
                                        max(blob.bytes * MAX_EXPANSION, MIN_EXPANDED_BYTES))
                    else:
                        _place_file(source, target, name)
                return ""
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
                    max_bytes: int) -> None:
    """Unpack the archive ``source`` (zip, jar, tar, tar.gz..., open) into a new hidden
    directory, then point the symlink ``target/localname`` at it (a rename: atomic);
    older unpacked versions are removed."""
    unpacked = target / _unpacked_name(localname, blob.version)
    try:
        unpacked.mkdir(mode=0o700)
        _unpack(source, unpacked, max_bytes, blob.key)
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
    for entry in target.iterdir():
        if entry.name != unpacked.name and _hidden_of(entry.name, localname, tmp=False):
            shutil.rmtree(entry, ignore_errors=True)


def _safe_member(name: str, key: str) -> PurePosixPath | None:
    """The relative path an archive member may be written to; None for the archive's
    own directory entries; BlobError for one that would escape."""
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts:
        raise BlobError(f"blob {key!r}: archive member {name!r} points outside its "
                        "directory")
    parts = [p for p in path.parts if p not in ("", ".")]
    return PurePosixPath(*parts) if parts else None


#: An archive member as :func:`_unpack` sees it: its name, whether it is a directory,
#: and how to open its bytes (None: not a regular file, skipped).
_Member = tuple[str, bool, "Callable[[], IO[bytes] | None] | None"]


def _unpack(source: BinaryIO, dest: Path, max_bytes: int, key: str) -> None:
    """Extract regular files and directories only (no links, devices), bounded in
    entries and bytes before anything is written."""
    def extract(members: list[_Member], total: int) -> None:
        if len(members) > MAX_ARCHIVE_ENTRIES:
            raise BlobError(f"blob {key!r} holds {len(members)} archive entries, over "
                            f"the limit of {MAX_ARCHIVE_ENTRIES}")
        if total > max_bytes:
            raise BlobError(f"blob {key!r} would unpack to {total} bytes, over the limit "
                            f"of {max_bytes} ({MAX_EXPANSION} times its size, at least "
                            f"{MIN_EXPANDED_BYTES})")
        for name, is_dir, opener in members:
            rel = _safe_member(name, key)       # every member, even one skipped
            if rel is None:
                continue
            if is_dir:
                dest.joinpath(*rel.parts).mkdir(parents=True, exist_ok=True)
                continue
            stream = opener() if opener is not None else None
            if stream is None:
                continue        # links, devices and fifos: they could point outside
            with stream:
                out = dest.joinpath(*rel.parts)
                out.parent.mkdir(parents=True, exist_ok=True)
                with open(out, "wb") as f:     # a tar may hold a name twice
                    shutil.copyfileobj(stream, f, 1 << 20)

    source.seek(0)
    if zipfile.is_zipfile(source):
        source.seek(0)
        with zipfile.ZipFile(source) as zf:
            infos = zf.infolist()
            extract([(i.filename, i.is_dir(), functools.partial(zf.open, i))
                     for i in infos], sum(i.file_size for i in infos))
        return
    source.seek(0)
    try:
        tf = tarfile.open(fileobj=source, mode="r:*")
    except tarfile.TarError:
        raise BlobError(f"blob {key!r} is neither a zip nor a tar archive, so it cannot "
                        "be uncompressed") from None
    with tf:
        members = tf.getmembers()
        # extractfile follows links: only a regular file is opened.
        extract([(m.name, m.isdir(),
                  functools.partial(tf.extractfile, m) if m.isfile() else None)
                 for m in members], sum(m.size for m in members if m.isfile()))
