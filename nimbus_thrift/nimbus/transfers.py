"""Chunked uploads of topology code and chunked downloads of it.

No client string is ever joined to a path. ``beginFileUpload`` returns a location (the
absolute path its file will have, as Storm does); every later call looks that string up
in the database and works on the file named by the upload's own id. ``beginFileDownload``
resolves a topology id or a completed upload's location the same way. So nothing
outside ``<data>/inbox`` can be read or written through these calls, whatever a client
sends.

Upload life::

    begin ─► open: <id>.part grows one chunk at a time; the row records the size
               │     acknowledged (the file may be longer after a crash: trimmed back)
               ├── no chunk for file_copy_expiration_secs ─► deleted
               ├── over max_upload_bytes ─► deleted, the client told why
               └── finish: fsync, sha256, rename to <id>.zip, fsync dir, commit
    complete ─► used by submits; deleted retention_secs after completion if no
                topology uses it
"""

from __future__ import annotations

import hashlib
import os
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import structlog

from .store import Store, Upload

log = structlog.get_logger(__name__)

#: Open uploads at once; each holds a partial file on disk.
MAX_OPEN_UPLOADS = 256
#: Download sessions at once; each is a few hundred bytes of memory.
MAX_DOWNLOADS = 4096


class TransferError(Exception):
    """An upload or download call that cannot proceed; the message says why."""


@dataclass
class _Download:
    path: Path
    size: int
    offset: int
    touched_at: float


