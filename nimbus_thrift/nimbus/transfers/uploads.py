"""Chunked uploads of topology code and chunked downloads of it.

No client string is ever joined to a path. ``beginFileUpload`` returns a location (the
absolute path its file will have, as Storm does); every later call looks that string up
in the database and works on the file named by the upload's own id. ``beginFileDownload``
resolves a topology id or a completed upload's location the same way. So nothing
outside ``<data>/inbox`` can be read or written through these calls, whatever a client
sends.

Upload life::

    begin ─► <id>.owner (the principal), then the row
    open: <id>.part grows one chunk at a time; the row records the size
               │     acknowledged (the file may be longer after a crash: trimmed back)
               ├── no chunk for file_copy_expiration_secs ─► deleted
               ├── over max_upload_bytes ─► deleted, the client told why
               └── finish: fsync, sha256, rename to <id>.zip, fsync dir, commit
    complete ─► used by submits; deleted retention_secs after completion if no
                topology uses it

Ownership: an upload belongs to the principal that began it, a download session to
the principal that opened it (the handler checks them, :mod:`.authz`). An upload's
owner is kept in memory and in ``<id>.owner`` beside its file, written before its row
(so an upload resumed after a restart is still its owner's); an upload without one
(begun outside a request) has no known owner, and only admins may use it.

Limits (:class:`TransferLimits`, from the daemon's settings): uploads and downloads in
progress per client address (an upload's slot is its peer's from begin to finish,
expiry or discard; a download's until its last chunk or expiry), the bytes the whole
inbox may hold (open uploads' acknowledged bytes and complete uploads together, counted
in memory: a chunk reserves its bytes before it is written), and the free disk a chunk
must leave. The blob store (:mod:`.blobstore`) counts its blobs and blob uploads in
the same inbox bytes (:meth:`Transfers.reserve`, :meth:`Transfers.release`): one
disk quota for everything clients store. A refusal raises :class:`TransferRefused`
and is logged at most once per peer per :data:`~nimbus_thrift.rpc.throttle.INTERVAL`.

Shared with blob uploads: the crash-safe file steps (:mod:`.partfiles`), a chunk
appended within the quota (:meth:`Transfers.store_chunk`), and download sessions
(:class:`.downloads.Downloads`: one table for code, one for blobs).
"""

from __future__ import annotations

import shutil
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import structlog

from ...rpc.context import REQUEST
from ...rpc.throttle import RateLimitedLog
from ..security.authz import upload_name
from ..settings import (DEFAULT_MAX_DOWNLOADS_PER_PEER, DEFAULT_MAX_INBOX_BYTES,
                       DEFAULT_MAX_UPLOADS_PER_PEER, DEFAULT_MIN_FREE_DISK_BYTES, NimbusConfig)
from . import partfiles
from .downloads import Downloads, decrement
from ..state.store import Store, Upload

log = structlog.get_logger(__name__)

#: Open uploads at once; each holds a partial file on disk.
MAX_OPEN_UPLOADS = 256
#: Download sessions at once; each is a few hundred bytes of memory.
MAX_DOWNLOADS = 4096
#: Bytes of an ``<id>.owner`` file read back at recovery: a principal is a user name or
#: a certificate's CN (at most 64 characters by RFC 5280), so more is damage.
MAX_OWNER_BYTES = 1024


class TransferError(Exception):
    """An upload or download call that cannot proceed; the message says why."""


class TransferRefused(TransferError):
    """A limit refused the call (per-peer slots, inbox bytes, free disk). Already logged,
    rate-limited, by :class:`Transfers`: a caller need not log it again."""


@dataclass(frozen=True)
class TransferLimits:
    """The settings of :class:`Transfers` beyond sizes and times (see nimbus/config.py)."""

    max_uploads_per_peer: int = DEFAULT_MAX_UPLOADS_PER_PEER
    max_downloads_per_peer: int = DEFAULT_MAX_DOWNLOADS_PER_PEER
    max_inbox_bytes: int = DEFAULT_MAX_INBOX_BYTES
    min_free_disk_bytes: int = DEFAULT_MIN_FREE_DISK_BYTES

    @classmethod
    def of(cls, config: NimbusConfig) -> "TransferLimits":
        return cls(max_uploads_per_peer=config.max_uploads_per_peer,
                   max_downloads_per_peer=config.max_downloads_per_peer,
                   max_inbox_bytes=config.max_inbox_bytes,
                   min_free_disk_bytes=config.min_free_disk_bytes)


