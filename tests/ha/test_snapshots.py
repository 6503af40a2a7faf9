"""Real ZooKeeper: the journal in generations. The leader starts a new one from a
snapshot every so many entries and deletes the older; replicas that follow, join late
or come back after the entries they need were deleted install the snapshot and reach
the leader's rows; a daemon's single-mode state becomes a new cluster's first state;
a copy of other state is refused with a sentence."""

from __future__ import annotations

import pytest

from ha_support import Node
from nimbus_thrift.nimbus.ha.coordinator import CoordinationError
from nimbus_thrift.nimbus.ha.head import generation_path, read_head
from nimbus_thrift.nimbus.ha.snapshots import SNAPSHOT_DIR
from nimbus_thrift.nimbus.state.store import Action, Store
from support.polling import wait_for_value
from support.store_rows import record, rows, workload

EVERY = 25


def caught_up(leader: Node, other: Node) -> bool:
    return other.store.journal_position() == leader.store.journal_position()


@pytest.fixture
def make(zookeeper, tmp_path):
    root = zookeeper.root()
    nodes: list[Node] = []

    def node(port: int, **kw) -> Node:
        n = Node(zookeeper, root, tmp_path, port, compact_every=EVERY, **kw).start()
        nodes.append(n)
        return n
    yield node
    for n in nodes:
        try:
            n.stop()
        except Exception:  # noqa: BLE001 - stopped by the test already
            pass


def test_generations_are_cut_and_the_old_deleted(make, tmp_path) -> None:
    leader = make(7201)
    wait_for_value(lambda: leader.leadership.leading, "leading", timeout=20)
    follower = make(7202)
    workload(leader.store)                                  # ~120 entries
    wait_for_value(lambda: read_head(leader.zk).generation >= 4, "generations cut",
                   timeout=30)
    wait_for_value(lambda: caught_up(leader, follower), "caught up", timeout=30)
    assert rows(follower.store) == rows(leader.store)

    def kept_from_oldest() -> bool:
        # The deletions follow each cut on the leader's compaction thread.
        head = read_head(leader.zk)
        kept = sorted(leader.zk.client.get_children("/log"))
        return kept == [generation_path(g).rsplit("/", 1)[1]
                        for g in range(head.oldest, head.generation + 1)]
    wait_for_value(kept_from_oldest, "only the kept generations left", timeout=30)
    assert len(list((tmp_path / "shared" / SNAPSHOT_DIR).glob("snapshot-*.sqlite3"))) <= 2


def test_a_late_or_returning_replica_installs_the_snapshot(make) -> None:
    leader = make(7211)
    wait_for_value(lambda: leader.leadership.leading, "leading", timeout=20)
    away = make(7212, data="away")
    leader.store.insert_topology(record("z-9-1", "z"))
    wait_for_value(lambda: caught_up(leader, away), "caught up", timeout=20)
    away.stop()
    # While it is away, three generations go by: what it would replay is deleted.
    workload(leader.store)
    for i in range(3 * EVERY):
        leader.store.set_status("z-9-1", "INACTIVE" if i % 2 else "ACTIVE", None)
    wait_for_value(lambda: read_head(leader.zk).oldest > 2, "old generations gone",
                   timeout=30)
    back = make(7212, data="away")
    late = make(7213)
    for replica in (back, late):
        wait_for_value(lambda: caught_up(leader, replica), "caught up", timeout=30)
        assert rows(replica.store) == rows(leader.store)


def test_a_single_daemons_state_becomes_the_clusters_first(make, tmp_path) -> None:
    alone = Store((tmp_path / "alone").mkdir() or tmp_path / "alone" / "state.sqlite3")
    workload(alone)                                     # written with no journal
    alone.close()
    first = make(7221, data="alone")
    wait_for_value(lambda: first.leadership.leading, "leading", timeout=20)
    joined = make(7222)
    wait_for_value(lambda: caught_up(first, joined), "caught up", timeout=20)
    assert joined.store.topology("b-2-1") is not None
    first.store.set_action(Action("b-2-1", "remove", 3.0, {}))
    wait_for_value(lambda: caught_up(first, joined), "caught up again", timeout=20)
    assert rows(joined.store) == rows(first.store)


def test_state_of_its_own_or_of_another_cluster_is_refused(make, zookeeper, tmp_path
                                                           ) -> None:
    leader = make(7231)
    wait_for_value(lambda: leader.leadership.leading, "leading", timeout=20)
    leader.store.next_counter()
    own = Store((tmp_path / "own").mkdir() or tmp_path / "own" / "state.sqlite3")
    own.insert_topology(record("x-1-1", "x"))
    own.close()
    with pytest.raises(CoordinationError, match="holds state of its own"):
        Node(zookeeper, leader.zk.root, tmp_path, 7232, data="own").start()
    # A copy made in another cluster (another root) is not this one's.
    elsewhere = Node(zookeeper, zookeeper.root(), tmp_path, 7233, data="other").start()
    wait_for_value(lambda: elsewhere.leadership.leading, "leading elsewhere", timeout=20)
    elsewhere.store.next_counter()
    elsewhere.stop()
    with pytest.raises(CoordinationError, match="another cluster"):
        Node(zookeeper, leader.zk.root, tmp_path, 7234, data="other").start()
