"""The blob store: Storm's named, versioned files with ACLs, under ``<data>/blobs``.

A key is never joined to a path: files are named by ids, rows say which file is which
key's. Keys and ACLs are :mod:`.acl`'s; copies in topologies' work directories are
:mod:`.placement`'s (``work_dirs``).

Files and rows (the state tables of :mod:`.store`)::

    <data>/blobs/<id>.part   an upload in progress     row in blob_uploads (id)
    <data>/blobs/<id>.data   a finished version         row in blobs (file = id)

Upload life (the same crash safety as code uploads: the file steps of
:mod:`.partfiles`, the quota of :meth:`.Transfers.store_chunk`)::

    begin  create: the key neither exists nor is being created; its ACL is
           normalised now (the creator gets all rights, as Storm does)
           update: the key exists (the caller checked WRITE)
           ─► <id>.part, then its row (acknowledged bytes 0)
    chunk  quota reserved, written at the acknowledged offset, then the row grows
           (after a crash the file may be longer: trimmed back to the row)
    finish truncate to the acknowledged size, fsync, sha256, rename to <id>.data,
           fsync the directory, then ONE transaction: the key's row names <id> with
           a higher version, the upload's row goes. Only then the previous version's
           file is deleted (later, if a download is still reading it).
    cancel, expiry (no chunk for ``expiration_secs``): file and row deleted.

``recover()`` after a crash: an upload whose ``.data`` exists but whose row is still an
upload did not commit (renamed back to ``.part``); parts are trimmed to what was
acknowledged; files no row names are deleted. So a SIGKILL at any moment loses nothing
acknowledged: a finished blob is its committed row and its fsynced file.

Quota: blobs and blob uploads count in the inbox bytes of :class:`.Transfers` (one
disk quota with code uploads): a chunk reserves its bytes before it is written, and a
row its key and ACL (:func:`.acl.meta_bytes`) before it is written (begin, a new ACL).
A principal may have created ``max_blobs_per_principal`` keys (creates in progress
count); every commit (begin, finish, a new ACL) first checks that the disk keeps
``min_free_disk_bytes`` free, so metadata cannot fill it either. The database gives
pages freed by deletes back at each sweep (:data:`VACUUM_PAGES`).

Sessions (uploads, downloads, listings) are bounded, per client address and in all,
and expire after ``expiration_secs`` without use, as Storm's ``TimeCacheMap``s do.
A version's file stays while a download or a copy into a work directory reads it
(``_readers``), even if the key moved on; the last reader deletes it.
"""

from __future__ import annotations

import os
import threading
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import structlog

from ..transfers import partfiles
from .acl import (Ace, BlobError, KeyExists, KeyNotFound, acl_to_json, check_acl, check_key,
                  meta_bytes)
from .placement import WorkDirBlobs
from ..transfers.downloads import Downloads, decrement
from ..state.store import Blob, BlobUpload, Store
from ..transfers.uploads import (MAX_DOWNLOADS, MAX_OPEN_UPLOADS, TransferLimits, TransferRefused,
                        Transfers, current_peer)
from ..settings import DEFAULT_MAX_BLOBS_PER_PRINCIPAL

log = structlog.get_logger(__name__)

#: Keys per listBlobs page, as Storm's Nimbus.
LIST_PAGE = 100
#: Listing cursors kept at once (a cursor is a key: a few hundred bytes); past it the
#: least recently used is forgotten (its next page says the session timed out).
MAX_LIST_SESSIONS = 1024
#: Free pages of the database given back to the file system per sweep (4 KiB each:
#: 16 MiB a sweep), so one sweep never holds the writer long.
VACUUM_PAGES = 4096


@dataclass
class _Listing:
    after: str | None
    touched_at: float


