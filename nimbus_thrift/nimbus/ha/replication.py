"""The journal of state changes on ZooKeeper: the leader writes each commit there
before committing it (state/journal.py), every nimbus replays it into its own store.

Writing (:class:`ZkJournal`, the leader's store's journal): one ZooKeeper transaction
checks ``/epoch`` still has the version this nimbus wrote when it gained leadership and
creates the next sequential node of the current generation (head.py); ZooKeeper
acknowledges it once a quorum has it on disk, and only then does the store commit
locally. A former leader's write fails the check (another nimbus wrote /epoch since):
the caller gets "not the leader" and nothing changed anywhere. An entry larger than
:data:`MAX_NODE_BYTES` goes in pieces under /parts first; the log node then names them.
Every :data:`COMPACT_EVERY` entries the leader starts a new generation from a snapshot
of its store (taken with no commit in between) and deletes the generations before the
previous one.

Replaying (:class:`Replica`): within a generation, ZooKeeper numbers the sequential
nodes one after another, so a replica reads entry s+1 after s, applies it with its
position in the same local transaction (``Store.apply``), and when the next one does
not exist yet, sets a watch on it. Past a generation's end it moves to the next; when
what it needs was deleted (it joined late, or was away long), it installs the head's
snapshot and goes on from there. A position already applied (the leader's own commits)
is skipped.
"""

from __future__ import annotations

import json
import threading
import uuid
from pathlib import Path
from typing import Any

import structlog
from kazoo.exceptions import (BadVersionError, ConnectionLoss, KazooException, NoNodeError,
                              RolledBackError)
from kazoo.handlers.threading import KazooTimeoutError

from ...idl import NO_LEADER_MESSAGE, NOT_LEADER_MESSAGE
from ..state.journal import Change, JournalError
from ..state.store import Store
from . import snapshots
from .coordinator import EPOCH, PARTS, Coordinator
from .head import (HEAD, Head, entry_path, generation_path, next_entry, position,
                   read_head, seq_of)
from .leadership import Leadership, address_of

log = structlog.get_logger(__name__)

#: Bytes of one journal node: ZooKeeper refuses requests past about 1 MiB
#: (jute.maxbuffer), the node's name and the transaction's other operation included.
MAX_NODE_BYTES = 512 * 1024
#: Entries per generation: ZooKeeper keeps every node in memory on every server, so the
#: journal is cut there (a snapshot of 10,000 topologies' state is ~60 MB and takes
#: about a second to copy, with commits held).
COMPACT_EVERY = 20_000
_INLINE, _PIECES = b"J", b"P"


class NotLeaderError(JournalError):
    """This nimbus may not change state: another leads, or none does yet."""


