"""The files of an upload in progress, code (:mod:`.transfers`) or blob
(:mod:`.blobstore`): the steps that make them crash safe, in one place.

An upload's bytes live in ``<id>.part`` and its row records how many were
acknowledged. The order of the steps is what makes a crash lose nothing acknowledged::

    chunk   write_at: the file first, then the caller grows the row; after a crash the
            file may hold an unacknowledged tail (trimmed by reclaim), never less
    finish  seal: trim to the acknowledged size, fsync, sha256, rename to the final
            name, fsync the directory; then the caller commits its row
    restart reclaim: a final file whose row is still an upload did not commit (renamed
            back); a part at least as long as acknowledged is trimmed and kept

The functions raise ``OSError`` as it comes: each caller says what failed in its own
words (an upload location, a blob key) and logs its own event.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

#: Bytes read at a time to checksum a finished file: large enough that the hash, not the
#: system calls, is the cost.
HASH_BLOCK_BYTES = 1 << 20


def write_at(part: Path, offset: int, chunk: bytes) -> None:
    """Write ``chunk`` into the existing ``part`` at ``offset`` (the acknowledged size:
    an unacknowledged tail left by a crash or a failed call is overwritten)."""
    with open(part, "r+b") as f:
        f.seek(offset)
        f.write(chunk)


def seal(part: Path, final: Path, size: int) -> str:
    """Make ``part`` durable as ``final``: trim it to ``size``, fsync it, rename it and
    fsync the directory. Returns its sha256 (hex)."""
    digest = hashlib.sha256()
    with open(part, "r+b") as f:
        f.truncate(size)
        os.fsync(f.fileno())
        f.seek(0)
        for block in iter(lambda: f.read(HASH_BLOCK_BYTES), b""):
            digest.update(block)
    os.replace(part, final)
    fsync_dir(part.parent)
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    """The sha256 (hex) of the file at ``path``, read in blocks. Raises OSError."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(HASH_BLOCK_BYTES), b""):
            digest.update(block)
    return digest.hexdigest()


def reclaim(part: Path, final: Path, acknowledged: int) -> bool:
    """After a restart, for an upload whose row is still open: whether its ``part``
    holds the ``acknowledged`` bytes (then it is trimmed to them). A ``final`` without
    its ``part`` was renamed by a finish that did not commit, so it is a part again."""
    if not part.exists() and final.exists():
        os.replace(final, part)
    if part.exists() and part.stat().st_size >= acknowledged:
        with open(part, "r+b") as f:
            f.truncate(acknowledged)
        return True
    return False


def fsync_dir(path: Path) -> None:
    """Make the renames in directory ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