def peer_address(peer: str) -> str:
    """The address part of the server's peer name: ``127.0.0.2:5123`` -> ``127.0.0.2``,
    ``[::1]:5123`` -> ``::1``, ``unix:alice (pid 42)`` -> ``unix:alice``; anything else
    as it is."""
    if peer.startswith("unix:"):
        return peer.split(" ", 1)[0]
    if peer.startswith("[") and "]" in peer:
        return peer[1:peer.index("]")]
    if peer.count(":") == 1:
        return peer.rsplit(":", 1)[0]
    return peer


def current_peer() -> str | None:
    """The address of the client whose request this thread is processing, or None
    (no request: recovery, sweeps, unit tests)."""
    request = REQUEST.get()
    return peer_address(request[0]) if request is not None else None


def _free_bytes(path: Path) -> int:
    # f_bavail: what an unprivileged writer may still use, not the root reserve.
    return shutil.disk_usage(path).free


class Transfers:
    """Uploads and downloads under ``<data_dir>/inbox``. Thread-safe."""

    def __init__(self, store: Store, data_dir: Path, *, max_upload_bytes: int,
                 expiration_secs: float, retention_secs: float, chunk_bytes: int,
                 clock: Callable[[], float], limits: TransferLimits | None = None,
                 free_bytes: Callable[[Path], int] = _free_bytes):
        self.store = store
        self.inbox = data_dir / "inbox"
        self.inbox.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.max_upload_bytes = max_upload_bytes
        self.expiration_secs = expiration_secs
        self.retention_secs = retention_secs
        self.chunk_bytes = chunk_bytes
        self.clock = clock
        self.limits = limits if limits is not None else TransferLimits()
        self.free_bytes = free_bytes
        self._refusals = RateLimitedLog(log)
        self._lock = threading.Lock()           # guards the tables and counts below
        self._upload_locks: dict[str, threading.Lock] = {}
        self._upload_peer: dict[str, str] = {}          # open upload id -> its peer
        self._upload_owner: dict[str, str] = {}         # upload id -> its principal
        self._uploads_of: dict[str, int] = {}           # peer -> open uploads
        # Open uploads' ids, counted here: the rows of complete uploads (one per stored
        # topology) would make counting them in the table grow with the topologies.
        self._open_uploads = {up.id for up in store.uploads() if up.state == "open"}
        self.downloads = Downloads("download", TransferError, self.refuse, clock,
                                   chunk_bytes, expiration_secs)
        # Acknowledged bytes of every upload row, plus chunks being written.
        self._inbox_bytes = self._stored_bytes()

    # --- accounting -----------------------------------------------------------------
    @property
    def inbox_bytes(self) -> int:
        """Bytes counted against ``max_inbox_bytes`` now."""
        with self._lock:
            return self._inbox_bytes

    def uploads_of(self, peer: str) -> int:
        """Uploads in progress from ``peer`` (an address)."""
        with self._lock:
            return self._uploads_of.get(peer, 0)

    def downloads_of(self, peer: str) -> int:
        """Downloads in progress from ``peer`` (an address)."""
        return self.downloads.held_by(peer)

    def began_by(self, upload_id: str) -> str | None:
        """The principal that began the upload; None if not known (begun outside a
        request, or before the daemon restarted)."""
        with self._lock:
            return self._upload_owner.get(upload_id)

    def find(self, location: object) -> Upload | None:
        """The upload (open or complete) at ``location``, or None."""
        return self.store.upload_at(location) if isinstance(location, str) else None

    def download_owner(self, session: object) -> tuple[bool, str | None]:
        """Whether the download session exists, and the principal that opened it."""
        return self.downloads.owner(session)

    def _stored_bytes(self) -> int:
        # Uploads and the blob store's versions and uploads share the one quota.
        return self.store.stored_bytes()

    def refuse(self, peer: str | None, limit: str, message: str) -> TransferRefused:
        """The refusal to raise for ``peer`` over ``limit`` (logged here, at most once
        per peer per interval: uploads and blobs share the one log)."""
        self._refusals.warning("transfer_refused", peer or "unknown", client=peer,
                               limit=limit, reason=message)
        return TransferRefused(message)

    def _release_upload_slot(self, upload_id: str) -> None:
        """The upload is no longer in progress (finished, expired, discarded)."""
        with self._lock:
            self._open_uploads.discard(upload_id)
            peer = self._upload_peer.pop(upload_id, None)
            if peer is not None:
                decrement(self._uploads_of, peer)

    # --- paths ----------------------------------------------------------------------
    def part_path(self, upload_id: str) -> Path:
        return self.inbox / f"{upload_id}.part"

    def code_path(self, upload_id: str) -> Path:
        return self.inbox / f"{upload_id}.zip"

    def owner_path(self, upload_id: str) -> Path:
        return self.inbox / f"{upload_id}.owner"

    # --- uploads --------------------------------------------------------------------
    def begin_upload(self, peer: str | None = None, owner: str | None = None) -> str:
        """Start an upload for ``peer`` (an address; None: the current request's),
        owned by the principal ``owner`` (None: not known); return its location.

        Raises:
            TransferRefused: the daemon's or the peer's open uploads are at their limit,
                or the inbox is full.
        """
        peer = peer if peer is not None else current_peer()
        limits = self.limits
        upload_id = uuid.uuid4().hex
        with self._lock:        # check and take the slots in one step
            open_count = len(self._open_uploads)
            held = self._uploads_of.get(peer, 0) if peer is not None else 0
            name = "max_uploads_per_peer"
            if open_count >= MAX_OPEN_UPLOADS:
                name = "MAX_OPEN_UPLOADS"
                refusal = (f"{open_count} uploads are already open (limit "
                           f"{MAX_OPEN_UPLOADS}); finish them or wait for them to expire")
            elif peer is not None and held >= limits.max_uploads_per_peer:
                refusal = (f"{peer} already has {held} uploads in progress (limit "
                           f"{limits.max_uploads_per_peer}, max_uploads_per_peer); finish "
                           f"them or wait {self.expiration_secs:g} s for them to expire")
            elif self._inbox_bytes >= limits.max_inbox_bytes:
                name = "max_inbox_bytes"
                refusal = (f"the inbox holds {self._inbox_bytes} bytes of uploads (limit "
                           f"{limits.max_inbox_bytes}, max_inbox_bytes); retry when unused "
                           "uploads are removed or open ones expire")
            else:
                refusal = ""
                self._open_uploads.add(upload_id)
                if peer is not None:
                    self._upload_peer[upload_id] = peer
                    self._uploads_of[peer] = held + 1
                if owner is not None:
                    self._upload_owner[upload_id] = owner
        if refusal:
            raise self.refuse(peer, name, refusal)
        now = self.clock()
        location = str(self.code_path(upload_id))
        try:
            self.part_path(upload_id).touch(exist_ok=False)
            if owner is not None:
                self.owner_path(upload_id).write_bytes(owner.encode("utf-8", "surrogatepass"))
            self.store.insert_upload(Upload(upload_id, location, "open", 0, None, now, now,
                                            None))
        except BaseException:
            self._release_upload_slot(upload_id)
            with self._lock:
                self._upload_owner.pop(upload_id, None)
            for path in (self.part_path(upload_id), self.owner_path(upload_id)):
                path.unlink(missing_ok=True)
            raise
        log.info("upload_begun", upload=upload_id, owner=owner)
        return location

    def upload_chunk(self, location: str, chunk: bytes) -> None:
        """Append ``chunk`` to the open upload at ``location``.

        Raises:
            TransferError: unknown, finished or expired location; or the upload would
                pass ``max_upload_bytes`` (it is then deleted).
            TransferRefused: the chunk would take the inbox over ``max_inbox_bytes``, or
                leave less free disk than ``min_free_disk_bytes`` (nothing is stored;
                the upload stays open).
        """
        name = upload_name(location)        # never the daemon's path, in what clients read
        with self._upload_lock(location) as up:
            if up.state != "open":
                raise TransferError(f"upload {name!r} is already finished")
            size = up.bytes + len(chunk)
            if size > self.max_upload_bytes:
                self._delete_upload(up)
                raise TransferError(
                    f"upload {name!r} would reach {size} bytes, over the limit of "
                    f"{self.max_upload_bytes} (max_upload_bytes); the upload was discarded")
            try:
                self.store_chunk(f"upload {name!r}", self.part_path(up.id), up.bytes,
                                 chunk, lambda: self.store.grow_upload(up.id, size,
                                                                       self.clock()))
            except OSError as exc:     # disk full, file removed behind our back, ...
                log.error("upload_write_failed", upload=up.id, error=str(exc))
                raise TransferError(f"upload {name!r}: cannot write the chunk "
                                    f"({exc.strerror or exc}); the chunk was not "
                                    "stored") from None

    def store_chunk(self, what: str, part: Path, offset: int, chunk: bytes,
                    commit: Callable[[], None]) -> None:
        """Write ``chunk`` into the upload file ``part`` at ``offset`` (the acknowledged
        size), then ``commit`` (grow the upload's row), within the quota: the bytes are
        reserved first and the free disk checked; if anything fails the reservation is
        released and nothing was acknowledged. Code and blob uploads both append so.

        Raises:
            TransferRefused: the inbox quota or the free disk (nothing written).
            OSError: the write failed (the caller says so in its own words).
        """
        self.reserve(what, len(chunk))
        stored = False
        try:
            self.check_free_disk(what, len(chunk))
            # The file is written before the row: after a crash the file may hold an
            # unacknowledged tail, which recovery trims; never the reverse.
            partfiles.write_at(part, offset, chunk)
            commit()
            stored = True
        finally:
            if not stored:          # the reservation becomes the row's bytes if stored
                self.release(len(chunk))

    def reserve(self, what: str, size: int) -> None:
        """Count ``size`` bytes more against ``max_inbox_bytes`` (a chunk about to be
        written: an upload's, a blob upload's); ``what`` names it in the refusal.

        Raises:
            TransferRefused: the inbox would pass max_inbox_bytes (nothing counted).
        """
        limits = self.limits
        with self._lock:
            total = self._inbox_bytes + size
            if total <= limits.max_inbox_bytes:
                self._inbox_bytes = total
                return
            held = self._inbox_bytes
        raise self.refuse(current_peer(), "max_inbox_bytes", (
            f"{what}: a chunk of {size} bytes would bring the inbox from "
            f"{held} to {total} bytes, over the limit of {limits.max_inbox_bytes} "
            "(max_inbox_bytes); the chunk was not stored, the upload stays open until "
            "it expires"))

    def release(self, size: int) -> None:
        """``size`` bytes counted by :meth:`reserve` (or stored) are gone."""
        with self._lock:
            self._inbox_bytes -= size

    def recount(self) -> None:
        """Count again what is stored (after a recovery changed files and rows)."""
        with self._lock:
            self._inbox_bytes = self._stored_bytes()

    def check_free_disk(self, what: str, size: int) -> None:
        """Check that writing ``size`` bytes leaves ``min_free_disk_bytes`` free.

        Raises:
            TransferRefused: it would not.
        """
        reserve = self.limits.min_free_disk_bytes
        try:
            free = self.free_bytes(self.inbox)
        except OSError as exc:          # cannot tell: the write itself will say
            log.warning("disk_usage_failed", path=str(self.inbox), error=str(exc))
            return
        if free - size < reserve:
            raise self.refuse(current_peer(), "min_free_disk_bytes", (
                f"{what}: the inbox's disk has {free} bytes free; a chunk of "
                f"{size} bytes would leave less than the {reserve} bytes kept free "
                "(min_free_disk_bytes); the chunk was not stored"))

    def finish_upload(self, location: str) -> Upload:
        """Make the upload at ``location`` complete: durable, checksummed, renamed.

        Finishing an already complete upload is a no-op (a retried call).

        Raises:
            TransferError: unknown or expired location.
        """
        name = upload_name(location)
        with self._upload_lock(location) as up:
            if up.state == "complete":
                return up
            with self._lock:
                total = self._inbox_bytes
            if total > self.limits.max_inbox_bytes:
                # Only after max_inbox_bytes was lowered below what is stored: chunks
                # never take the inbox over it. The upload stays open (until it expires).
                raise self.refuse(current_peer(), "max_inbox_bytes", (
                    f"upload {name!r} cannot be finished: the inbox holds {total} "
                    f"bytes, over the limit of {self.limits.max_inbox_bytes} "
                    "(max_inbox_bytes)"))
            try:
                sha256 = partfiles.seal(self.part_path(up.id), self.code_path(up.id),
                                        up.bytes)
            except OSError as exc:
                log.error("upload_finish_failed", upload=up.id, error=str(exc))
                raise TransferError(f"upload {name!r} cannot be finished "
                                    f"({exc.strerror or exc})") from None
            self.store.complete_upload(up.id, sha256, self.clock())
            self._release_upload_slot(up.id)
            log.info("upload_finished", upload=up.id, bytes=up.bytes, sha256=sha256)
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
            raise TransferError(f"upload location {upload_name(location)!r} does not exist "
                                "(or timed out)")
        return _Locked(self, self._lock_of(up.id), up.id, location)

    def _lock_of(self, upload_id: str) -> threading.Lock:
        with self._lock:
            return self._upload_locks.setdefault(upload_id, threading.Lock())

    def _delete_upload(self, up: Upload) -> None:
        """Delete ``up`` (its current row) and its file; its bytes and slot come back."""
        self.store.delete_upload(up.id)
        for path in (self.part_path(up.id), self.code_path(up.id), self.owner_path(up.id)):
            path.unlink(missing_ok=True)
        self._release_upload_slot(up.id)
        with self._lock:
            self._upload_locks.pop(up.id, None)
            self._upload_owner.pop(up.id, None)
            self._inbox_bytes -= up.bytes

    # --- downloads ------------------------------------------------------------------
    def begin_download(self, up: Upload, peer: str | None = None,
                       owner: str | None = None) -> str:
        """Open a download session over a complete upload for ``peer`` (an address;
        None: the current request's), owned by the principal ``owner``; return its id.

        Raises:
            TransferRefused: the daemon's or the peer's downloads are at their limit.
        """
        peer = peer if peer is not None else current_peer()
        return self.downloads.begin(self.code_path(up.id), up.id, up.bytes, peer, owner,
                                    max_sessions=MAX_DOWNLOADS,
                                    max_per_peer=self.limits.max_downloads_per_peer)

    def download_chunk(self, session: str) -> bytes:
        """The next chunk of the session's file; ``b""`` at the end (session closed).

        Raises:
            TransferError: unknown, finished or expired session; the file vanished.
        """
        return self.downloads.chunk(session)

    # --- housekeeping ---------------------------------------------------------------
    def sweep(self) -> None:
        """Expire idle uploads and downloads; delete old unused complete uploads."""
        now = self.clock()
        for up in self.store.sweepable_uploads(now - self.expiration_secs,
                                               now - self.retention_secs):
            if up.state == "open":
                log.info("upload_expired", upload=up.id, bytes=up.bytes,
                         idle_secs=round(now - up.touched_at))
                with self._lock_of(up.id):
                    current = self.store.upload(up.id)
                    if current is not None and current.touched_at == up.touched_at:
                        self._delete_upload(current)
            else:
                log.info("upload_removed", upload=up.id, reason="unused past retention")
                self._delete_upload(up)
        self.downloads.expire(now)

    def recover(self) -> None:
        """After a restart: make files and rows agree (see the module docstring).

        An open upload keeps what was acknowledged (its file is trimmed to the recorded
        size) and gets a fresh expiry; one whose file is shorter than acknowledged (a
        power cut before the data reached the disk) is dropped. A kept upload's owner
        is read back from its ``<id>.owner``. Files no row claims are deleted: they are
        unacknowledged leftovers.
        """
        now = self.clock()
        claimed = set()
        for up in self.store.uploads():
            part, final = self.part_path(up.id), self.code_path(up.id)
            if up.state == "open":
                if partfiles.reclaim(part, final, up.bytes):
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
        owners = {}
        for up in self.store.uploads():         # the rows kept
            owner = self._read_owner(up.id)
            if owner is not None:
                owners[up.id] = owner
                claimed.add(self.owner_path(up.id).name)
        for path in self.inbox.iterdir():
            if path.name not in claimed:
                log.info("inbox_leftover_removed", file=path.name)
                if path.is_dir() and not path.is_symlink():
                    continue
                path.unlink(missing_ok=True)
        with self._lock:        # before any request: nothing is in flight
            self._inbox_bytes = self._stored_bytes()
            self._open_uploads = {up.id for up in self.store.uploads()
                                  if up.state == "open"}
            self._upload_owner = owners

    def _read_owner(self, upload_id: str) -> str | None:
        """The principal in ``<id>.owner``; None if there is none or it is damaged
        (then only admins may use the upload)."""
        path = self.owner_path(upload_id)
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_OWNER_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("upload_owner_unreadable", upload=upload_id, error=str(exc))
            return None
        try:
            owner = data.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            owner = ""
        if not owner or len(data) > MAX_OWNER_BYTES:
            log.warning("upload_owner_unreadable", upload=upload_id,
                        error=f"{path.name} holds no principal ({len(data)} bytes)")
            return None
        return owner


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
            raise TransferError(f"upload location {upload_name(self.location)!r} does "
                                "not exist (or timed out)")
        return up

    def __exit__(self, *exc: object) -> None:
        self.lock.release()
