"""Blobs in topologies' work directories: ``topology.blobstore.map`` and the files it
makes.

A topology's ``topology.blobstore.map`` (key -> ``{"localname": name, "uncompress":
bool}``) makes its blobs files in ``<work dir>/blobs/<localname>``
(:func:`parse_blob_map`, :meth:`WorkDirBlobs.materialise`); a new version replaces them
atomically in every work directory that maps the key (:meth:`WorkDirBlobs.refresh`),
so user code that opens the file again sees it (:mod:`nimbus_thrift.topology.blobs`).

A work directory's blobs::

    <work dir>/blobs/.blobstore-map.json   the map as materialised (read by refresh)
    <work dir>/blobs/<localname>           a copy of the current version, or (uncompress)
                                           a symlink to .<localname>.v<version>.<random>/
    <work dir>/blobs/.<name>.<random>.tmp  a copy being made (renamed into place)

An archive is unpacked only as regular files and directories, with no member outside
its directory, and bounded in entries and bytes before anything is written
(:data:`MAX_ARCHIVE_ENTRIES`, :data:`MAX_EXPANSION`).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import tarfile
import threading
import uuid
import zipfile
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any, Callable, Iterable, Mapping

import structlog

from ..topology.blobs import BLOBS_DIR, BLOBSTORE_MAP
from .blobacl import BlobError, check_key
from .store import Blob

log = structlog.get_logger(__name__)

#: Entries an archive may hold to be uncompressed into a topology's work directory.
MAX_ARCHIVE_ENTRIES = 100_000
#: Uncompressed bytes an archive may expand to, per byte of the blob: zip bombs reach
#: ratios of 1000 and more; real data sets rarely pass 10.
MAX_EXPANSION = 20
#: ... and at least this many, whatever the blob's size (a small archive of text).
MIN_EXPANDED_BYTES = 1 << 20
#: Bytes of a work directory's blob map file read back: a topology conf is at most a
#: frame (1 MiB by default); more is damage.
MAX_MAP_FILE_BYTES = 4 << 20

# The conf key and the directory are the DSL's (what user code reads): one home.
WORK_DIR_BLOBS = BLOBS_DIR
#: The blob map of a work directory as materialised (read by
#: :meth:`WorkDirBlobs.refresh`).
MAP_FILE = ".blobstore-map.json"

#: What :class:`WorkDirBlobs` reads a blob through: the current version of a key and its
#: file, kept on disk until the block ends; None if there is no such key.
OpenVersion = Callable[[str], AbstractContextManager["tuple[Blob, Path] | None"]]


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
    version through ``open_version`` (the blob store's). Thread-safe."""

    def __init__(self, topologies_dir: Path, open_version: OpenVersion):
        self.topologies_dir = topologies_dir
        self._open_version = open_version
        self._lock = threading.Lock()       # writes into work directories

    def materialise(self, work_dir: Path, mappings: list[BlobMapping]) -> list[str]:
        """Make each mapped blob a file (or, uncompressed, a directory) in
        ``<work_dir>/blobs/<localname>``, replacing what is there atomically, and record
        the map there for :meth:`refresh`. Returns the problems (a key missing, an
        archive that cannot be unpacked), one sentence each; the others are done.
        """
        if not mappings:
            return []
        target = work_dir / WORK_DIR_BLOBS
        problems = []
        with self._lock:
            target.mkdir(mode=0o700, exist_ok=True)
            _write_atomic(target / MAP_FILE, json.dumps(
                {m.key: {"localname": m.localname, "uncompress": m.uncompress}
                 for m in mappings}, sort_keys=True).encode())
            for mapping in mappings:
                problem = self._place(target, mapping)
                if problem:
                    problems.append(problem)
        return problems

    def refresh(self, key: str) -> int:
        """Replace ``key``'s file in every work directory that maps it (after a new
        version); returns how many were replaced."""
        done = 0
        with self._lock:
            try:
                dirs = sorted(self.topologies_dir.iterdir())
            except OSError:
                return 0
            for work_dir in dirs:
                mapping = _mapping_in(work_dir / WORK_DIR_BLOBS / MAP_FILE, key)
                if mapping is None:
                    continue
                problem = self._place(work_dir / WORK_DIR_BLOBS, mapping)
                if problem:
                    log.warning("blob_refresh_failed", key=key, work_dir=str(work_dir),
                                problem=problem)
                else:
                    done += 1
        if done:
            log.info("blob_refreshed", key=key, work_dirs=done)
        return done

    def _place(self, target: Path, mapping: BlobMapping) -> str:
        """Write the current version of ``mapping.key`` into ``target`` (caller holds
        the lock); a problem as a sentence, or ``""``."""
        with self._open_version(mapping.key) as current:
            if current is None:
                return f"blob {mapping.key!r} does not exist (deleted?); " \
                       f"{mapping.localname} is not there"
            blob, source = current
            try:
                if mapping.uncompress:
                    _place_unpacked(source, target, mapping.localname, blob,
                                    max(blob.bytes * MAX_EXPANSION, MIN_EXPANDED_BYTES))
                else:
                    _place_file(source, target, mapping.localname)
                return ""
            except (OSError, BlobError) as exc:
                return f"blob {mapping.key!r} cannot be placed as " \
                       f"{mapping.localname!r}: {getattr(exc, 'strerror', None) or exc}"


