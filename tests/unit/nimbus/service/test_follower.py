"""Fakes tier: a handler whose Role says another nimbus leads (HA mode): every state
change is refused in the gate, before anything else, with INTERNAL_ERROR naming the
leader; reads are answered, getLeader and ClusterSummary.nimbuses from the Role."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from thriftpy2.thrift import TApplicationException

from nimbus_thrift.idl import NO_LEADER_MESSAGE, NOT_LEADER_MESSAGE
from nimbus_thrift.nimbus.config import load_config
from nimbus_thrift.nimbus.role import NimbusPeer
from nimbus_thrift.nimbus.service.access import STATE_CHANGES
from nimbus_thrift.nimbus.service.handler import NimbusHandler
from nimbus_thrift.nimbus.state.store import Store
from support.nimbus import FakeClock, FakeLauncher, N

LEADER = NimbusPeer("10.0.0.1", 6627, 1000.0, "9.9")
ME = NimbusPeer("10.0.0.2", 6627, 1500.0, "9.9")


class Follower:
    def __init__(self) -> None:
        self.elected: NimbusPeer | None = LEADER

    def leading(self) -> bool:
        return False

    def refusal(self) -> str:
        return NOT_LEADER_MESSAGE.format(leader="10.0.0.1:6627") if self.elected \
            else NO_LEADER_MESSAGE

    def leader(self) -> NimbusPeer | None:
        return self.elected

    def nimbuses(self) -> list[NimbusPeer]:
        return [LEADER, ME]


@pytest.fixture
def follower(tmp_path: Path) -> Iterator[tuple[NimbusHandler, Follower, FakeLauncher]]:
    config = load_config(env={}, flags={"data_dir": str(tmp_path), "launcher": "none"})
    store = Store(tmp_path / "nimbus.sqlite3")
    role, launcher = Follower(), FakeLauncher()
    h = NimbusHandler(N, config, store, launcher, clock=FakeClock(2000.0), role=role)
    yield h, role, launcher
    h.close()
    store.close()


def test_the_state_changes_are_methods_of_the_idl() -> None:
    assert STATE_CHANGES <= set(N.Nimbus.thrift_services)
    reads = set(N.Nimbus.thrift_services) - STATE_CHANGES
    assert {"getClusterInfo", "getLeader", "getTopologyInfo", "getTopologyConf",
            "beginFileDownload", "downloadChunk", "listBlobs", "getBlobMeta"} <= reads


CHANGES: list[tuple[str, tuple[Any, ...]]] = [
    ("submitTopology", ("wc", "/nowhere", "{}", N.StormTopology())),
    ("killTopology", ("wc",)), ("activate", ("wc",)), ("deactivate", ("wc",)),
    ("rebalance", ("wc", N.RebalanceOptions())),
    ("beginFileUpload", ()), ("uploadChunk", ("/nowhere", b"x")),
    ("finishFileUpload", ("/nowhere",)),
    ("setLogConfig", ("wc", N.LogConfig())),
    ("beginCreateBlob", ("k", N.SettableBlobMeta(acl=[]))), ("deleteBlob", ("k",)),
]


@pytest.mark.parametrize("method, args", CHANGES, ids=[m for m, _ in CHANGES])
def test_a_follower_refuses_each_state_change_naming_the_leader(follower, method, args
                                                                ) -> None:
    handler, _, launcher = follower
    with pytest.raises(TApplicationException) as refused:
        getattr(handler, method)(*args)
    assert refused.value.type == TApplicationException.INTERNAL_ERROR
    assert refused.value.message == \
        "this nimbus is not the leader; the leader is 10.0.0.1:6627"
    assert launcher.calls == [] and handler.store.topology_ids() == []
    assert list(handler.transfers.inbox.iterdir()) == []


def test_a_follower_answers_reads_and_says_who_leads(follower) -> None:
    handler, role, _ = follower
    leader = handler.getLeader()
    assert (leader.host, leader.port, leader.isLeader, leader.uptime_secs) == \
        ("10.0.0.1", 6627, True, 1000)
    nimbuses = handler.getClusterInfo().nimbuses
    assert [(n.host, n.isLeader, n.uptime_secs) for n in nimbuses] == [
        ("10.0.0.1", True, 1000), ("10.0.0.2", False, 500)]
    role.elected = None
    with pytest.raises(TApplicationException, match="no leader is elected yet"):
        handler.getLeader()
    with pytest.raises(TApplicationException, match="no leader is elected yet"):
        handler.deactivate("wc")


def test_a_due_action_met_while_not_leading_is_kept_for_later(follower) -> None:
    handler, _, launcher = follower
    from nimbus_thrift.nimbus.state.store import Action
    from support.store_rows import record
    handler.store.insert_topology(record("wc-1-1", "wc", status="KILLED"))
    handler.store.set_action(Action("wc-1-1", "remove", 1000.0, {}))
    handler.upkeep.run_action("wc-1-1")            # due, but another nimbus leads
    assert handler.store.action("wc-1-1") is not None and launcher.calls == []
    assert handler.timers._heap == [(2001.0, "wc-1-1")]     # looked at again in 1 s