class Transfers:
    """Uploads and downloads under ``<data_dir>/inbox``. Thread-safe."""

    def __init__(self, store: Store, data_dir: Path, *, max_upload_bytes: int,
                 expiration_secs: float, retention_secs: float, chunk_bytes: int,
                 clock: Callable[[], float]):
        self.store = store
        self.inbox = data_dir / "inbox"
        self.inbox.mkdir(parents=True, exist_ok=True)
        self.max_upload_bytes = max_upload_bytes
        self.expiration_secs = expiration_secs
        self.retention_secs = retention_secs
        self.chunk_bytes = chunk_bytes
        self.clock = clock
        self._lock = threading.Lock()           # guards the two tables below
        self._upload_locks: dict[str, threading.Lock] = {}
        self._downloads: dict[str, _Download] = {}

    # --- paths ----------------------------------------------------------------------
    def part_path(self, upload_id: str) -> Path:
        return self.inbox / f"{upload_id}.part"

    def code_path(self, upload_id: str) -> Path:
        return self.inbox / f"{upload_id}.zip"

    # --- uploads --------------------------------------------------------------------
    def begin_upload(self) -> str:
        """Start an upload; return its location."""
        open_count = sum(1 for up in self.store.uploads() if up.state == "open")
        if open_count >= MAX_OPEN_UPLOADS:
            raise TransferError(f"{open_count} uploads are already open (limit "
                                f"{MAX_OPEN_UPLOADS}); finish them or wait for them to expire")
        upload_id = uuid.uuid4().hex
        now = self.clock()
        self.part_path(upload_id).touch(exist_ok=False)
        location = str(self.code_path(upload_id))
        self.store.insert_upload(Upload(upload_id, location, "open", 0, None, now, now, None))
        log.info("upload_begun", upload=upload_id)
        return location

    def upload_chunk(self, location: str, chunk: bytes) -> None:
        """Append ``chunk`` to the open upload at ``location``.

        Raises:
            TransferError: unknown, finished or expired location; or the upload would
                pass ``max_upload_bytes`` (it is then deleted).
        """
        with self._upload_lock(location) as up:
            if up.state != "open":
                raise TransferError(f"upload {location!r} is already finished")
            size = up.bytes + len(chunk)
            if size > self.max_upload_bytes:
                self._delete_upload(up)
                raise TransferError(
                    f"upload {location!r} would reach {size} bytes, over the limit of "
                    f"{self.max_upload_bytes} (max_upload_bytes); the upload was discarded")
            # The file is written before the row: after a crash the file may hold an
            # unacknowledged tail, which recovery trims; never the reverse.
            try:
                with open(self.part_path(up.id), "r+b") as f:
                    f.seek(up.bytes)
                    f.write(chunk)
            except OSError as exc:     # disk full, file removed behind our back, ...
                log.error("upload_write_failed", upload=up.id, error=str(exc))
                raise TransferError(f"upload {location!r}: cannot write the chunk "
                                    f"({exc.strerror or exc}); the chunk was not stored") \
                    from None
            self.store.grow_upload(up.id, size, self.clock())

    def finish_upload(self, location: str) -> Upload:
        """Make the upload at ``location`` complete: durable, checksummed, renamed.

        Finishing an already complete upload is a no-op (a retried call).

        Raises:
            TransferError: unknown or expired location.
        """
        with self._upload_lock(location) as up:
            if up.state == "complete":
                return up
            part, final = self.part_path(up.id), self.code_path(up.id)
            digest = hashlib.sha256()
            try:
                with open(part, "r+b") as f:
                    f.truncate(up.bytes)
                    os.fsync(f.fileno())
                    f.seek(0)
                    for block in iter(lambda: f.read(1 << 20), b""):
                        digest.update(block)
                os.replace(part, final)
                _fsync_dir(self.inbox)
            except OSError as exc:
                log.error("upload_finish_failed", upload=up.id, error=str(exc))
                raise TransferError(f"upload {location!r} cannot be finished "
                                    f"({exc.strerror or exc})") from None
            self.store.complete_upload(up.id, digest.hexdigest(), self.clock())
            log.info("upload_finished", upload=up.id, bytes=up.bytes,
                     sha256=digest.hexdigest())
            done = self.store.upload(up.id)
            assert done is not None
            return done

    def completed(self, location: str) -> Upload | None:
        """The complete upload at ``location``, or None."""
        # Only a string can name an upload; anything else sqlite3 cannot bind at all.
        up = self.store.upload_at(location) if isinstance(location, str) else None
        return up if up is not None and up.state == "complete" else None

    def _upload_lock(self, location: str) -> "_Locked":
        up = self.store.upload_at(location) if isinstance(location, str) else None
        if up is None:
            raise TransferError(f"upload location {location!r} does not exist "
                                "(or timed out)")
        return _Locked(self, self._lock_of(up.id), up.id, location)

    def _lock_of(self, upload_id: str) -> threading.Lock:
        with self._lock:
            return self._upload_locks.setdefault(upload_id, threading.Lock())

    def _delete_upload(self, up: Upload) -> None:
        self.store.delete_upload(up.id)
        for path in (self.part_path(up.id), self.code_path(up.id)):
            path.unlink(missing_ok=True)
        with self._lock:
            self._upload_locks.pop(up.id, None)

    # --- downloads ------------------------------------------------------------------
    def begin_download(self, up: Upload) -> str:
        """Open a download session over a complete upload; return its id."""
        path = self.code_path(up.id)
        with self._lock:
            if len(self._downloads) >= MAX_DOWNLOADS:
                raise TransferError(f"{len(self._downloads)} downloads are already open "
                                    f"(limit {MAX_DOWNLOADS}); retry later")
            session = uuid.uuid4().hex
            self._downloads[session] = _Download(path, up.bytes, 0, self.clock())
        return session

    def download_chunk(self, session: str) -> bytes:
        """The next chunk of the session's file; ``b""`` at the end (session closed).

        Raises:
            TransferError: unknown, finished or expired session; the file vanished.
        """
        with self._lock:
            dl = self._downloads.get(session) if isinstance(session, str) else None
            if dl is None:
                raise TransferError(f"download {session!r} does not exist "
                                    "(finished, or timed out)")
            if dl.offset >= dl.size:
                del self._downloads[session]
                return b""
            offset, dl.touched_at = dl.offset, self.clock()
            length = min(self.chunk_bytes, dl.size - offset)
            dl.offset += length
        try:
            with open(dl.path, "rb") as f:
                f.seek(offset)
                data = f.read(length)
        except OSError as exc:
            with self._lock:
                self._downloads.pop(session, None)
            raise TransferError(f"download {session!r}: the file is gone ({exc.strerror})") \
                from None
        return data

    # --- housekeeping ---------------------------------------------------------------
    def sweep(self) -> None:
        """Expire idle uploads and downloads; delete old unused complete uploads."""
        now = self.clock()
        for up in self.store.uploads():
            if up.state == "open" and now - up.touched_at >= self.expiration_secs:
                log.info("upload_expired", upload=up.id, bytes=up.bytes,
                         idle_secs=round(now - up.touched_at))
                with self._lock_of(up.id):
                    current = self.store.upload(up.id)
                    if current is not None and current.touched_at == up.touched_at:
                        self._delete_upload(current)
            elif up.state == "complete" and up.completed_at is not None \
                    and now - up.completed_at >= self.retention_secs \
                    and not self.store.upload_in_use(up.id):
                log.info("upload_removed", upload=up.id, reason="unused past retention")
                self._delete_upload(up)
        with self._lock:
            for session, dl in list(self._downloads.items()):
                if now - dl.touched_at >= self.expiration_secs:
                    del self._downloads[session]

    def recover(self) -> None:
        """After a restart: make files and rows agree (see the module docstring).

        An open upload keeps what was acknowledged (its file is trimmed to the recorded
        size) and gets a fresh expiry; one whose file is shorter than acknowledged (a
        power cut before the data reached the disk) is dropped. Files no row claims are
        deleted: they are unacknowledged leftovers.
        """
        now = self.clock()
        claimed = set()
        for up in self.store.uploads():
            part, final = self.part_path(up.id), self.code_path(up.id)
            if up.state == "open":
                if not part.exists() and final.exists():
                    os.replace(final, part)      # crashed inside finish: not acknowledged
                if part.exists() and part.stat().st_size >= up.bytes:
                    with open(part, "r+b") as f:
                        f.truncate(up.bytes)
                    self.store.grow_upload(up.id, up.bytes, now)
                    claimed.add(part.name)
                    continue
                log.warning("upload_lost", upload=up.id, acknowledged=up.bytes,
                            reason="its file is missing or shorter than acknowledged")
                self.store.delete_upload(up.id)
                part.unlink(missing_ok=True)
            else:
                if final.exists() and final.stat().st_size == up.bytes:
                    claimed.add(final.name)
                    continue
                log.error("upload_damaged", upload=up.id, expected_bytes=up.bytes,
                          reason="the completed file is missing or has the wrong size")
                if not self.store.upload_in_use(up.id):
                    self.store.delete_upload(up.id)
                    final.unlink(missing_ok=True)
                else:
                    claimed.add(final.name)     # kept with its row, not swept as a leftover
        for path in self.inbox.iterdir():
            if path.name not in claimed:
                log.info("inbox_leftover_removed", file=path.name)
                if path.is_dir() and not path.is_symlink():
                    continue
                path.unlink(missing_ok=True)


class _Locked:
    """Holds one upload's lock and yields its current row (re-read under the lock)."""

    def __init__(self, owner: Transfers, lock: threading.Lock, upload_id: str,
                 location: str):
        self.owner, self.lock, self.upload_id, self.location = owner, lock, upload_id, location

    def __enter__(self) -> Upload:
        self.lock.acquire()
        up = self.owner.store.upload(self.upload_id)
        if up is None:
            self.lock.release()
            raise TransferError(f"upload location {self.location!r} does not exist "
                                "(or timed out)")
        return up

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
