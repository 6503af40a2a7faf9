"""Helpers of the HA tests: a nimbus's coordination parts on a real ZooKeeper, without
the daemon around them."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from nimbus_thrift.nimbus.ha.coordinator import Coordinator
from nimbus_thrift.nimbus.ha.leadership import Leadership
from nimbus_thrift.nimbus.role import NimbusPeer
from nimbus_thrift.nimbus.ha.replication import Replica, ZkJournal
from nimbus_thrift.nimbus.state.store import Store

#: Short sessions: a lost nimbus is noticed in about this long.
SESSION_SECS = 2.0


class Node:
    """One nimbus's store, session, election, journal and replica."""

    def __init__(self, zookeeper: Any, root: str, tmp: Path, port: int) -> None:
        self.store = Store(tmp / f"state-{port}.sqlite3")
        self.zk = Coordinator([zookeeper.address], root, SESSION_SECS)
        self.gained = 0
        self.lost = 0
        self.replica = Replica(self.zk, self.store)
        self.leadership = Leadership(
            self.zk, NimbusPeer("127.0.0.1", port, time.time(), "test"),
            on_gained=self._gained, on_lost=self._lost)
        self.journal = ZkJournal(self.zk, self.leadership)
        self.store.set_journal(self.journal)

    def _gained(self) -> None:
        self.gained += 1
        self.replica.catch_up()

    def _lost(self) -> None:
        self.lost += 1

    def start(self) -> Node:
        self.zk.start(connect_timeout=20)
        self.replica.start()
        self.leadership.start()
        return self

    def stop(self) -> None:
        self.leadership.stop()
        self.replica.stop()
        self.zk.stop()
        self.store.close()


def expire_session(zookeeper: Any, node: Node) -> None:
    """Expire ``node``'s ZooKeeper session from outside, as a partition longer than
    the session timeout would: a second client on the same session id closes it."""
    session_id, password = node.zk.client.client_id
    other = KazooClient(hosts=zookeeper.address, client_id=(session_id, password),
                        timeout=SESSION_SECS)
    other.start(timeout=20)
    other.stop()
    other.close()
