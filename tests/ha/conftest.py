"""The HA tests: a real ZooKeeper server for the whole session (tests/support/zookeeper.py);
skipped with the reason where none can be started."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.zookeeper import ZooKeeperServer, available


@pytest.fixture(scope="session")
def zookeeper() -> Iterator[ZooKeeperServer]:
    why = available()
    if why is not None:
        pytest.skip(f"no ZooKeeper server: {why}")
    server = ZooKeeperServer().start()
    try:
        yield server
    finally:
        server.stop()
