"""The journal of state changes on ZooKeeper: the leader writes each commit there
before committing it (state/journal.py), every nimbus replays it into its own store.

Writing (:class:`ZkJournal`, the leader's store's journal): one ZooKeeper transaction
checks ``/epoch`` still has the version this nimbus wrote when it gained leadership and
creates the next sequential ``/log/e-<position>`` node; ZooKeeper acknowledges it once
a quorum has it on disk, and only then does the store commit locally. A former leader's
write fails the check (another nimbus wrote /epoch since): the caller gets "not the
leader" and nothing changed anywhere. An entry larger than :data:`MAX_NODE_BYTES` goes
in pieces under /parts first; the log node then names them.

Replaying (:class:`Replica`): positions are the sequential nodes' numbers, which
ZooKeeper gives out one after another under /log (nothing is deleted there yet), so a
replica reads position p+1 after p, applies it with the position in the same local
transaction (``Store.apply``), and when the next one does not exist yet, sets a watch on
it. A position already applied (the leader's own commits) is skipped.
"""

from __future__ import annotations

import json
import threading
import uuid
from typing import Any

import structlog
from kazoo.exceptions import (BadVersionError, ConnectionLoss, KazooException, NoNodeError,
                              RolledBackError)

from ...idl import NO_LEADER_MESSAGE, NOT_LEADER_MESSAGE
from ..state.journal import Change, JournalError
from ..state.store import Store
from .coordinator import EPOCH, LOG, PARTS, Coordinator
from .leadership import Leadership, address_of

log = structlog.get_logger(__name__)

#: Bytes of one journal node: ZooKeeper refuses requests past about 1 MiB
#: (jute.maxbuffer), the node's name and the transaction's other operation included.
MAX_NODE_BYTES = 512 * 1024
_INLINE, _PIECES = b"J", b"P"


class NotLeaderError(JournalError):
    """This nimbus may not change state: another leads, or none does yet."""


def entry_path(position: int) -> str:
    """The node of journal position ``position`` (1 and up: ZooKeeper numbers a
    parent's sequential children from 0)."""
    return f"{LOG}/e-{position - 1:010d}"


def position_of(path: str) -> int:
    return int(path.rsplit("-", 1)[1]) + 1


class ZkJournal:
    """The leader's store's journal (state/journal.Journal)."""

    def __init__(self, coordinator: Coordinator, leadership: Leadership) -> None:
        self._zk = coordinator
        self._leadership = leadership

    def refusal(self) -> str:
        leader = self._leadership.leader()
        return NOT_LEADER_MESSAGE.format(leader=leader) \
            if leader and leader != address_of(self._leadership.me) else NO_LEADER_MESSAGE

    def record(self, change: Change) -> int:
        epoch = self._leadership.epoch
        if not self._leadership.leading or epoch is None:
            raise NotLeaderError(self.refusal())
        data = change.encode()
        if len(data) > MAX_NODE_BYTES:
            data = _PIECES + self._write_pieces(data)
        else:
            data = _INLINE + data
        client = self._zk.client
        txn = client.transaction()
        txn.check(EPOCH, version=epoch)
        txn.create(f"{LOG}/e-", data, sequence=True)
        try:
            results = txn.commit()
        except ConnectionLoss:
            raise JournalError(
                "ZooKeeper did not confirm the change (connection lost): it may or may "
                "not have been made; read the state before trying again") from None
        except KazooException as exc:
            raise JournalError(f"ZooKeeper refused the change: {exc}") from None
        if isinstance(results[0], (BadVersionError, NoNodeError)):
            raise NotLeaderError(self.refusal())    # another nimbus wrote /epoch since
        failed = [r for r in results if isinstance(r, Exception)
                  and not isinstance(r, RolledBackError)]
        if failed:
            raise JournalError(f"ZooKeeper refused the change: {failed[0]!r}")
        return position_of(str(results[1]))

    def _write_pieces(self, data: bytes) -> bytes:
        parent = f"{PARTS}/{uuid.uuid4().hex}"
        client = self._zk.client
        client.create(parent)
        count = 0
        for count, start in enumerate(range(0, len(data), MAX_NODE_BYTES), 1):
            client.create(f"{parent}/p-{count - 1:06d}", data[start:start + MAX_NODE_BYTES])
        return json.dumps({"parent": parent, "count": count}).encode()


def read_entry(coordinator: Coordinator, data: bytes) -> Change:
    """The Change a log node holds (its pieces fetched). Raises JournalError."""
    if data[:1] == _INLINE:
        return Change.decode(data[1:])
    if data[:1] == _PIECES:
        try:
            ref: dict[str, Any] = json.loads(data[1:])
            pieces = [coordinator.client.get(f"{ref['parent']}/p-{i:06d}")[0]
                      for i in range(int(ref["count"]))]
        except (ValueError, KeyError, TypeError, NoNodeError) as exc:
            raise JournalError(f"a journal entry's pieces are unreadable: {exc}") from None
        return Change.decode(b"".join(pieces))
    raise JournalError("not a journal entry (unknown kind)")


class Replica:
    """Applies the journal to ``store`` as it grows; :meth:`catch_up` applies what is
    there now, on the caller's thread (the new leader's, before it leads)."""

    def __init__(self, coordinator: Coordinator, store: Store) -> None:
        self._zk = coordinator
        self._store = store
        self._lock = threading.Lock()          # one applier at a time
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        #: Why replaying stopped, when an entry could not be applied (else None).
        self.broken: str | None = None

    def start(self) -> None:
        self.catch_up()
        self._thread = threading.Thread(target=self._follow, name="nimbus-replica",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def catch_up(self) -> int:
        """Apply every entry after the store's position; return how many."""
        applied = 0
        with self._lock:
            while True:
                position = self._store.journal_position() + 1
                try:
                    data, _ = self._zk.client.get(entry_path(position))
                except NoNodeError:
                    # Set the watch for it, then look once more (it may have come
                    # between the two).
                    if self._zk.client.exists(entry_path(position),
                                              watch=lambda _event: self._wake.set()):
                        continue
                    return applied
                try:
                    self._store.apply(read_entry(self._zk, data), position)
                except Exception as exc:
                    self.broken = f"journal entry {position} could not be applied: {exc}"
                    log.error("replica_broken", position=position, error=str(exc),
                              effect="this nimbus stops replaying; restart it from a "
                                     "copy of the leader's state")
                    raise
                applied += 1

    def _follow(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(1.0)            # a lost watch costs a second at most
            self._wake.clear()
            if self._stopping.is_set() or self.broken:
                return
            try:
                self.catch_up()
            except KazooException as exc:
                log.warning("replica_waiting", error=str(exc),
                            effect="replaying again once ZooKeeper answers")
            except Exception:
                return
