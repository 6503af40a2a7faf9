"""HA mode for one daemon: the session, the replica of the journal and the election
put together, and :class:`~..role.Role` answered from them.

The daemon's order (daemon.py): :meth:`HaNimbus.open` connects and replays the journal
into the store before anything is served, and from then on every commit of the store
goes through the journal (refused while this nimbus does not lead); :meth:`begin`, once
the server listens and its address is known, registers it and joins the election:
once elected, it replays what is left of the journal, then leads.
"""

from __future__ import annotations

from collections.abc import Callable

from ...idl import NO_LEADER_MESSAGE
from ..role import NimbusPeer
from ..settings import NimbusConfig
from ..state.journal import Change
from ..state.store import Store
from .coordinator import Coordinator
from .leadership import Leadership, address_of
from .replication import NotLeaderError, Replica, ZkJournal

#: How long the daemon waits for ZooKeeper at start before it gives up saying so, in
#: session timeouts: a server that does not answer within two would lose the session.
CONNECT_TIMEOUT_SESSIONS = 2.0


class _Closed:
    """The store's journal before this nimbus has joined the election: no commit."""

    def record(self, change: Change) -> int | None:
        raise NotLeaderError(NO_LEADER_MESSAGE)


class HaNimbus:
    """One nimbus of an HA cluster; a :class:`~..role.Role`."""

    def __init__(self, config: NimbusConfig, store: Store) -> None:
        assert config.zookeeper_servers
        self.coordinator = Coordinator(list(config.zookeeper_servers), config.zookeeper_root,
                                       config.zookeeper_session_timeout)
        self._connect_timeout = CONNECT_TIMEOUT_SESSIONS * config.zookeeper_session_timeout
        self._store = store
        self.replica = Replica(self.coordinator, store)
        self.leadership: Leadership | None = None
        self._journal: ZkJournal | None = None

    def open(self) -> None:
        """Connect, close the store to commits of its own, replay the journal.
        Raises coordinator.CoordinationError (ZooKeeper unreachable)."""
        self._store.set_journal(_Closed())
        self.coordinator.start(self._connect_timeout)
        self.replica.start()

    def begin(self, me: NimbusPeer, on_gained: Callable[[], None],
              on_lost: Callable[[], None]) -> None:
        """Register ``me`` and contend; ``on_gained`` runs once this nimbus leads and
        has every change of the journal (its state changes are taken by then),
        ``on_lost`` when it stops leading."""
        self.leadership = Leadership(self.coordinator, me, self.replica.catch_up, on_lost,
                                     on_leading=on_gained)
        self._journal = ZkJournal(self.coordinator, self.leadership)
        self._store.set_journal(self._journal)
        self.leadership.start()

    def close(self) -> None:
        if self.leadership is not None:
            self.leadership.stop()
        self.replica.stop()
        self._store.set_journal(_Closed())
        self.coordinator.stop()

    # --- Role ---------------------------------------------------------------------------
    def leading(self) -> bool:
        return self.leadership is not None and self.leadership.leading

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