# --- files ------------------------------------------------------------------------

def _tmp_name(target: Path, name: str) -> Path:
    return target / f".{name}.{uuid.uuid4().hex[:12]}.tmp"


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = _tmp_name(path.parent, path.name)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _place_file(source: Path, target: Path, localname: str) -> None:
    """Copy ``source`` to ``target/localname`` by rename: a reader opening the name
    gets the old file or the new one, whole. A copy, not a link: user code that writes
    to its copy cannot damage the stored version."""
    tmp = _tmp_name(target, localname)
    try:
        with open(source, "rb") as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        final = target / localname
        if final.is_dir() and not final.is_symlink():
            shutil.rmtree(final)        # was uncompressed by an older map of the dir
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _place_unpacked(source: Path, target: Path, localname: str, blob: Blob,
                    max_bytes: int) -> None:
    """Unpack the archive ``source`` (zip, jar, tar, tar.gz...) into a new hidden
    directory, then point the symlink ``target/localname`` at it (a rename: atomic);
    older unpacked versions are removed."""
    unpacked = target / f".{localname}.v{blob.version}.{uuid.uuid4().hex[:8]}"
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
    prefix = f".{localname}.v"
    for entry in target.iterdir():
        if entry.name.startswith(prefix) and entry.name != unpacked.name \
                and not entry.name.endswith(".tmp"):
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


def _unpack(source: Path, dest: Path, max_bytes: int, key: str) -> None:
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
                with open(out, "wb") as f:
                    shutil.copyfileobj(stream, f, 1 << 20)

    if zipfile.is_zipfile(source):
        with zipfile.ZipFile(source) as zf:
            infos = zf.infolist()
            extract([(i.filename, i.is_dir(), functools.partial(zf.open, i))
                     for i in infos], sum(i.file_size for i in infos))
        return
    try:
        tf = tarfile.open(source, "r:*")
    except tarfile.TarError:
        raise BlobError(f"blob {key!r} is neither a zip nor a tar archive, so it cannot "
                        "be uncompressed") from None
    with tf:
        members = tf.getmembers()
        # extractfile follows links: only a regular file is opened.
        extract([(m.name, m.isdir(),
                  functools.partial(tf.extractfile, m) if m.isfile() else None)
                 for m in members], sum(m.size for m in members if m.isfile()))


def _mapping_in(map_file: Path, key: str) -> BlobMapping | None:
    try:
        with open(map_file, "rb") as f:
            data = f.read(MAX_MAP_FILE_BYTES + 1)
    except OSError:
        return None
    if len(data) > MAX_MAP_FILE_BYTES:
        return None
    try:
        mappings = parse_blob_map({BLOBSTORE_MAP: json.loads(data)})
    except ValueError:
        return None
    return next((m for m in mappings if m.key == key), None)
