"""Two real daemons on a real ZooKeeper and one shared directory: a client given both
as seeds submits through whichever it reaches first and lands on the leader; the
follower answers reads from its replica and refuses state changes naming the leader;
getLeader and ClusterSummary.nimbuses tell the truth on both; when the leader stops,
the follower takes over, starts the topology, and acts on it."""

from __future__ import annotations

import dataclasses
import threading
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from thriftpy2.thrift import TApplicationException

from nimbus_thrift.client import NimbusClient
from nimbus_thrift.client.blobs import download_blob, parse_acl, upload_blob
from nimbus_thrift.client.errors import ServerError
from nimbus_thrift.nimbus import NimbusDaemon
from nimbus_thrift.nimbus.config import load_config
from support.nimbus import FakeLauncher, make_zip, port_of, wordcount
from support.polling import wait_for_value


class Pair:
    def __init__(self, zookeeper: Any, tmp: Path) -> None:
        self.root = zookeeper.root()
        self.zookeeper = zookeeper
        self.tmp = tmp
        self.launchers: dict[str, FakeLauncher] = {}

    def daemon(self, name: str) -> NimbusDaemon:
        config = load_config(env={}, flags={
            "ui_port": 0, "port": 0, "unix_socket": "", "data_dir": str(self.tmp / name),
            "shared_dir": str(self.tmp / "shared"),
            "zookeeper_servers": self.zookeeper.address, "zookeeper_root": self.root,
            "zookeeper_session_timeout": 2.0})
        self.launchers[name] = FakeLauncher()
        d = NimbusDaemon(config, launcher=self.launchers[name])
        d.start()
        return d


@pytest.fixture
def pair(zookeeper: Any, tmp_path: Path) -> Iterator[tuple[Pair, list[NimbusDaemon]]]:
    p = Pair(zookeeper, tmp_path)
    running: list[NimbusDaemon] = []
    yield p, running
    for d in running:
        d.stop(grace=2.0)


def leader_and_follower(p: Pair, running: list[NimbusDaemon]
                        ) -> tuple[NimbusDaemon, NimbusDaemon]:
    """Daemon a started first (it leads), then b (it follows)."""
    a = p.daemon("a")
    running.append(a)
    wait_for_value(lambda: leading(a), "a leading", timeout=30)
    b = p.daemon("b")
    running.append(b)
    return a, b


def leading(d: NimbusDaemon) -> bool:
    return d.ha is not None and d.ha.leading()


def submit(client: NimbusClient, name: str) -> None:
    def run() -> None:
        location = client.beginFileUpload()
        client.uploadChunk(location, make_zip())
        client.finishFileUpload(location)
        client.submitTopology(name, location, json.dumps({}), wordcount())
    client.on_leader(run, what="the submit")


def names(port: int) -> list[str]:
    with NimbusClient("127.0.0.1", port, timeout=10) as client:
        return [t.name for t in client.getClusterInfo().topologies]


def test_a_follower_reads_refuses_and_takes_over(pair) -> None:
    p, running = pair
    a, b = leader_and_follower(p, running)
    pa, pb = port_of(a), port_of(b)

    # Seeds in the follower's order first: the submit still lands on the leader.
    with NimbusClient(hosts=[f"127.0.0.1:{pb}", f"127.0.0.1:{pa}"], timeout=10) as client:
        submit(client, "wc")
    wait_for_value(lambda: "wc" in names(pb), "the follower lists it", timeout=20)
    assert names(pa) == ["wc"]
    assert ("launch" in p.launchers["a"].methods(_id(pa, "wc"))
            and p.launchers["b"].calls == [])

    with NimbusClient("127.0.0.1", pb, timeout=10) as follower:
        assert follower.getLeader().port == pa and follower.getLeader().isLeader
        # The follower's view of the nimbuses is its watcher's (a moment behind).
        wait_for_value(lambda: sorted((n.port, n.isLeader) for n in
                                      follower.getClusterInfo().nimbuses)
                       == sorted([(pa, True), (pb, False)]), "both nimbuses listed",
                       timeout=20)
        assert follower.getTopologyConf(_id(pa, "wc"))    # reads from its replica
        with pytest.raises(ServerError) as refused:
            follower.deactivate("wc")
        assert refused.value.code == TApplicationException.INTERNAL_ERROR
        assert refused.value.server_message == \
            f"this nimbus is not the leader; the leader is 127.0.0.1:{pa}"
    assert names(pa) == ["wc"] and _status(pa, "wc") == "ACTIVE"

    # A blob made on the leader is read on the follower, from the shared directory.
    with NimbusClient("127.0.0.1", pa, timeout=10) as client:
        upload_blob(client, "words.txt", io.BytesIO(b"the quick fox"), create=True,
                    acl=parse_acl("o::rwa"))
    with NimbusClient("127.0.0.1", pb, timeout=10) as follower:
        out = io.BytesIO()
        wait_for_value(lambda: follower.call("isRemoteBlobExists", "words.txt"),
                       "the follower knows the blob", timeout=20)
        assert download_blob(follower, "words.txt", out) == 13
        assert out.getvalue() == b"the quick fox"

    # The leader stops: it stops what it ran, and the follower leads and starts it.
    tid = _id(pa, "wc")
    running.remove(a)
    a.stop(grace=2.0)
    assert "stop" in p.launchers["a"].methods(tid)
    wait_for_value(lambda: leading(b), "b leading", timeout=30)
    wait_for_value(lambda: "launch" in p.launchers["b"].methods(tid), "b starts it",
                   timeout=20)
    with NimbusClient("127.0.0.1", pb, timeout=10) as client:
        assert client.getLeader().port == pb
        client.deactivate("wc")
    assert _status(pb, "wc") == "INACTIVE"


