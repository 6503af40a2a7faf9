"""Real ZooKeeper: one of several nimbuses leads, every one says which, and another
takes over when the leader stops or its session expires; the new leader's epoch
fences the former one."""

from __future__ import annotations

import pytest

from ha_support import Node, expire_session
from nimbus_thrift.nimbus.ha.leadership import address_of
from nimbus_thrift.nimbus.ha.replication import NotLeaderError
from support.polling import wait_for_value


@pytest.fixture
def nodes(zookeeper, tmp_path):
    root = zookeeper.root()
    made: list[Node] = []

    def make(port: int) -> Node:
        node = Node(zookeeper, root, tmp_path, port).start()
        made.append(node)
        return node
    yield make
    for node in made:
        node.stop()


def test_the_first_contender_leads_and_every_nimbus_says_so(nodes) -> None:
    a = nodes(7001)
    wait_for_value(lambda: a.leadership.leading, "a leading", timeout=20)
    b = nodes(7002)
    wait_for_value(lambda: len(b.leadership.nimbuses()) == 2, "both registered", timeout=20)
    assert a.leadership.leader() == b.leadership.leader() == "127.0.0.1:7001"
    assert not b.leadership.leading and b.gained == 0
    # Each nimbus's view is its watcher's: a learns of b when its watch fires.
    wait_for_value(lambda: [address_of(n) for n in a.leadership.nimbuses()] ==
                   ["127.0.0.1:7001", "127.0.0.1:7002"], "a sees both", timeout=20)


def test_a_stopped_leader_is_followed_and_its_epoch_fenced(nodes) -> None:
    a = nodes(7011)
    wait_for_value(lambda: a.leadership.leading, "a leading", timeout=20)
    first_epoch = a.leadership.epoch
    b = nodes(7012)
    a.stop()
    wait_for_value(lambda: b.leadership.leading, "b leading", timeout=20)
    assert b.leadership.epoch is not None and first_epoch is not None
    assert b.leadership.epoch > first_epoch
    assert b.leadership.leader() == "127.0.0.1:7012"
    wait_for_value(lambda: [address_of(n) for n in b.leadership.nimbuses()] ==
                   ["127.0.0.1:7012"], "b sees a gone", timeout=20)


def test_an_expired_session_steps_down_and_the_other_takes_over(zookeeper, nodes) -> None:
    a = nodes(7021)
    wait_for_value(lambda: a.leadership.leading, "a leading", timeout=20)
    b = nodes(7022)
    wait_for_value(lambda: len(b.leadership.nimbuses()) == 2, "both registered", timeout=20)
    expire_session(zookeeper, a)
    wait_for_value(lambda: b.leadership.leading, "b leading", timeout=30)
    wait_for_value(lambda: a.lost == 1, "a told it lost", timeout=30)
    assert not a.leadership.leading
    # The former leader's writes are refused, naming the new leader once its new
    # session can ask, and change nothing.
    wait_for_value(lambda: a.leadership.leader() == "127.0.0.1:7022", "a sees b lead",
                   timeout=30)
    with pytest.raises(NotLeaderError, match="the leader is 127.0.0.1:7022"):
        a.store.next_counter()
    assert a.store.journal_position() == 0
    # It registers and contends again with its new session.
    wait_for_value(lambda: len(b.leadership.nimbuses()) == 2, "a back", timeout=30)
