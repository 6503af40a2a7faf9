"""Snapshots of the state for the journal's generations (head.py): a store's SQLite
file copied into ``shared_dir/journal/``, checked by sha256 before it is installed."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from ..state.journal import JournalError
from ..state.store import Store
from .head import Snapshot

SNAPSHOT_DIR = "journal"
#: Snapshot files kept: the head's and the one before (a nimbus may be installing it).
KEEP_SNAPSHOTS = 2


def take(store: Store, shared_dir: Path, position: int) -> Snapshot:
    """Copy ``store`` (whose position is ``position``; the caller holds
    ``store.exclusive()``, so nothing commits meanwhile) into the shared directory,
    durably. Raises OSError."""
    directory = shared_dir / SNAPSHOT_DIR
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    name = f"snapshot-{position:020d}.sqlite3"
    part = directory / (name + ".part")
    part.unlink(missing_ok=True)
    store.backup_to(part)
    with open(part, "rb") as f:
        os.fsync(f.fileno())
    os.replace(part, directory / name)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return Snapshot(position, f"{SNAPSHOT_DIR}/{name}", _sha256(directory / name))


def install(store: Store, shared_dir: Path, snapshot: Snapshot) -> None:
    """Replace the store's rows with the snapshot's, once its sha256 is the head's.
    Raises JournalError (unreadable, or not the file the head names)."""
    path = shared_dir / snapshot.file
    try:
        digest = _sha256(path)
    except OSError as exc:
        raise JournalError(f"cannot read the journal's snapshot {path}: "
                           f"{exc.strerror or exc}; check shared_dir") from None
    if digest != snapshot.sha256:
        raise JournalError(f"the journal's snapshot {path} has sha256 {digest}, not the "
                           f"{snapshot.sha256} recorded: it was damaged or replaced")
    store.restore_from(path)


def prune(shared_dir: Path, keep: str) -> None:
    """Delete the snapshots older than the last KEEP_SNAPSHOTS, ``keep`` among them."""
    directory = shared_dir / SNAPSHOT_DIR
    names = sorted(p.name for p in directory.glob("snapshot-*.sqlite3"))
    for name in names[:-KEEP_SNAPSHOTS]:
        if f"{SNAPSHOT_DIR}/{name}" != keep:
            (directory / name).unlink(missing_ok=True)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
