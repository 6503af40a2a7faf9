"""HA mode for one daemon: the session, the replica of the journal and the election
put together, and :class:`~..role.Role` answered from them.

The daemon's order (daemon.py): :meth:`HaNimbus.open` connects, checks that the store's
copy belongs to this cluster (or makes it the cluster's first state), and replays the
journal into it before anything is served; from then on every commit of the store goes
through the journal (refused while this nimbus does not lead). :meth:`begin`, once the
server listens and its address is known, registers it and joins the election: once
elected, it replays what is left of the journal, then leads.

Joining: a store's copy names its cluster in its meta (``journal_cluster``). An empty
copy joins any cluster (it installs the head's snapshot, or replays from the start); a
copy of another cluster is refused with a sentence; the non-empty state of a daemon
that ran alone becomes the first state of a cluster that has none yet (a snapshot,
which every other nimbus installs): that is how one daemon's SQLite state moves to HA.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

from kazoo.exceptions import NodeExistsError

from ...idl import NO_LEADER_MESSAGE
from ..role import NimbusPeer
from ..settings import NimbusConfig
from ..state.journal import Change
from ..state.store import Store
from . import snapshots
from .coordinator import CoordinationError, Coordinator
from .head import HEAD, Head, generation_path, position, read_head
from .leadership import Leadership, address_of
from .replication import COMPACT_EVERY, NotLeaderError, Replica, ZkJournal

#: How long the daemon waits for ZooKeeper at start before it gives up saying so, in
#: session timeouts: a server that does not answer within two would lose the session.
CONNECT_TIMEOUT_SESSIONS = 2.0
#: The store's meta key naming the cluster its copy belongs to.
CLUSTER_KEY = "journal_cluster"


class _Closed:
    """The store's journal before this nimbus has joined the election: no commit."""

    def record(self, change: Change) -> int | None:
        raise NotLeaderError(NO_LEADER_MESSAGE)


class HaNimbus:
    """One nimbus of an HA cluster; a :class:`~..role.Role`."""

    def __init__(self, config: NimbusConfig, store: Store,
                 compact_every: int = COMPACT_EVERY) -> None:
        assert config.zookeeper_servers and config.shared_dir is not None
        self.coordinator = Coordinator(list(config.zookeeper_servers), config.zookeeper_root,
                                       config.zookeeper_session_timeout)
        self._connect_timeout = CONNECT_TIMEOUT_SESSIONS * config.zookeeper_session_timeout
        self._store = store
        self._shared_dir: Path = config.shared_dir
        self._root = config.zookeeper_root
        self._compact_every = compact_every
        self.replica = Replica(self.coordinator, store, self._shared_dir)
        self.leadership: Leadership | None = None
        self._journal: ZkJournal | None = None
        self._ready = False

    def open(self) -> None:
        """Connect, close the store to commits of its own, check or bring its copy
        into the cluster, replay the journal. Raises CoordinationError (ZooKeeper
        unreachable, or the copy is another cluster's)."""
        self._store.set_journal(_Closed())
        self.coordinator.start(self._connect_timeout)
        try:
            self._join(self._head())
            self.replica.start()
        except BaseException:
            self.coordinator.stop()
            raise

    def _head(self) -> Head:
        head = read_head(self.coordinator)
        if head is not None:
            return head
        first = Head(uuid.uuid4().hex, 1, 1, None, 0)
        txn = self.coordinator.client.transaction()
        txn.create(HEAD, first.encode())
        txn.create(generation_path(1))
        txn.commit()            # a failure: another nimbus made it first
        made = read_head(self.coordinator)
        assert made is not None
        return made

    def _join(self, head: Head) -> None:
        store = self._store
        mine = store.local_meta(CLUSTER_KEY)
        if mine == head.cluster:
            return
        if mine is not None:
            raise CoordinationError(
                f"data_dir holds the state of another cluster (cluster {mine}), not the "
                f"one under {self._root} ({head.cluster}): move it away to join with an "
                "empty data_dir (this nimbus then copies the cluster's state)")
        if store.is_empty():
            store.set_local_meta(CLUSTER_KEY, head.cluster)
            return
        fresh = head.generation == 1 and head.snapshot is None and not \
            self.coordinator.client.get_children(generation_path(1))
        if not fresh:
            raise CoordinationError(
                f"data_dir holds state of its own (a daemon that ran alone?) and the "
                f"cluster under {self._root} has state already: move data_dir away to "
                "join with an empty one, or start this daemon alone")
        # This copy becomes the cluster's first state: a snapshot every nimbus installs.
        with store.exclusive():
            store.set_local_meta(CLUSTER_KEY, head.cluster)
            start = position(1, -1)             # before generation 1's first entry
            store.set_local_meta("journal_position", start)
            snap = snapshots.take(store, self._shared_dir, start)
            first = Head(head.cluster, 1, 1, snap, head.version)
            try:
                self.coordinator.client.set(HEAD, first.encode(), version=head.version)
            except Exception as exc:
                store.set_local_meta(CLUSTER_KEY, None)
                store.set_local_meta("journal_position", None)
                raise CoordinationError(
                    "another nimbus brought its state into the cluster first; move this "
                    f"data_dir away to join with an empty one ({exc!r})") from None

    def begin(self, me: NimbusPeer, on_gained: Callable[[], None],
              on_lost: Callable[[], None]) -> None:
        """Register ``me`` and contend; ``on_gained`` runs once this nimbus leads and
        has every change of the journal (its state changes are taken by then),
        ``on_lost`` when it stops leading."""
        def leading() -> None:
            on_gained()
            # Only now are clients' state changes taken: the take-over (recover) reads
            # and rebuilds what the daemon holds in memory (upload owners, timers), and
            # a change let in before it could be undone by it.
            self._ready = True

        def lost() -> None:
            self._ready = False
            on_lost()
        self.leadership = Leadership(self.coordinator, me, self._catch_up, lost,
                                     on_leading=leading)
        self._journal = ZkJournal(self.coordinator, self.leadership, self._store,
                                  self._shared_dir, self._compact_every)
        self._store.set_journal(self._journal)
        self.leadership.start()

    def _catch_up(self) -> None:
        self.replica.catch_up()
        assert self._journal is not None
        self._journal.resume()

    def close(self) -> None:
        self._ready = False
        if self.leadership is not None:
            self.leadership.stop()
        self.replica.stop()
        self._store.set_journal(_Closed())
        self.coordinator.stop()

    # --- Role ---------------------------------------------------------------------------
    def leading(self) -> bool:
        return self._ready and self.leadership is not None and self.leadership.leading

    def refusal(self) -> str:
        return self._journal.refusal() if self._journal is not None else NO_LEADER_MESSAGE

    def leader(self) -> NimbusPeer | None:
        if self.leadership is None:
            return None
        address = self.leadership.leader()
        if address is None:
            return None
        for peer in self.leadership.nimbuses():
            if address_of(peer) == address:
                return peer
        # Elected but not registered yet (a moment after its start): its address.
        host, _, port = address.rpartition(":")
        return NimbusPeer(host.strip("[]"), int(port), 0.0, "unknown")

    def nimbuses(self) -> list[NimbusPeer]:
        return self.leadership.nimbuses() if self.leadership is not None else []