def _id(port: int, name: str) -> str:
    with NimbusClient("127.0.0.1", port, timeout=10) as client:
        return next(t.id for t in client.getClusterInfo().topologies if t.name == name)


def _status(port: int, name: str) -> str:
    with NimbusClient("127.0.0.1", port, timeout=10) as client:
        return str(next(t.status for t in client.getClusterInfo().topologies
                        if t.name == name))


def test_a_new_leader_neither_starts_nor_removes_code_it_cannot_check(pair) -> None:
    p, running = pair
    a, b = leader_and_follower(p, running)
    pa, pb = port_of(a), port_of(b)
    with NimbusClient("127.0.0.1", pa, timeout=10) as client:
        submit(client, "wc")
    wait_for_value(lambda: "wc" in names(pb), "the follower lists it", timeout=20)
    tid = _id(pa, "wc")
    # The shared copy of its code is damaged (a stale mount, a bad disk).
    assert b.store is not None and b.handler is not None
    rec = b.store.topology(tid)
    assert rec is not None
    b.handler.transfers.code_path(rec.code_upload).write_bytes(b"not the code submitted")
    running.remove(a)
    a.stop(grace=2.0)
    wait_for_value(lambda: leading(b), "b leading", timeout=30)
    errors = wait_for_value(
        lambda: [e for e in b.store.errors(tid) if "not started on this nimbus" in e[1]],
        "the refusal on record", timeout=20)
    assert "has sha256" in errors[0][1]
    assert "launch" not in p.launchers["b"].methods(tid)
    assert names(pb) == ["wc"]                  # kept, for an operator to mend


def test_a_daemon_that_cannot_reach_zookeeper_says_so_and_keeps_nothing(tmp_path) -> None:
    from nimbus_thrift.nimbus import DaemonError
    from support.rawthrift import refused_port

    with refused_port() as port:
        config = load_config(env={}, flags={
            "ui_port": 0, "port": 0, "unix_socket": "", "data_dir": str(tmp_path / "a"),
            "shared_dir": str(tmp_path / "shared"),
            "zookeeper_servers": f"127.0.0.1:{port}", "zookeeper_session_timeout": 1.0})
        d = NimbusDaemon(config, launcher=FakeLauncher())
        with pytest.raises(DaemonError, match=rf"cannot reach ZooKeeper at 127.0.0.1:{port} "
                                              r"within 2 s \(zookeeper_servers\)"):
            d.start()
    assert d.server is None and d.store is None and d.ha is None
    # The data directory is free again: a second start gets as far as ZooKeeper.
    with refused_port() as port:
        again = NimbusDaemon(dataclasses.replace(config,
                                                 zookeeper_servers=(f"127.0.0.1:{port}",)),
                             launcher=FakeLauncher())
        with pytest.raises(DaemonError, match="cannot reach ZooKeeper"):
            again.start()


def test_a_returning_daemon_follows_and_catches_up(pair) -> None:
    p, running = pair
    a, b = leader_and_follower(p, running)
    with NimbusClient("127.0.0.1", port_of(a), timeout=10) as client:
        submit(client, "wc")
    running.remove(a)
    a.stop(grace=2.0)
    wait_for_value(lambda: leading(b), "b leading", timeout=30)
    with NimbusClient("127.0.0.1", port_of(b), timeout=10) as client:
        client.deactivate("wc")
        submit(client, "later")
    # The former leader comes back on its old data directory: it follows, and its copy
    # gets what was done while it was away.
    back = p.daemon("a")
    running.append(back)
    wait_for_value(lambda: sorted(names(port_of(back))) == ["later", "wc"],
                   "the returning daemon caught up", timeout=20)
    assert _status(port_of(back), "wc") == "INACTIVE"
    assert not leading(back) and leading(b)
    with NimbusClient("127.0.0.1", port_of(back), timeout=10) as client:
        assert client.getLeader().port == port_of(b)


def test_a_daemon_whose_zookeeper_is_gone_still_stops(tmp_path) -> None:
    """Its own ZooKeeper, stopped under it: the daemon's stop must not wait for a
    session that will never come back (it once hung in a ZooKeeper call forever)."""
    from support.zookeeper import ZooKeeperServer

    own = ZooKeeperServer().start()
    p = Pair(own, tmp_path)
    d = p.daemon("a")
    try:
        wait_for_value(lambda: leading(d), "leading", timeout=30)
    finally:
        own.stop()
    stopper = threading.Thread(target=d.stop, kwargs={"grace": 1.0})
    stopper.start()
    stopper.join(60)
    assert not stopper.is_alive(), "the daemon did not stop without its ZooKeeper"
    assert d.server is None and d.store is None
