"""Download sessions: a file read chunk by chunk by one client, bounded in all and per
client address, forgotten after the last chunk or when idle. Code downloads
(:mod:`.transfers`) and blob downloads (:mod:`.blobstore`) are each a table of these.

Session life::

    begin ─► open (a slot of its peer's, one of the daemon's) ─┬─ chunk ... chunk
                                                               │  (each resets the idle clock)
             ended: b"" after the last byte, the file gone, ◄──┘
                    or expire() after expiration_secs idle ─► slot back, on_end(session)

The table knows nothing of what it serves: the caller gives the file, the limits (read
at each begin, so a lowered limit applies at once), the words of its messages and the
exception class, and ``on_end`` for what must happen when a session ends (the blob
store lets go of a version's file there).
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


@dataclass
class Download:
    """One session: ``size`` bytes of ``path`` (file ``file_id``), read up to ``offset``."""

    session: str
    path: Path
    file_id: str
    size: int
    offset: int
    touched_at: float
    peer: str | None = None
    #: The principal that opened the session (None: outside a request).
    owner: str | None = None


class Downloads:
    """Download sessions of one kind; thread-safe.

    Args:
        noun: what a session is called in messages ("download", "blob download").
        error: the exception of a call that cannot proceed (unknown session, file gone).
        refuse: makes (and logs) the refusal of a limit: ``(peer, limit, message)``.
        clock, chunk_bytes, expiration_secs: the owner's.
        on_end: called with each session that ends, outside the table's lock.
    """

    def __init__(self, noun: str, error: type[Exception],
                 refuse: Callable[[str | None, str, str], Exception],
                 clock: Callable[[], float], chunk_bytes: int, expiration_secs: float,
                 on_end: Callable[[Download], None] | None = None):
        self.noun = noun
        self.error = error
        self.refuse = refuse
        self.clock = clock
        self.chunk_bytes = chunk_bytes
        self.expiration_secs = expiration_secs
        self.on_end = on_end
        self._lock = threading.Lock()       # the two tables below
        self.sessions: dict[str, Download] = {}
        self._held: dict[str, int] = {}     # peer -> open sessions

    def held_by(self, peer: str) -> int:
        """Sessions open for ``peer`` (an address)."""
        with self._lock:
            return self._held.get(peer, 0)

    def peers(self) -> dict[str, int]:
        """Open sessions per peer (a copy; a peer with none is absent)."""
        with self._lock:
            return dict(self._held)

    def owner(self, session: object) -> tuple[bool, str | None]:
        """Whether the session exists, and the principal that opened it."""
        with self._lock:
            dl = self.sessions.get(session) if isinstance(session, str) else None
            return (dl is not None, dl.owner if dl is not None else None)

    def begin(self, path: Path, file_id: str, size: int, peer: str | None,
              owner: str | None, *, max_sessions: int, max_per_peer: int) -> str:
        """Open a session reading ``size`` bytes of ``path`` for ``peer`` (an address;
        None: no slot), owned by ``owner``; return its id.

        Raises:
            whatever ``refuse`` makes: ``max_sessions`` are open, or ``max_per_peer``
            of them are ``peer``'s.
        """
        plural = self.noun + "s"
        with self._lock:
            held = self._held.get(peer, 0) if peer is not None else 0
            if len(self.sessions) >= max_sessions:
                name, refusal = "MAX_DOWNLOADS", (
                    f"{len(self.sessions)} {plural} are already open (limit "
                    f"{max_sessions}); retry later")
            elif peer is not None and held >= max_per_peer:
                name, refusal = "max_downloads_per_peer", (
                    f"{peer} already has {held} {plural} in progress (limit "
                    f"{max_per_peer}, max_downloads_per_peer); read them to the end or "
                    f"wait {self.expiration_secs:g} s for them to expire")
            else:
                session = uuid.uuid4().hex
                self.sessions[session] = Download(session, path, file_id, size, 0,
                                                  self.clock(), peer, owner)
                if peer is not None:
                    self._held[peer] = held + 1
                return session
        raise self.refuse(peer, name, refusal)

    def chunk(self, session: object) -> bytes:
        """The next chunk of the session's file; ``b""`` at the end (session ended).

        Raises:
            error: unknown, finished or expired session; the file vanished (ended).
        """
        with self._lock:
            dl = self.sessions.get(session) if isinstance(session, str) else None
            if dl is None:
                raise self.error(f"{self.noun} {session!r} does not exist (finished, "
                                 "or timed out)")
            ended = self._forget(dl.session) if dl.offset >= dl.size else None
            if ended is None:
                offset, dl.touched_at = dl.offset, self.clock()
                length = min(self.chunk_bytes, dl.size - offset)
                dl.offset += length
        if ended is not None:
            self._ended([ended])
            return b""
        try:
            with open(dl.path, "rb") as f:
                f.seek(offset)
                return f.read(length)
        except OSError as exc:
            with self._lock:
                gone = self._forget(dl.session)
            self._ended([gone] if gone is not None else [])
            raise self.error(f"{self.noun} {session!r}: the file is gone "
                             f"({exc.strerror})") from None

    def expire(self, now: float) -> None:
        """End the sessions idle for ``expiration_secs`` or more."""
        with self._lock:
            idle = [session for session, dl in self.sessions.items()
                    if now - dl.touched_at >= self.expiration_secs]
            ended = [gone for gone in map(self._forget, idle) if gone is not None]
        self._ended(ended)

    def _forget(self, session: str) -> Download | None:
        """Remove ``session`` and give its peer's slot back (caller holds the lock);
        the session, or None if another thread ended it first."""
        dl = self.sessions.pop(session, None)
        if dl is not None and dl.peer is not None:
            decrement(self._held, dl.peer)
        return dl

    def _ended(self, ended: list[Download]) -> None:
        if self.on_end is not None:
            for dl in ended:
                self.on_end(dl)


def decrement(counts: dict[str, int], key: str) -> None:
    """One less of ``key`` in ``counts`` (a per-peer table); the row goes at zero, so an
    address that left holds no memory."""
    left = counts.get(key, 0) - 1
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)
