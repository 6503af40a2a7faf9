"""Real ZooKeeper: the leader's commits reach every replica in order, rowids and all;
a big entry goes in pieces; a follower's and a fenced leader's state changes are
refused, naming the leader, and change nothing anywhere."""

from __future__ import annotations

import pytest

from ha_support import Node
from nimbus_thrift.nimbus.ha.coordinator import EPOCH
from nimbus_thrift.nimbus.ha.head import generation_path
from nimbus_thrift.nimbus.ha.replication import MAX_NODE_BYTES, NotLeaderError
from nimbus_thrift.nimbus.state.store import Action, Upload
from support.polling import wait_for_value

from support.store_rows import record, rows, workload


@pytest.fixture
def cluster(zookeeper, tmp_path):
    root = zookeeper.root()
    leader = Node(zookeeper, root, tmp_path, 7101).start()
    wait_for_value(lambda: leader.leadership.leading, "leading", timeout=20)
    follower = Node(zookeeper, root, tmp_path, 7102).start()
    yield leader, follower
    follower.stop()
    leader.stop()


def caught_up(leader: Node, follower: Node) -> bool:
    return follower.store.journal_position() == leader.store.journal_position()


def test_a_follower_replays_the_leaders_commits_to_the_same_rows(cluster) -> None:
    leader, follower = cluster
    told: list[str] = []
    follower.store.watch(told.append)
    workload(leader.store)
    wait_for_value(lambda: caught_up(leader, follower), "the follower caught up",
                   timeout=20)
    assert leader.store.journal_position() & 0xFFFFFFFF > 100
    assert rows(follower.store) == rows(leader.store)
    assert "b-2-1" in told
    # A follower that starts later replays the whole journal.


def test_a_late_follower_replays_everything(zookeeper, cluster, tmp_path) -> None:
    leader, _ = cluster
    leader.store.insert_topology(record("a-1-1", "a"))
    leader.store.set_action(Action("a-1-1", "remove", 5.0, {}))
    late = Node(zookeeper, leader.zk.root, tmp_path, 7103).start()
    try:
        wait_for_value(lambda: caught_up(leader, late), "late caught up", timeout=20)
        assert rows(late.store) == rows(leader.store)
    finally:
        late.stop()


def test_a_big_change_goes_in_pieces(cluster) -> None:
    leader, follower = cluster
    big = record("big-1-1", "big", conf={"blob": "x" * (3 * MAX_NODE_BYTES)})
    leader.store.insert_topology(big)
    wait_for_value(lambda: caught_up(leader, follower), "caught up", timeout=20)
    assert follower.store.topology("big-1-1") == leader.store.topology("big-1-1")


def test_a_follower_refuses_state_changes_naming_the_leader(cluster) -> None:
    leader, follower = cluster
    with pytest.raises(NotLeaderError, match="the leader is 127.0.0.1:7101"):
        follower.store.insert_upload(Upload("u", "/l", "open", 0, None, 1.0, 1.0, None))
    assert follower.store.upload("u") is None and leader.store.upload("u") is None


def test_a_leader_whose_epoch_was_taken_writes_nothing(zookeeper, cluster) -> None:
    leader, follower = cluster
    leader.store.next_counter()
    wait_for_value(lambda: caught_up(leader, follower), "caught up", timeout=20)
    before = leader.store.journal_position()
    # Another nimbus took over meanwhile (it wrote /epoch), this one not told yet.
    follower.zk.client.set(EPOCH, b"127.0.0.1:7102")
    with pytest.raises(NotLeaderError):
        leader.store.insert_topology(record("late-1-1", "late"))
    assert leader.store.topology("late-1-1") is None
    assert leader.store.journal_position() == before
    entries = follower.zk.client.get_children(generation_path(1))
    assert max(entries) == f"e-{(before & 0xFFFFFFFF) - 1:010d}"
