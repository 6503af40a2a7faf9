"""The Nimbus handler against a fake launcher and a fake clock (the fakes tier): Storm's
semantics for submit, kill, activate/deactivate, rebalance, queries and durable timers."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from thriftpy2.thrift import TApplicationException

from support.handler_env import HandlerEnv
from support.nimbus import N, common, make_zip, shell, upload, wordcount
from nimbus_thrift.idl import NIMBUS_COMPONENT
from nimbus_thrift.nimbus.launcher import ComponentStats


class Env(HandlerEnv):
    def submit(self, name: str = "wc", topology: Any = None, conf: dict | None = None,
               initial: int | None = None, code: bytes | None = None) -> str:
        location = upload(self.handler, code if code is not None else make_zip())
        options = None if initial is None else N.SubmitOptions(initial_status=initial)
        self.handler.submitTopologyWithOpts(
            name, location, json.dumps(conf or {}),
            topology if topology is not None else wordcount(), options)
        return self.topology_id(name)

    def topology_id(self, name: str) -> str:
        for summary in self.handler.getClusterInfo().topologies:
            if summary.name == name:
                return summary.id
        raise AssertionError(f"{name} not listed")

    def summary(self, name: str) -> Any:
        return next(t for t in self.handler.getClusterInfo().topologies if t.name == name)

    def names(self) -> list[str]:
        return [t.name for t in self.handler.getClusterInfo().topologies]

    def tick(self, seconds: float) -> None:
        """Advance the clock, fire what is due, and let the launcher calls it queued
        (they run in the background) finish."""
        self.clock.advance(seconds)
        self.handler.timers.run_due()
        assert self.handler.background.wait_idle(10)


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return Env(tmp_path / "data")


# --- submit ---------------------------------------------------------------------------

def test_submit_stores_lists_and_launches(env: Env) -> None:
    tid = env.submit(conf={"topology.workers": 3, "app.key": "v"})
    name, counter, secs = tid.rsplit("-", 2)
    assert (name, counter, secs) == ("wc", "1", str(int(env.clock.now)))
    summary = env.summary("wc")
    assert (summary.status, summary.num_workers, summary.num_executors, summary.num_tasks) == \
        ("ACTIVE", 3, 6, 6)
    assert summary.sched_status == "running"
    spec = env.launcher.specs[tid]
    assert spec.active and spec.executors == {"sentences": 1, "split": 2, "count": 3}
    assert spec.code_path.read_bytes() == make_zip()
    assert spec.work_dir.is_dir() and spec.work_dir.parent == env.data_dir / "topologies"
    conf = json.loads(env.handler.getTopologyConf(tid))
    assert conf["app.key"] == "v" and conf["storm.id"] == tid
    assert conf["topology.message.timeout.secs"] == 30        # Storm's default merged in
    assert env.handler.getUserTopology(tid) == wordcount()
    assert env.handler.getTopology(tid) == wordcount()


def test_ids_are_unique_across_restarts(env: Env) -> None:
    first = env.submit("a")
    env.restart()
    second = env.submit("b")
    assert first.split("-")[1] == "1" and second.split("-")[1] == "2"


def test_submit_inactive(env: Env) -> None:
    tid = env.submit(initial=N.TopologyInitialStatus.INACTIVE)
    assert env.summary("wc").status == "INACTIVE"
    assert not env.launcher.specs[tid].active


def test_submit_with_bad_initial_status(env: Env) -> None:
    with pytest.raises(N.InvalidTopologyException, match="initial_status 7"):
        env.submit(initial=7)


def test_name_in_use_even_when_killed(env: Env) -> None:
    env.submit()
    with pytest.raises(N.AlreadyAliveException, match="'wc' already exists .*ACTIVE"):
        env.submit()
    env.handler.killTopologyWithOpts("wc", N.KillOptions(wait_secs=60))
    with pytest.raises(N.AlreadyAliveException, match=r"KILLED, removed in 60 s"):
        env.submit()
    env.tick(60)
    env.submit()                    # removed: the name is free again
    assert env.summary("wc").status == "ACTIVE"


@pytest.mark.parametrize("name", ["", " ", "a/b", "a.b", "a:b", "a\\b"])
def test_bad_names(env: Env, name: str) -> None:
    with pytest.raises(N.InvalidTopologyException):
        env.submit(name)
    assert env.handler.isTopologyNameAllowed(name) is False


def test_is_topology_name_allowed(env: Env) -> None:
    assert env.handler.isTopologyNameAllowed("wc") is True
    env.submit()
    assert env.handler.isTopologyNameAllowed("wc") is False


def test_submit_refuses_unknown_or_unfinished_upload(env: Env) -> None:
    with pytest.raises(N.InvalidTopologyException, match="unknown, unfinished or expired"):
        env.handler.submitTopology("wc", "/etc/passwd", "{}", wordcount())
    location = env.handler.beginFileUpload()
    env.handler.uploadChunk(location, make_zip())
    with pytest.raises(N.InvalidTopologyException, match="unknown, unfinished"):
        env.handler.submitTopology("wc", location, "{}", wordcount())
    assert env.names() == []


def test_submit_refuses_code_without_the_component_class(env: Env) -> None:
    code = make_zip({"wordcount/__init__.py": "",
                     "wordcount/components.py": "class SentenceSpout: pass\n"})
    with pytest.raises(N.InvalidTopologyException,
                       match=r"bolt 'count'.*no top-level 'CountBolt'"):
        env.submit(code=code)


def test_submit_refuses_non_zip_code(env: Env) -> None:
    with pytest.raises(N.InvalidTopologyException, match="not a zip"):
        env.submit(code=b"PK but not really")


def test_submit_refuses_bad_json_conf(env: Env) -> None:
    location = upload(env.handler, make_zip())
    with pytest.raises(N.InvalidTopologyException, match="not valid JSON"):
        env.handler.submitTopology("wc", location, "{nope", wordcount())
    with pytest.raises(N.InvalidTopologyException, match="topology.workers must be"):
        env.handler.submitTopology("wc", location, '{"topology.workers": 0}', wordcount())


def test_structural_error_names_the_component(env: Env) -> None:
    topo = wordcount()
    topo.bolts["count"].common = common({("splitt", "default"): N.Grouping(fields=["word"])})
    with pytest.raises(N.InvalidTopologyException,
                       match="bolt 'count' subscribes to unknown component 'splitt'"):
        env.submit(topology=topo)


def test_java_component_refused(env: Env) -> None:
    topo = wordcount()
    topo.bolts["split"].bolt_object = N.ComponentObject(serialized_java=b"\xac\xed")
    with pytest.raises(N.InvalidTopologyException, match="bolt 'split' is a Java component"):
        env.submit(topology=topo)


# --- kill -----------------------------------------------------------------------------

def test_kill_waits_then_removes(env: Env) -> None:
    tid = env.submit()
    env.handler.killTopologyWithOpts("wc", N.KillOptions(wait_secs=10))
    assert env.summary("wc").status == "KILLED"
    assert env.launcher.methods(tid) == ["launch", "pause"]     # spouts stop while draining
    env.tick(9)
    assert env.names() == ["wc"]
    env.tick(1)
    assert env.names() == []
    assert env.launcher.methods(tid)[-1] == "stop"
    assert not (env.data_dir / "topologies" / tid).exists()
    with pytest.raises(N.NotAliveException):
        env.handler.getTopologyInfo(tid)


def test_kill_default_wait_is_message_timeout(env: Env) -> None:
    env.submit(conf={"topology.message.timeout.secs": 5})
    env.handler.killTopology("wc")
    env.tick(4)
    assert env.names() == ["wc"]
    env.tick(1)
    assert env.names() == []


def test_second_kill_rearms_the_wait(env: Env) -> None:
    tid = env.submit()
    env.handler.killTopologyWithOpts("wc", N.KillOptions(wait_secs=10))
    env.tick(8)
    env.handler.killTopologyWithOpts("wc", N.KillOptions(wait_secs=10))
    env.tick(5)                 # the first wait is over: nothing happens
    assert env.names() == ["wc"]
    assert env.launcher.methods(tid).count("pause") == 1
    env.tick(5)
    assert env.names() == []


def test_kill_unknown(env: Env) -> None:
    with pytest.raises(N.NotAliveException, match="no topology named 'ghost'"):
        env.handler.killTopology("ghost")


def test_kill_wait_survives_restart(env: Env) -> None:
    env.submit()
    env.handler.killTopologyWithOpts("wc", N.KillOptions(wait_secs=100))
    env.clock.advance(40)
    env.restart()
    assert env.summary("wc").status == "KILLED"
    env.tick(59)
    assert env.names() == ["wc"]
    env.tick(1)
    assert env.names() == []


def test_overdue_kill_fires_at_restart(env: Env) -> None:
    env.submit()
    env.handler.killTopologyWithOpts("wc", N.KillOptions(wait_secs=5))
    env.clock.advance(500)      # the daemon was down past the deadline
    env.restart()
    env.tick(0)                 # fires what is due and waits for its launcher call
    assert env.names() == []


def test_failed_stop_keeps_the_topology_and_retries(env: Env) -> None:
    tid = env.submit()
    env.launcher.fail.add("stop")
    env.handler.killTopologyWithOpts("wc", N.KillOptions(wait_secs=0))
    env.tick(0)
    assert env.summary("wc").status == "KILLED"       # not forgotten while it may still run
    errors = env.handler.getTopologyInfo(tid).errors[NIMBUS_COMPONENT]
    assert "launcher stop failed: RuntimeError: stop exploded" in errors[-1].error
    env.launcher.fail.clear()
    env.tick(30)
    assert env.names() == []


# --- activate / deactivate ------------------------------------------------------------

def test_deactivate_activate(env: Env) -> None:
    tid = env.submit()
    env.handler.deactivate("wc")
    assert env.summary("wc").status == "INACTIVE"
    env.handler.deactivate("wc")                     # idempotent: no second pause
    env.handler.activate("wc")
    assert env.summary("wc").status == "ACTIVE"
    assert env.launcher.methods(tid) == ["launch", "pause", "resume"]


@pytest.mark.parametrize("call", ["activate", "deactivate"])
def test_toggle_refused_when_killed(env: Env, call: str) -> None:
    env.submit()
    env.handler.killTopologyWithOpts("wc", N.KillOptions(wait_secs=30))
    with pytest.raises(TApplicationException) as info:
        getattr(env.handler, call)("wc")
    assert info.value.type == TApplicationException.INTERNAL_ERROR
    assert info.value.message == f"topology 'wc' is KILLED: cannot {call} (it is being removed)"


def test_toggle_unknown(env: Env) -> None:
    with pytest.raises(N.NotAliveException):
        env.handler.activate("ghost")


# --- rebalance ------------------------------------------------------------------------

def test_rebalance_waits_applies_and_restores_status(env: Env) -> None:
    tid = env.submit(conf={"topology.workers": 2},
                     topology=_with_tasks(wordcount(), "count", 6))
    env.handler.deactivate("wc")
    env.handler.rebalance("wc", N.RebalanceOptions(wait_secs=20, num_workers=4,
                                                   num_executors={"count": 6}))
    assert env.summary("wc").status == "REBALANCING"
    env.tick(19)
    assert env.summary("wc").num_executors == 6
    env.tick(1)
    summary = env.summary("wc")
    assert (summary.status, summary.num_workers, summary.num_executors) == ("INACTIVE", 4, 9)
    spec = env.launcher.specs[tid]
    assert spec.executors["count"] == 6 and spec.num_workers == 4 and not spec.active
    assert env.launcher.methods(tid)[-1] == "rebalance"


def test_rebalance_survives_restart(env: Env) -> None:
    env.submit()
    env.handler.rebalance("wc", N.RebalanceOptions(wait_secs=50, num_workers=2))
    env.clock.advance(10)
    env.restart()
    assert env.summary("wc").status == "REBALANCING"
    env.tick(40)
    summary = env.summary("wc")
    assert (summary.status, summary.num_workers) == ("ACTIVE", 2)


def test_kill_during_rebalance_wins(env: Env) -> None:
    env.submit()
    env.handler.rebalance("wc", N.RebalanceOptions(wait_secs=50))
    env.handler.killTopologyWithOpts("wc", N.KillOptions(wait_secs=5))
    env.tick(5)
    assert env.names() == []


def test_rebalance_refused_while_rebalancing(env: Env) -> None:
    env.submit()
    env.handler.rebalance("wc", N.RebalanceOptions(wait_secs=50))
    with pytest.raises(TApplicationException, match="is REBALANCING: cannot rebalance"):
        env.handler.rebalance("wc", N.RebalanceOptions(wait_secs=50))


@pytest.mark.parametrize("options, message", [
    (N.RebalanceOptions(num_executors={"nope": 2}), "has no component 'nope'"),
    (N.RebalanceOptions(num_executors={"count": 0}), "'count' cannot run on 0 executors"),
    (N.RebalanceOptions(num_executors={"count": 4}), "'count' has 3 tasks"),
    (N.RebalanceOptions(num_workers=0), "num_workers must be at least 1"),
    (N.RebalanceOptions(wait_secs=-1), "wait_secs must not be negative"),
])
def test_rebalance_invalid(env: Env, options: Any, message: str) -> None:
    env.submit()
    with pytest.raises(N.InvalidTopologyException, match=message):
        env.handler.rebalance("wc", options)
    assert env.summary("wc").status == "ACTIVE"


def test_rebalance_unknown(env: Env) -> None:
    with pytest.raises(N.NotAliveException):
        env.handler.rebalance("ghost", N.RebalanceOptions())


# --- queries --------------------------------------------------------------------------

def test_cluster_info(env: Env) -> None:
    env.handler.start(("127.0.0.1", 6627))
    try:
        env.clock.advance(7)
        info = env.handler.getClusterInfo()
    finally:
        env.handler.close()
    assert info.nimbus_uptime_secs == 7
    (nimbus,) = info.nimbuses
    assert (nimbus.host, nimbus.port, nimbus.isLeader, nimbus.uptime_secs) == \
        ("127.0.0.1", 6627, True, 7)
    (worker,) = info.supervisors
    assert (worker.supervisor_id, worker.num_workers, worker.version) == ("worker-1", 4, "fake-1")
    assert info.topologies == []


def test_topology_info_executors_and_stats(env: Env) -> None:
    tid = env.submit()
    env.launcher.stats[tid] = {"split": ComponentStats(emitted=101, processed=50, rate=2.0,
                                                       latency_ms=3.5)}
    env.clock.advance(12)
    info = env.handler.getTopologyInfo(tid)
    assert (info.name, info.status, info.uptime_secs, info.sched_status) == \
        ("wc", "ACTIVE", 12, "running")
    ranges = [(e.component_id, e.executor_info.task_start, e.executor_info.task_end)
              for e in info.executors]
    assert ranges == [("count", 1, 1), ("count", 2, 2), ("count", 3, 3),
                      ("sentences", 4, 4), ("split", 5, 5), ("split", 6, 6)]
    split = [e for e in info.executors if e.component_id == "split"]
    emitted = [e.stats.emitted[":all-time"]["default"] for e in split]
    assert sum(emitted) == 101 and sorted(emitted) == [50, 51]
    executed = [sum(e.stats.specific.bolt.executed[":all-time"].values()) for e in split]
    assert sum(executed) == 50
    assert all(e.stats is None for e in info.executors if e.component_id != "split")


def test_topology_info_of_an_unscheduled_topology_has_no_executors(env: Env) -> None:
    tid = env.submit()
    env.launcher.state[tid] = "unscheduled"
    info = env.handler.getTopologyInfo(tid)
    assert info.executors == [] and info.sched_status == "unscheduled"


def test_launcher_failure_is_recorded_not_raised(env: Env) -> None:
    env.launcher.fail.add("launch")
    tid = env.submit()              # acknowledged: the state is committed
    errors = env.handler.getTopologyInfo(tid).errors
    assert "launcher launch failed" in errors[NIMBUS_COMPONENT][0].error
    assert errors[NIMBUS_COMPONENT][0].error_time_secs == int(env.clock.now)


def test_queries_survive_a_failing_launcher_status(env: Env) -> None:
    tid = env.submit()
    env.launcher.fail.add("status")
    assert env.handler.getTopologyInfo(tid).sched_status == "unknown"
    assert env.summary("wc").sched_status == "unknown"
    # The reason is in the detail the web page shows, not in Storm's short column.
    assert env.handler.run_status(tid).detail.startswith("unknown: the launcher failed")


def test_queries_by_unknown_id(env: Env) -> None:
    for call in ("getTopologyInfo", "getTopologyConf", "getTopology", "getUserTopology"):
        with pytest.raises(N.NotAliveException, match="no topology with id 'wc'"):
            getattr(env.handler, call)("wc")


def test_nimbus_conf(env: Env) -> None:
    env.handler.start(("127.0.0.1", 6627))
    env.handler.close()
    conf = json.loads(env.handler.getNimbusConf())
    assert conf["nimbus.thrift.port"] == 6627
    assert conf["nimbus.seeds"] == ["127.0.0.1"]
    # No paths and no principals (issue 24): not even Storm's storm.local.dir.
    assert "storm.local.dir" not in conf and str(env.data_dir) not in json.dumps(conf)
    assert conf["nimbus.thrift.max_buffer_size"] == 1_048_576
    assert conf["nimbus-thrift.launcher"] == "none"


def test_restart_relaunches_with_the_right_activity(env: Env) -> None:
    a = env.submit("a")
    b = env.submit("b")
    env.handler.deactivate("b")
    env.restart()
    assert env.launcher.specs[a].active is True
    assert env.launcher.specs[b].active is False


# --- downloads through the handler ----------------------------------------------------

def test_download_by_topology_id_and_location(env: Env) -> None:
    code = make_zip()
    location = upload(env.handler, code)
    env.handler.submitTopology("wc", location, "{}", wordcount())
    tid = env.topology_id("wc")
    for file in (tid, location):
        session = env.handler.beginFileDownload(file)
        data = b""
        while chunk := env.handler.downloadChunk(session):
            data += chunk
        assert data == code


@pytest.mark.parametrize("file", ["../nimbus.sqlite3", "/etc/passwd", "nimbus.sqlite3", ""])
def test_download_refuses_anything_else(env: Env, file: str) -> None:
    with pytest.raises(TApplicationException, match="neither a topology id nor"):
        env.handler.beginFileDownload(file)


def _with_tasks(topology: Any, component: str, tasks: int) -> Any:
    topology.bolts[component].common.json_conf = json.dumps({"topology.tasks": tasks})
    return topology


def test_shell_helper_sanity() -> None:
    # The builders used above produce what the validator expects.
    assert shell("a.B").shell.execution_command == "python"


# --- admission ------------------------------------------------------------------------

def test_submits_past_max_topologies_are_refused_until_one_is_removed(tmp_path: Path) -> None:
    env = Env(tmp_path / "data", max_topologies=2)
    env.submit("a")
    env.submit("b")
    with pytest.raises(N.InvalidTopologyException, match=r"keeps 2 topologies, its limit "
                                                         r"\(max_topologies\)"):
        env.submit("c")
    assert env.names() == ["a", "b"]
    env.handler.killTopologyWithOpts("a", N.KillOptions(wait_secs=0))
    with pytest.raises(N.InvalidTopologyException):     # killed, not yet removed
        env.submit("c")
    env.tick(0)
    env.submit("c")
    assert sorted(env.names()) == ["b", "c"]


def test_submits_past_the_memory_budget_are_refused_saying_what_is_free(
        tmp_path: Path) -> None:
    # The fake launcher's topologies take conf["fake.memory.bytes"] of memory.
    env = Env(tmp_path / "data", spark_memory_budget=10 << 30)
    env.submit("big", conf={"fake.memory.bytes": 6 << 30})
    with pytest.raises(N.InvalidTopologyException) as info:
        env.submit("bigger", conf={"fake.memory.bytes": 5 << 30})
    assert info.value.msg == (
        "the topology needs 5.0 GiB of this machine's memory, and the 1 topologies here "
        "take 6.0 GiB of the 10.0 GiB they may use (spark_memory_budget): 4.0 GiB are "
        "free")
    assert env.names() == ["big"]
    env.submit("fits", conf={"fake.memory.bytes": 4 << 30})
    assert sorted(env.names()) == ["big", "fits"]


def test_a_memory_setting_the_launcher_cannot_read_refuses_the_submit(env: Env) -> None:
    with pytest.raises(N.InvalidTopologyException, match="invalid literal"):
        env.submit(conf={"fake.memory.bytes": "lots"})
    assert env.names() == []


def test_submits_waiting_for_a_code_check_are_bounded(env: Env) -> None:
    # Each waiting submit holds a worker thread; past CODE_CHECK_WAITERS one is refused
    # at once instead of holding one more.
    from nimbus_thrift.nimbus.service.topologies import CODE_CHECK_SLOTS, CODE_CHECK_WAITERS
    for _ in range(CODE_CHECK_SLOTS):
        assert env.handler.topologies._code_checks.acquire(timeout=1)
    locations = [upload(env.handler, make_zip()) for _ in range(CODE_CHECK_WAITERS + 1)]
    errors: list[Exception] = []

    def submit(i: int) -> None:
        try:
            env.handler.submitTopology(f"w{i}", locations[i], "{}", wordcount())
        except Exception as exc:  # noqa: BLE001 - collected and checked below
            errors.append(exc)
    waiters = [threading.Thread(target=submit, args=(i,)) for i in range(CODE_CHECK_WAITERS)]
    for t in waiters:
        t.start()
    deadline = time.monotonic() + 10
    calls = env.handler.topologies
    while calls._code_waiters < CODE_CHECK_WAITERS and time.monotonic() < deadline:
        time.sleep(0.01)
    assert calls._code_waiters == CODE_CHECK_WAITERS
    with pytest.raises(N.InvalidTopologyException, match="more are waiting"):
        env.handler.submitTopology("late", locations[-1], "{}", wordcount())
    for _ in range(CODE_CHECK_SLOTS):
        env.handler.topologies._code_checks.release()
    for t in waiters:
        t.join(30)
    assert errors == [] and env.handler.topologies._code_waiters == 0
    assert sorted(env.names()) == sorted(f"w{i}" for i in range(CODE_CHECK_WAITERS))