class BlobStore:
    """Blobs under ``<data_dir>/blobs``; thread-safe. Bytes count in ``transfers``'s
    inbox quota; ``work_dirs`` copies them into the work directories under
    ``topologies_dir`` (:mod:`.placement`) when the blob calls place them."""

    def __init__(self, store: Store, data_dir: Path, transfers: Transfers, *,
                 topologies_dir: Path, max_blob_bytes: int, expiration_secs: float,
                 chunk_bytes: int, clock: Callable[[], float],
                 limits: TransferLimits | None = None,
                 max_blobs_per_principal: int = DEFAULT_MAX_BLOBS_PER_PRINCIPAL):
        self.store = store
        self.dir = data_dir / "blobs"
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.transfers = transfers
        self.max_blob_bytes = max_blob_bytes
        self.expiration_secs = expiration_secs
        self.chunk_bytes = chunk_bytes
        self.clock = clock
        self.limits = limits if limits is not None else transfers.limits
        self.max_blobs_per_principal = max_blobs_per_principal
        self._lock = threading.Lock()          # the in-memory tables below
        self._keys_lock = threading.Lock()     # commits that change a key's row
        self._upload_locks: dict[str, threading.Lock] = {}
        self._upload_peer: dict[str, str] = {}
        self._uploads_of: dict[str, int] = {}
        self._listings: dict[str, _Listing] = {}
        # Readers (downloads, copies into work directories) of each version's file;
        # files of replaced or deleted versions still read: deleted by the last reader.
        self._readers: dict[str, int] = {}
        self._doomed: set[str] = set()
        self.downloads = Downloads("blob download", BlobError, self._refuse, clock,
                                   chunk_bytes, expiration_secs,
                                   on_end=lambda dl: self._unread(dl.file_id))
        self.work_dirs = WorkDirBlobs(topologies_dir, self._open_version)

    @classmethod
    def of(cls, config: Any, store: Store, transfers: Transfers, topologies_dir: Path,
           clock: Callable[[], float]) -> "BlobStore":
        """The daemon's blob store, from its settings (those of code uploads: a blob is
        an upload with a name)."""
        return cls(store, config.files_dir, transfers, topologies_dir=topologies_dir,
                   max_blob_bytes=config.max_upload_bytes,
                   expiration_secs=config.file_copy_expiration_secs,
                   chunk_bytes=config.download_chunk_bytes, clock=clock,
                   limits=TransferLimits.of(config),
                   max_blobs_per_principal=config.max_blobs_per_principal)

    # --- paths ----------------------------------------------------------------------
    def part_path(self, file_id: str) -> Path:
        return self.dir / f"{file_id}.part"

    def data_path(self, file_id: str) -> Path:
        return self.dir / f"{file_id}.data"

    # --- reads ----------------------------------------------------------------------
    def get(self, key: object) -> Blob:
        """The current version of ``key``.

        Raises:
            BlobError: not a valid key.  KeyNotFound: no such key.
        """
        blob = self.store.blob(check_key(key))
        if blob is None:
            raise KeyNotFound(str(key))
        return blob

    def read(self, key: str) -> bytes:
        """The whole current version of ``key`` (for tests and small tools)."""
        return self.data_path(self.get(key).file).read_bytes()

    # --- uploads --------------------------------------------------------------------
    def begin_create(self, key: object, acl: list[Ace], owner: str | None,
                     peer: str | None = None) -> str:
        """Start creating ``key`` with ``acl`` (normalised already); return the session.

        Raises:
            BlobError: invalid key or ACL.  KeyExists: the key exists or is being
            created.  TransferRefused: upload slots or the inbox are full.
        """
        key = check_key(key)
        check_acl(key, acl)
        with self._keys_lock:          # two creates of one key: one of them is refused
            if self.store.blob(key) is not None:
                raise KeyExists(key)
            pending = self.store.creating(key)
            if pending is not None:
                raise KeyExists(key, " (being created: finish or cancel that upload, or "
                                     f"wait {self.expiration_secs:g} s for it to expire)")
            if owner is not None:       # the daemon's own are not counted
                held = self.store.blobs_of(owner)
                if held >= self.max_blobs_per_principal:
                    raise self._refuse(peer, "max_blobs_per_principal", (
                        f"{owner!r} has created {held} blobs (creates in progress "
                        f"included; limit {self.max_blobs_per_principal}, "
                        f"max_blobs_per_principal); delete some to create {key!r}"))
            return self._begin(key, "create", acl_to_json(acl), owner, peer)

    def begin_update(self, key: object, owner: str | None, peer: str | None = None) -> str:
        """Start a new version of ``key`` (the caller checked WRITE); return the session.

        Raises:
            KeyNotFound, BlobError, TransferRefused: as :meth:`begin_create`.
        """
        blob = self.get(key)
        return self._begin(blob.key, "update", None, owner, peer)

    def _begin(self, key: str, kind: str, acl: str | None, owner: str | None,
               peer: str | None) -> str:
        peer = peer if peer is not None else current_peer()
        open_count = len(self.store.blob_uploads())
        if open_count >= MAX_OPEN_UPLOADS:
            raise self._refuse(peer, "MAX_OPEN_UPLOADS", (
                f"{open_count} blob uploads are already open (limit {MAX_OPEN_UPLOADS}); "
                "finish or cancel them, or wait for them to expire"))
        session = uuid.uuid4().hex
        limit = self.limits.max_uploads_per_peer
        with self._lock:
            held = self._uploads_of.get(peer, 0) if peer is not None else 0
            if peer is not None and held >= limit:
                refusal = (f"{peer} already has {held} blob uploads in progress (limit "
                           f"{limit}, max_uploads_per_peer); finish or cancel them, or "
                           f"wait {self.expiration_secs:g} s for them to expire")
            else:
                refusal = ""
                if peer is not None:
                    self._upload_peer[session] = peer
                    self._uploads_of[peer] = held + 1
                self._upload_locks[session] = threading.Lock()
        if refusal:
            raise self._refuse(peer, "max_uploads_per_peer", refusal)
        now = self.clock()
        meta = meta_bytes(key, acl)
        try:
            what = f"blob upload of key {key!r}"
            self.transfers.reserve(what, meta)
        except BaseException:
            self._forget_upload(session)
            raise
        try:
            self._check_free_disk(what, meta)
            # The file before the row: a row always has its file (recover drops a row
            # without one); a file without a row is a leftover.
            self.part_path(session).touch(exist_ok=False)
            self.store.insert_blob_upload(BlobUpload(session, key, kind, acl, 0, owner,
                                                     now, now))
        except BaseException:
            self.transfers.release(meta)
            self._forget_upload(session)
            self.part_path(session).unlink(missing_ok=True)
            raise
        log.info("blob_upload_begun", key=key, kind=kind, session=session, owner=owner)
        return session

    def upload(self, session: object) -> BlobUpload | None:
        """The upload in progress ``session``, or None."""
        return self.store.blob_upload(session) if isinstance(session, str) else None

    def upload_chunk(self, session: str, chunk: bytes) -> None:
        """Append ``chunk`` to the upload ``session``.

        Raises:
            BlobError: unknown or expired session; the blob would pass max_blob_bytes
                (the upload is then discarded).
            TransferRefused: the inbox quota or the free disk (nothing stored; the
                upload stays open).
        """
        with self._locked(session) as up:
            size = up.bytes + len(chunk)
            if size > self.max_blob_bytes:
                self._discard(up)
                raise BlobError(
                    f"blob {up.key!r} would reach {size} bytes, over the limit of "
                    f"{self.max_blob_bytes} (max_upload_bytes); the upload was discarded")
            what = f"blob upload {session!r} of key {up.key!r}"
            try:
                self.transfers.store_chunk(
                    what, self.part_path(up.id), up.bytes, chunk,
                    lambda: self.store.grow_blob_upload(up.id, size, self.clock()))
            except OSError as exc:
                log.error("blob_write_failed", session=up.id, error=str(exc))
                raise BlobError(f"{what}: cannot write the chunk "
                                f"({exc.strerror or exc}); it was not stored") from None

    def finish(self, session: str) -> Blob:
        """Make the upload ``session`` the key's current version (see the module
        docstring); return it. The caller places it in the topologies that map the key
        (:meth:`.WorkDirBlobs.place`, which checks each owner's READ).

        Raises:
            BlobError: unknown or expired session, or the file cannot be finished.
            KeyNotFound: an update whose key was deleted meanwhile (the upload is
                discarded).
        """
        with self._locked(session) as up:
            part, final = self.part_path(up.id), self.data_path(up.id)
            # The commit writes the key's row: its key and ACL at least.
            self._check_free_disk(f"blob upload {session!r} of key {up.key!r}",
                                  meta_bytes(up.key, up.acl))
            try:
                sha256 = partfiles.seal(part, final, up.bytes)
            except OSError as exc:
                log.error("blob_finish_failed", session=up.id, error=str(exc))
                raise BlobError(f"blob upload {session!r} of key {up.key!r} cannot be "
                                f"finished ({exc.strerror or exc})") from None
            with self._keys_lock:
                old = self.store.blob(up.key)
                if up.kind == "update" and old is None:
                    os.replace(final, part)
                    self._discard(up)
                    raise KeyNotFound(up.key)
                now = self.clock()
                # Storm only promises a different version for different data: a clock in
                # ms, and always above the last, so a deleted and re-created key never
                # repeats a version a reader may have cached.
                version = max(int(now * 1000), (old.version + 1) if old else 0)
                acl = up.acl if up.kind == "create" or old is None else old.acl
                blob = Blob(up.key, version, up.id, up.bytes, sha256,
                            acl or "[]", old.created_at if old else now, now)
                with self.store.transaction():
                    self.store.put_blob(blob)
                    if old is None and up.owner is not None:
                        self.store.set_blob_owner(blob.key, up.owner)
                    self.store.delete_blob_upload(up.id)
            self._forget_upload(up.id)
        # The upload's row goes, the key's row stays or comes (a create: the same key
        # and ACL); never more than was reserved.
        self.transfers.release(meta_bytes(up.key, up.acl) - meta_bytes(blob.key, blob.acl)
                               + (meta_bytes(old.key, old.acl) if old else 0))
        if old is not None:
            self.transfers.release(old.bytes)
            self._drop_file(old.file)
        log.info("blob_stored", key=blob.key, version=blob.version, bytes=blob.bytes,
                 sha256=blob.sha256, kind=up.kind)
        return blob

    def cancel(self, session: str) -> None:
        """Discard the upload ``session`` (nothing of it is kept).

        Raises:
            BlobError: unknown or expired session.
        """
        with self._locked(session) as up:
            self._discard(up)
        log.info("blob_upload_cancelled", session=session, key=up.key)

    def _discard(self, up: BlobUpload) -> None:
        """Delete the upload's row and file; its bytes and slot come back."""
        self.store.delete_blob_upload(up.id)
        self.part_path(up.id).unlink(missing_ok=True)
        self.data_path(up.id).unlink(missing_ok=True)
        self.transfers.release(up.bytes + meta_bytes(up.key, up.acl))
        self._forget_upload(up.id)

    def _forget_upload(self, session: str) -> None:
        with self._lock:
            self._upload_locks.pop(session, None)
            peer = self._upload_peer.pop(session, None)
            if peer is not None:
                decrement(self._uploads_of, peer)

    def _locked(self, session: object) -> "_Locked":
        if not isinstance(session, str):
            raise BlobError(f"blob upload {session!r} does not exist (or timed out)")
        with self._lock:
            lock = self._upload_locks.setdefault(session, threading.Lock())
        return _Locked(self, lock, session)

    # --- metadata -------------------------------------------------------------------
    def set_acl(self, key: str, acl: list[Ace]) -> None:
        """Replace the ACL of ``key`` (normalised and checked by the caller: ADMIN).

        Raises:
            KeyNotFound, BadAcl, BlobError.
        """
        check_acl(key, acl)
        text = acl_to_json(acl)
        what = f"the new ACL of blob {key!r}"
        with self._keys_lock:
            old = self.get(key)
            grows = meta_bytes(key, text) - meta_bytes(key, old.acl)
            self.transfers.reserve(what, max(grows, 0))
            try:
                self._check_free_disk(what, meta_bytes(key, text))    # the row written
                self.store.set_blob_acl(key, text)
            except BaseException:
                self.transfers.release(max(grows, 0))
                raise
            if grows < 0:
                self.transfers.release(-grows)
        log.info("blob_acl_set", key=key, acl=[e.text() for e in acl])

    def delete(self, key: str) -> None:
        """Delete ``key`` and its file (the caller checked WRITE and that no topology
        uses it).

        Raises:
            KeyNotFound.
        """
        with self._keys_lock:
            blob = self.get(key)
            self.store.delete_blob(key)
        self.transfers.release(blob.bytes + meta_bytes(blob.key, blob.acl))
        self._drop_file(blob.file)
        log.info("blob_deleted", key=key, version=blob.version)

    def _drop_file(self, file_id: str) -> None:
        """Delete a version's file, or once its last download ends."""
        with self._lock:
            if self._readers.get(file_id):
                self._doomed.add(file_id)
                return
        self.data_path(file_id).unlink(missing_ok=True)

    # --- downloads ------------------------------------------------------------------
    def begin_download(self, blob: Blob, owner: str | None,
                       peer: str | None = None) -> str:
        """Open a download of ``blob`` (the caller checked READ); return the session.
        The version it reads stays readable until the session ends, even if replaced.

        Raises:
            TransferRefused: the daemon's or the peer's downloads are at their limit.
        """
        peer = peer if peer is not None else current_peer()
        self._read(blob.file)
        try:
            return self.downloads.begin(self.data_path(blob.file), blob.file, blob.bytes,
                                        peer, owner, max_sessions=MAX_DOWNLOADS,
                                        max_per_peer=self.limits.max_downloads_per_peer)
        except BaseException:
            self._unread(blob.file)
            raise

    def download_owner(self, session: object) -> tuple[bool, str | None]:
        """Whether the download session exists, and the principal that opened it."""
        return self.downloads.owner(session)

    def download_chunk(self, session: str) -> bytes:
        """The next chunk; ``b""`` at the end (the session is then closed).

        Raises:
            BlobError: unknown, finished or expired session; the file vanished.
        """
        return self.downloads.chunk(session)

    @contextmanager
    def _open_version(self, key: str) -> Iterator[tuple[Blob, Path] | None]:
        """The current version of ``key`` and its file, which stays on disk until the
        block ends even if the version is replaced meanwhile; None if no such key (how
        :class:`.WorkDirBlobs` reads a blob to copy it)."""
        blob = self.store.blob(key)
        if blob is None:
            yield None
            return
        self._read(blob.file)
        try:
            yield blob, self.data_path(blob.file)
        finally:
            self._unread(blob.file)

    def _read(self, file_id: str) -> None:
        """One reader more of a version's file: it stays until the last one ends."""
        with self._lock:
            self._readers[file_id] = self._readers.get(file_id, 0) + 1

    def _unread(self, file_id: str) -> None:
        """One reader less; the file goes if its version was replaced or deleted while
        it was read and this was the last reader."""
        with self._lock:
            decrement(self._readers, file_id)
            gone = file_id in self._doomed and not self._readers.get(file_id)
            if gone:
                self._doomed.discard(file_id)
        if gone:
            self.data_path(file_id).unlink(missing_ok=True)

    # --- listing --------------------------------------------------------------------
    def list_page(self, session: object) -> tuple[list[str], str]:
        """Storm's listBlobs: ``""`` starts a listing; each call gives the next
        :data:`LIST_PAGE` keys and the session; an empty page ends it.

        Raises:
            BlobError: an unknown or expired session.
        """
        now = self.clock()
        with self._lock:
            if session == "" or session is None:
                session = uuid.uuid4().hex
                cursor = _Listing(None, now)
                while len(self._listings) >= MAX_LIST_SESSIONS:
                    oldest = min(self._listings, key=lambda s: self._listings[s].touched_at)
                    del self._listings[oldest]
                self._listings[session] = cursor
            else:
                found = self._listings.get(session) if isinstance(session, str) else None
                if found is None:
                    raise BlobError(f"blob list {session!r} does not exist (or timed out)")
                cursor = found
            after = cursor.after
        assert isinstance(session, str)
        keys = self.store.blob_keys(after, LIST_PAGE)
        with self._lock:
            if not keys:
                self._listings.pop(session, None)
            elif session in self._listings:
                self._listings[session] = _Listing(keys[-1], now)
        return keys, session

    # --- housekeeping ---------------------------------------------------------------
    def sweep(self) -> None:
        """Expire idle uploads, downloads and listings."""
        now = self.clock()
        for up in self.store.blob_uploads():
            if now - up.touched_at < self.expiration_secs:
                continue
            with self._lock:
                lock = self._upload_locks.setdefault(up.id, threading.Lock())
            with lock:
                current = self.store.blob_upload(up.id)
                if current is not None and current.touched_at == up.touched_at:
                    log.info("blob_upload_expired", session=up.id, key=up.key,
                             bytes=up.bytes)
                    self._discard(current)
        self.downloads.expire(now)
        with self._lock:
            for session, cursor in list(self._listings.items()):
                if now - cursor.touched_at >= self.expiration_secs:
                    del self._listings[session]
        # Deleted blobs' rows (and everything else deleted) leave free pages: the file
        # shrinks by them (before, the database never shrank).
        self.store.vacuum(VACUUM_PAGES)

    def recover(self) -> None:
        """After a restart: make files and rows agree (see the module docstring), then
        count the inbox bytes again. Before the daemon serves."""
        now = self.clock()
        claimed: set[str] = set()
        for up in self.store.blob_uploads():
            part, final = self.part_path(up.id), self.data_path(up.id)
            if partfiles.reclaim(part, final, up.bytes):
                self.store.grow_blob_upload(up.id, up.bytes, now)   # a fresh expiry
                claimed.add(part.name)
                continue
            log.warning("blob_upload_lost", session=up.id, key=up.key,
                        acknowledged=up.bytes,
                        reason="its file is missing or shorter than acknowledged")
            self.store.delete_blob_upload(up.id)
            part.unlink(missing_ok=True)
        for blob in self.store.blobs():
            final = self.data_path(blob.file)
            if final.exists() and final.stat().st_size == blob.bytes:
                claimed.add(final.name)
                continue
            # Only a disk that lost fsynced data (or a hand) gets here: keep the row,
            # so the key is not silently re-creatable, and say so.
            log.error("blob_damaged", key=blob.key, expected_bytes=blob.bytes,
                      reason="its file is missing or has the wrong size")
            claimed.add(final.name)
        for path in self.dir.iterdir():
            if path.name not in claimed and not path.is_dir():
                log.info("blob_leftover_removed", file=path.name)
                path.unlink(missing_ok=True)
        self.transfers.recount()

    def _refuse(self, peer: str | None, limit: str, message: str) -> TransferRefused:
        return self.transfers.refuse(peer, limit, message)

    def _check_free_disk(self, what: str, size: int) -> None:
        """Check that the disk of the blobs (and of the database beside them) keeps
        ``min_free_disk_bytes`` free after ``size`` bytes more, before a commit.

        Raises:
            TransferRefused: it would not; nothing was committed.
        """
        reserve = self.limits.min_free_disk_bytes
        try:
            free = self.transfers.free_bytes(self.dir)
        except OSError as exc:          # cannot tell: the commit itself will say
            log.warning("disk_usage_failed", path=str(self.dir), error=str(exc))
            return
        if free - size < reserve:
            raise self._refuse(current_peer(), "min_free_disk_bytes", (
                f"{what}: the disk of the blob store has {free} bytes free, less than "
                f"{size} bytes more and the {reserve} bytes kept free "
                "(min_free_disk_bytes); nothing was committed, retry when there is room"))


class _Locked:
    """Holds one upload's lock and yields its current row (re-read under the lock)."""

    def __init__(self, owner: BlobStore, lock: threading.Lock, session: str):
        self.owner, self.lock, self.session = owner, lock, session

    def __enter__(self) -> BlobUpload:
        self.lock.acquire()
        up = self.owner.store.blob_upload(self.session)
        if up is None:
            self.lock.release()
            with self.owner._lock:      # do not keep a lock for a session never begun
                if self.owner._upload_locks.get(self.session) is self.lock:
                    del self.owner._upload_locks[self.session]
            raise BlobError(f"blob upload {self.session!r} does not exist (or timed out)")
        return up

    def __exit__(self, *exc: object) -> None:
        self.lock.release()
