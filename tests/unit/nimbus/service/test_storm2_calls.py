"""Storm 2.x's summaries, lookups, history, owners and unsupported calls
(nimbus/storm2_calls.py, and what it shares with nimbus/queries.py), against the fake
launcher and a fake clock (the fakes tier)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version
from thriftpy2.thrift import TApplicationException

import nimbus_thrift
from support.nimbus import FakeClock, FakeLauncher, N, make_zip, request_as, upload, wordcount
from nimbus_thrift.nimbus.config import load_config
from nimbus_thrift.nimbus.service.handler import NimbusHandler
from nimbus_thrift.nimbus.service.infos import nimbus_version
from nimbus_thrift.nimbus.state.store import Store

MB = 1024 * 1024


class Env:
    def __init__(self, data_dir: Path, **config: Any):
        data_dir.mkdir(parents=True, exist_ok=True)
        self.clock = FakeClock()
        self.launcher = FakeLauncher()
        self.config = load_config(env={}, flags={"data_dir": str(data_dir),
                                                 "launcher": "none", **config})
        self.store = Store(data_dir / "nimbus.sqlite3")
        self.handler = NimbusHandler(N, self.config, self.store, self.launcher,
                                     clock=self.clock)
        self.handler.recover()

    def submit(self, name: str, conf: dict[str, Any] | None = None) -> str:
        location = upload(self.handler, make_zip())
        self.handler.submitTopology(name, location, json.dumps(conf or {}), wordcount())
        assert self.handler.background.wait_idle(10)
        return next(t.id for t in self.handler.getClusterInfo().topologies
                    if t.name == name)

    def close(self) -> None:
        self.handler.close()
        self.store.close()


@pytest.fixture
def env(tmp_path: Path) -> Any:
    e = Env(tmp_path / "data")
    yield e
    e.close()


def not_supported(match: str) -> Any:
    return pytest.raises(TApplicationException, match=match)


# --- summaries and lookups ----------------------------------------------------------------

def test_topology_summaries_are_the_cluster_summarys(env: Env) -> None:
    assert env.handler.getTopologySummaries() == []
    a, b = env.submit("a"), env.submit("b")
    env.clock.advance(7)
    summaries = env.handler.getTopologySummaries()
    assert summaries == env.handler.getClusterInfo().topologies
    assert [(t.id, t.name, t.num_executors, t.num_tasks, t.uptime_secs, t.status,
             t.replication_count) for t in summaries] == [
        (a, "a", 6, 6, 7, "ACTIVE", 1), (b, "b", 6, 6, 7, "ACTIVE", 1)]


def test_one_summary_by_name_and_by_id(env: Env) -> None:
    tid = env.submit("wc")
    env.submit("other")
    by_name = env.handler.getTopologySummaryByName("wc")
    assert by_name.id == tid and by_name.name == "wc"
    assert env.handler.getTopologySummary(tid) == by_name
    with pytest.raises(N.NotAliveException, match="no topology named 'ghost'"):
        env.handler.getTopologySummaryByName("ghost")
    with pytest.raises(N.NotAliveException, match="no topology with id 'wc'"):
        env.handler.getTopologySummary("wc")         # a name is not an id


def test_topology_info_by_name_is_by_id(env: Env) -> None:
    tid = env.submit("wc")
    assert env.handler.getTopologyInfoByName("wc") == env.handler.getTopologyInfo(tid)
    with pytest.raises(N.NotAliveException, match="no topology named 'nope'"):
        env.handler.getTopologyInfoByName("nope")


def _with_errors(env: Env) -> str:
    tid = env.submit("wc")
    for component, message, when in [("count", "first", 100), ("count", "latest", 300),
                                     ("count", "middle", 200), ("split", "only", 50)]:
        env.store.add_error(tid, component, message, when)
    return tid


def _errors(info: Any) -> dict[str, list[tuple[str, int]]]:
    return {c: [(e.error, e.error_time_secs) for e in found]
            for c, found in info.errors.items()}


ALL_ERRORS = {"count": [("first", 100), ("latest", 300), ("middle", 200)],
              "split": [("only", 50)]}


@pytest.mark.parametrize("choice, expected", [
    (None, ALL_ERRORS),
    ("ALL", ALL_ERRORS),
    ("NONE", {"count": [], "split": []}),
    ("ONE", {"count": [("latest", 300)], "split": [("only", 50)]}),
])
def test_info_with_opts_chooses_the_errors(env: Env, choice: str | None,
                                           expected: dict[str, Any]) -> None:
    tid = _with_errors(env)
    value = None if choice is None else getattr(N.NumErrorsChoice, choice)
    options = N.GetInfoOptions(num_err_choice=value)
    by_id = env.handler.getTopologyInfoWithOpts(tid, options)
    assert _errors(by_id) == expected
    assert env.handler.getTopologyInfoByNameWithOpts("wc", options) == by_id
    # Everything else is getTopologyInfo's.
    plain = env.handler.getTopologyInfo(tid)
    assert _errors(plain) == ALL_ERRORS
    plain.errors = by_id.errors
    assert plain == by_id


def test_info_with_no_options_is_all(env: Env) -> None:
    tid = _with_errors(env)
    assert _errors(env.handler.getTopologyInfoWithOpts(tid, None)) == ALL_ERRORS


def test_of_two_errors_in_the_same_second_one_is_the_last_recorded(env: Env) -> None:
    tid = env.submit("wc")
    env.store.add_error(tid, "count", "earlier", 100)
    env.store.add_error(tid, "count", "later", 100)
    info = env.handler.getTopologyInfoWithOpts(
        tid, N.GetInfoOptions(num_err_choice=N.NumErrorsChoice.ONE))
    assert _errors(info) == {"count": [("later", 100)]}


def test_an_unknown_error_choice_is_a_sentence(env: Env) -> None:
    tid = env.submit("wc")
    with pytest.raises(TApplicationException) as info:
        env.handler.getTopologyInfoWithOpts(tid, N.GetInfoOptions(num_err_choice=7))
    assert info.value.type == TApplicationException.UNKNOWN
    assert info.value.message == ("GetInfoOptions.num_err_choice 7 is not ALL (0), "
                                  "NONE (1) or ONE (2)")


def test_info_with_opts_of_unknown_topologies(env: Env) -> None:
    options = N.GetInfoOptions(num_err_choice=N.NumErrorsChoice.ALL)
    with pytest.raises(N.NotAliveException, match="no topology with id 'x-1-1'"):
        env.handler.getTopologyInfoWithOpts("x-1-1", options)
    with pytest.raises(N.NotAliveException, match="no topology named 'x'"):
        env.handler.getTopologyInfoByNameWithOpts("x", options)


def test_info_carries_the_submitted_storm_version(env: Env) -> None:
    topology = wordcount()
    topology.storm_version = "2.8.8"
    location = upload(env.handler, make_zip())
    env.handler.submitTopology("v", location, "{}", topology)
    assert env.handler.getTopologyInfoByName("v").storm_version == "2.8.8"
    tid = env.submit("plain")
    info = env.handler.getTopologyInfo(tid)
    assert info.storm_version is None and info.replication_count == 1


# --- the leader ---------------------------------------------------------------------------

def test_leader_version_reads_as_a_storm_version_past_1_1(env: Env) -> None:
    leader = env.handler.getLeader()
    assert leader.version == nimbus_version() == \
        f"2.8.0+nimbus.thrift.{nimbus_thrift.__version__}"
    # streamparse's check: pkg_resources.parse_version (packaging's Version) >= 1.1.0,
    # then isTopologyNameAllowed.
    parsed = Version(leader.version)
    assert parsed >= Version("1.1.0") and parsed.local == \
        "nimbus.thrift." + nimbus_thrift.__version__
    # Storm's own readers take "major.minor" from the start.
    assert leader.version.split(".")[:2] == ["2", "8"]
    assert leader.isLeader is True and leader.tlsPort is None


def test_cluster_summary_lists_this_nimbus(env: Env) -> None:
    env.clock.advance(12)
    nimbuses = env.handler.getClusterInfo().nimbuses
    assert nimbuses == [env.handler.getLeader()]
    assert (nimbuses[0].uptime_secs, nimbuses[0].isLeader) == (12, True)


def test_tls_port_is_the_port_when_tls_is_on(tmp_path: Path) -> None:
    cert = tmp_path / "cert.pem"
    key = tmp_path / "key.pem"
    cert.write_text("x")
    key.write_text("x")
    e = Env(tmp_path / "data", tls_cert_file=str(cert), tls_key_file=str(key))
    try:
        e.handler.address = ("nimbus.example", 6627)
        leader = e.handler.getLeader()
        assert (leader.port, leader.tlsPort) == (6627, 6627)
    finally:
        e.close()


# --- history and owners -------------------------------------------------------------------

def test_history_lists_what_the_user_may_read(tmp_path: Path) -> None:
    e = Env(tmp_path / "data", admins=["ops"], users=["alice", "bob", "carol", "mallory"])
    try:
        with request_as("alice"):
            mine = e.submit("mine", {"topology.readonly.users": ["carol"]})
        with request_as("bob"):
            bobs = e.submit("bobs")
        history = e.handler.getTopologyHistory
        assert history("alice").topo_ids == [mine]
        assert history("carol").topo_ids == [mine]
        assert history("bob").topo_ids == [bobs]
        assert history("mallory").topo_ids == []
        assert history("ops").topo_ids == sorted([mine, bobs])
        assert history("").topo_ids == sorted([mine, bobs])
    finally:
        e.close()


def test_owner_resource_summaries(tmp_path: Path) -> None:
    e = Env(tmp_path / "data", users=["alice", "bob"])
    try:
        with request_as("alice"):
            e.submit("a1", {"topology.workers": 2, "fake.memory.bytes": 512 * MB})
            e.submit("a2", {"fake.memory.bytes": 256 * MB})
        with request_as("bob"):
            e.submit("b1")
        owners = {s.owner: s for s in e.handler.getOwnerResourceSummaries("")}
        assert sorted(owners) == ["alice", "bob"]
        alice = owners["alice"]
        assert (alice.total_topologies, alice.total_executors, alice.total_tasks,
                alice.total_workers, alice.requested_total_memory) == (2, 12, 12, 3, 768.0)
        assert (owners["bob"].total_topologies, owners["bob"].requested_total_memory) == \
            (1, 0.0)
        # Figures with no counterpart here stay unset.
        assert alice.memory_guarantee is None and alice.assigned_on_heap_memory is None
        assert e.handler.getOwnerResourceSummaries("bob") == [owners["bob"]]
        nobody = e.handler.getOwnerResourceSummaries("nobody")
        assert [(s.owner, s.total_topologies, s.total_executors) for s in nobody] == \
            [("nobody", 0, 0)]
    finally:
        e.close()


# --- what means nothing on Spark ----------------------------------------------------------

def _profile_request() -> Any:
    return N.ProfileRequest(nodeInfo=N.NodeInfo(node="worker-1", port={6700}),
                            action=N.ProfileAction.JSTACK_DUMP)


def test_profiling_is_not_supported(env: Env) -> None:
    tid = env.submit("wc")
    with pytest.raises(TApplicationException) as info:
        env.handler.setWorkerProfiler(tid, _profile_request())
    assert info.value.type == TApplicationException.UNKNOWN
    assert info.value.message.startswith("setWorkerProfiler is not supported on Spark: ")
    assert env.handler.getComponentPendingProfileActions(
        tid, "count", N.ProfileAction.JSTACK_DUMP) == []


def test_profiling_an_unknown_topology_says_so_without_an_undeclared_exception(
        env: Env) -> None:
    # setWorkerProfiler declares no exceptions: NotAliveException would be an
    # undeclared one (an INTERNAL_ERROR and a traceback in the log).
    for call in (lambda: env.handler.setWorkerProfiler("x-1-1", _profile_request()),
                 lambda: env.handler.getComponentPendingProfileActions(
                     "x-1-1", "count", N.ProfileAction.JMAP_DUMP)):
        with pytest.raises(TApplicationException) as info:
            call()
        assert (info.value.type, info.value.message) == (
            TApplicationException.UNKNOWN, "no topology with id 'x-1-1'")


def test_new_credentials_are_not_supported(env: Env) -> None:
    env.submit("wc")
    creds = N.Credentials(creds={"token": "t"})
    with not_supported("^uploadNewCredentials is not supported on Spark: "):
        env.handler.uploadNewCredentials("wc", creds)
    with pytest.raises(N.NotAliveException, match="no topology named 'ghost'"):
        env.handler.uploadNewCredentials("ghost", creds)     # declared: as itself


@pytest.mark.parametrize("method, args", [
    ("getSupervisorAssignments", ("node-1",)),
    ("sendSupervisorWorkerHeartbeats", (N.SupervisorWorkerHeartbeats(
        supervisor_id="s", worker_heartbeats=[]),)),
    ("sendSupervisorWorkerHeartbeat", (N.SupervisorWorkerHeartbeat(
        storm_id="wc-1-1", executors=[], time_secs=1),)),
    ("processWorkerMetrics", (N.WorkerMetrics(
        topologyId="wc-1-1", port=6700, hostname="h",
        metricList=N.WorkerMetricList(metrics=[])),)),
])
def test_supervisor_calls_are_not_supported(env: Env, method: str, args: tuple) -> None:
    with not_supported(f"^{method} is not supported on Spark: it is a call of Storm's "
                       "supervisors"):
        getattr(env.handler, method)(*args)


def test_create_state_in_zookeeper_has_nothing_to_do(env: Env) -> None:
    assert env.handler.createStateInZookeeper("any-key") is None
