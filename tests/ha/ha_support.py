"""Helpers of the HA tests: a nimbus's HA parts (nimbus/ha/node.py) over a store on a
real ZooKeeper, without the daemon around them."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from nimbus_thrift.nimbus.ha.node import HaNimbus
from nimbus_thrift.nimbus.ha.replication import COMPACT_EVERY
from nimbus_thrift.nimbus.role import NimbusPeer
from nimbus_thrift.nimbus.settings import NimbusConfig
from nimbus_thrift.nimbus.state.store import Store

#: Short sessions: a lost nimbus is noticed in about this long.
SESSION_SECS = 2.0


class Node:
    """One nimbus's store and HA parts; ``gained``/``lost`` count the leader's terms."""

    def __init__(self, zookeeper: Any, root: str, tmp: Path, port: int,
                 compact_every: int = COMPACT_EVERY, data: str | None = None) -> None:
        self.port = port
        self.config = NimbusConfig(
            data_dir=tmp / (data or f"data-{port}"), shared_dir=tmp / "shared",
            zookeeper_servers=(zookeeper.address,), zookeeper_root=root,
            zookeeper_session_timeout=SESSION_SECS)
        self.config.data_dir.mkdir(parents=True, exist_ok=True)
        self.store = Store(self.config.data_dir / "state.sqlite3")
        self.ha = HaNimbus(self.config, self.store, compact_every=compact_every)
        self.zk = self.ha.coordinator
        self.replica = self.ha.replica
        self.gained = 0
        self.lost = 0

    @property
    def leadership(self) -> Any:
        return self.ha.leadership

    def start(self) -> Node:
        self.ha.open()
        self.ha.begin(NimbusPeer("127.0.0.1", self.port, time.time(), "test"),
                      on_gained=self._gained, on_lost=self._lost)
        return self

    def _gained(self) -> None:
        self.gained += 1

    def _lost(self) -> None:
        self.lost += 1

    def stop(self) -> None:
        self.ha.close()
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
