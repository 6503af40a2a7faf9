"""Blobs of the blob store as files, for spouts and bolts.

A topology names the blobs it reads in its configuration, with Storm's key::

    class WordCount(Topology):
        config = {"topology.blobstore.map": {
            "stopwords": {"localname": "stopwords.txt"},          # a file
            "model": {"localname": "model", "uncompress": True},  # an unpacked archive
        }}

The daemon copies each into ``<work dir>/blobs/<localname>`` before the topology
starts, and replaces it (by rename: whole, never half-written) when the blob is
updated. So a component that opens the file again sees the new version from its next
batch on: open it when you use it (:func:`open_blob`, :func:`read_blob`), or let
:func:`load_blob` parse it again only when it changed::

    from nimbus_thrift.topology import load_blob

    def words(data: bytes) -> set[str]:          # defined once: the cache's key
        return set(data.decode().split())

    def process(self, tup):
        stop = load_blob("stopwords.txt", words)

Where the work directory is: ``$NIMBUS_THRIFT_WORK_DIR`` if the launcher set it, else
the process's working directory (the Spark launcher starts the application there,
and in ``local[*]`` its Python workers inherit it).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import IO, Any, Callable, TypeVar

#: The topology conf key naming the blobs a topology sees (Storm's name): blob key ->
#: ``{"localname": str, "uncompress": bool}``.
BLOBSTORE_MAP = "topology.blobstore.map"
#: The directory of a topology's work directory that holds its blobs.
BLOBS_DIR = "blobs"
#: The environment variable naming a topology's work directory, where set.
WORK_DIR_ENV = "NIMBUS_THRIFT_WORK_DIR"

T = TypeVar("T")


class BlobNotFound(FileNotFoundError):
    """No file of that local name: the blob is not in the topology's blob map (or the
    daemon could not place it: see the topology's errors in ``nimbus-thrift info``)."""


def blob_dir() -> Path:
    """The directory holding this topology's blobs."""
    root = os.environ.get(WORK_DIR_ENV)
    return (Path(root) if root else Path.cwd()) / BLOBS_DIR


def blob_path(localname: str) -> Path:
    """The path of the blob mapped to ``localname`` (a file, or the directory of an
    uncompressed archive). Look it up each time you use it: an update replaces it.

    Raises:
        ValueError: ``localname`` is not a plain name (a path, ``.``, ``..``).
        BlobNotFound: there is no such blob in this topology's work directory.
    """
    if not isinstance(localname, str) or not localname or localname in (".", "..") \
            or "/" in localname or "\0" in localname or localname.startswith("."):
        raise ValueError(f"{localname!r} is not a blob's local name (a plain file name "
                         "from topology.blobstore.map)")
    path = blob_dir() / localname
    if not path.exists():
        here = sorted(p.name for p in blob_dir().iterdir()
                      if not p.name.startswith(".")) if blob_dir().is_dir() else []
        raise BlobNotFound(f"no blob {localname!r} in {blob_dir()} (there are: "
                           f"{', '.join(here) or 'none'}); name it in the topology's "
                           f"{BLOBSTORE_MAP}")
    return path


def open_blob(localname: str, mode: str = "rb", **kwargs: Any) -> IO[Any]:
    """Open the current version of a blob for reading (``"rb"`` or ``"r"``). The file
    stays the version it was when opened, even if an update replaces it meanwhile."""
    if mode not in ("r", "rb", "rt"):
        raise ValueError(f"blobs are read-only: mode {mode!r} is not 'r' or 'rb'")
    return open(blob_path(localname), mode, **kwargs)


def read_blob(localname: str) -> bytes:
    """The whole current version of a blob."""
    with open_blob(localname) as f:
        data: bytes = f.read()
        return data


#: Parsed blobs kept per process, by (path, parse function): at most this many, the
#: least recently used dropped first. A parse function made anew at each call (a
#: lambda inside ``process``) is a new key each time: it then parses every call, and
#: the bound keeps that from growing the cache with every tuple.
MAX_CACHED_BLOBS = 64

_cache: OrderedDict[tuple[str, Any], tuple[tuple[int, int, int], Any]] = OrderedDict()
_cache_lock = threading.Lock()


def load_blob(localname: str, parse: Callable[[bytes], T]) -> T:
    """``parse(content)`` of a blob, computed again only when the blob changed (it
    is replaced by rename, so its inode changes), else the value from the last call in
    this process with the same ``parse`` (define it once, not as a lambda at each call).
    For a model, a dictionary, a lookup table: cheap to call per tuple."""
    path = blob_path(localname)
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        key = (str(path), parse)
        with _cache_lock:
            cached = _cache.get(key)
            if cached is not None:
                _cache.move_to_end(key)
        if cached is not None and cached[0] == stamp:
            value: T = cached[1]
            return value
        value = parse(f.read())
    with _cache_lock:
        _cache[key] = (stamp, value)
        _cache.move_to_end(key)
        while len(_cache) > MAX_CACHED_BLOBS:
            _cache.popitem(last=False)
    return value