class ZkJournal:
    """The leader's store's journal (state/journal.Journal). ``generation`` is read
    from the head when leadership is gained (:meth:`resume`)."""

    def __init__(self, coordinator: Coordinator, leadership: Leadership, store: Store,
                 shared_dir: Path, compact_every: int = COMPACT_EVERY) -> None:
        self._zk = coordinator
        self._leadership = leadership
        self._store = store
        self._shared_dir = shared_dir
        self._compact_every = compact_every
        self.generation = 0
        self._compacting = threading.Lock()

    def resume(self) -> None:
        """Write to the head's current generation (a new leader, caught up)."""
        head = read_head(self._zk)
        assert head is not None, "the head is made before anything is written"
        self.generation = head.generation

    def refusal(self) -> str:
        leader = self._leadership.leader()
        return NOT_LEADER_MESSAGE.format(leader=leader) \
            if leader and leader != address_of(self._leadership.me) else NO_LEADER_MESSAGE

    def record(self, change: Change) -> int:
        epoch = self._leadership.epoch
        if not self._leadership.leading or epoch is None or not self.generation:
            raise NotLeaderError(self.refusal())
        data = change.encode()
        data = _PIECES + self._write_pieces(data) if len(data) > MAX_NODE_BYTES \
            else _INLINE + data
        txn = self._zk.client.transaction()
        txn.check(EPOCH, version=epoch)
        txn.create(generation_path(self.generation) + "/e-", data, sequence=True)
        results = self._commit(txn)
        seq = seq_of(str(results[1]))
        if seq + 1 >= self._compact_every:
            self._compact_soon()
        return position(self.generation, seq)

    def _commit(self, txn: Any) -> list[Any]:
        wait = self._zk.session_timeout
        try:
            # Bounded: a request made as ZooKeeper went away would wait for it forever.
            results: list[Any] = txn.commit_async().get(timeout=wait)
        except (ConnectionLoss, KazooTimeoutError):
            raise JournalError(
                f"ZooKeeper did not confirm the change within {wait:g} s (connection "
                "lost): it may or may not have been made; read the state before trying "
                "again") from None
        except KazooException as exc:
            raise JournalError(f"ZooKeeper refused the change: {exc}") from None
        if isinstance(results[0], (BadVersionError, NoNodeError)):
            raise NotLeaderError(self.refusal())    # another nimbus wrote /epoch since
        failed = [r for r in results if isinstance(r, Exception)
                  and not isinstance(r, RolledBackError)]
        if failed:
            raise JournalError(f"ZooKeeper refused the change: {failed[0]!r}")
        return results

    def _write_pieces(self, data: bytes) -> bytes:
        parent = f"{PARTS}/{uuid.uuid4().hex}"
        client = self._zk.client
        client.create(parent)
        count = 0
        for count, start in enumerate(range(0, len(data), MAX_NODE_BYTES), 1):
            client.create(f"{parent}/p-{count - 1:06d}", data[start:start + MAX_NODE_BYTES])
        return json.dumps({"parent": parent, "count": count}).encode()

    # --- compaction ---------------------------------------------------------------------
    def _compact_soon(self) -> None:
        if self._compacting.acquire(blocking=False):
            threading.Thread(target=self._compact, name="nimbus-journal-compact",
                             daemon=True).start()

    def _compact(self) -> None:
        try:
            self.compact()
        except Exception as exc:  # noqa: BLE001 - the journal goes on; the next entry retries
            log.error("journal_compaction_failed", error=str(exc))
        finally:
            self._compacting.release()

    def compact(self) -> None:
        """Start a new generation from a snapshot; delete those before the previous."""
        epoch = self._leadership.epoch
        if not self._leadership.leading or epoch is None:
            return
        with self._store.exclusive():           # no commit until the head is rewritten
            head = read_head(self._zk)
            assert head is not None
            pos = self._store.journal_position()
            snap = snapshots.take(self._store, self._shared_dir, pos)
            new = Head(head.cluster, head.generation + 1, head.generation, snap,
                       head.version)
            txn = self._zk.client.transaction()
            txn.check(EPOCH, version=epoch)
            txn.set_data(HEAD, new.encode(), version=head.version)
            txn.create(generation_path(new.generation))
            self._commit(txn)
            self.generation = new.generation
        log.info("journal_compacted", generation=new.generation, snapshot=snap.file,
                 position=pos)
        for old in range(1, new.oldest):
            try:
                self._zk.client.delete(generation_path(old), recursive=True)
            except NoNodeError:
                pass
        snapshots.prune(self._shared_dir, keep=snap.file)


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

    def __init__(self, coordinator: Coordinator, store: Store, shared_dir: Path) -> None:
        self._zk = coordinator
        self._store = store
        self._shared_dir = shared_dir
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
            head = read_head(self._zk)
            if head is None:
                return 0
            pos = self._store.journal_position()
            if pos == 0:
                if head.snapshot is not None:
                    self._install(head)
                    pos = head.snapshot.position
                generation, seq = max(pos >> 32, head.oldest), pos & 0xFFFFFFFF
            else:
                generation, seq = next_entry(pos)
            while True:
                try:
                    data, _ = self._zk.client.get(entry_path(generation, seq))
                except NoNodeError:
                    head = read_head(self._zk) or head
                    if generation < head.oldest:
                        # Deleted before this copy had it: start over from the snapshot.
                        assert head.snapshot is not None
                        self._install(head)
                        generation, seq = next_entry(head.snapshot.position)
                        continue
                    if generation < head.generation:
                        generation, seq = generation + 1, 0      # that one is complete
                        continue
                    # Set the watch for it, then look once more (it may have come
                    # between the two).
                    if self._zk.client.exists(entry_path(generation, seq),
                                              watch=lambda _event: self._wake.set()):
                        continue
                    return applied
                self._apply(data, position(generation, seq))
                applied += 1
                seq += 1

    def _apply(self, data: bytes, pos: int) -> None:
        try:
            self._store.apply(read_entry(self._zk, data), pos)
        except Exception as exc:
            self.broken = f"journal entry {pos:#x} could not be applied: {exc}"
            log.error("replica_broken", position=pos, error=str(exc),
                      effect="this nimbus stops replaying; restart it with an empty "
                             "data_dir to copy the cluster's state again")
            raise

    def _install(self, head: Head) -> None:
        assert head.snapshot is not None
        log.info("replica_installing_snapshot", snapshot=head.snapshot.file,
                 position=head.snapshot.position)
        snapshots.install(self._store, self._shared_dir, head.snapshot)

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
