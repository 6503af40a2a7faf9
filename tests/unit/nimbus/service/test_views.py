"""The read calls' kept answers (nimbus/service/views.py): served to every caller while
nothing they show changed, never stale after a change (a state change, an error, a
launcher's report, the clock), and the topology ACLs still checked per caller; against
the fake launcher and a fake clock (the fakes tier)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from support.nimbus import (BlockingLauncher, FakeClock, FakeLauncher, N, make_zip, request_as,
                            upload, wordcount)
from nimbus_thrift.nimbus.config import load_config
from nimbus_thrift.nimbus.launcher import ComponentStats
from nimbus_thrift.nimbus.service import views as views_module
from nimbus_thrift.nimbus.service.handler import NimbusHandler
from nimbus_thrift.nimbus.state.store import Store


class Env:
    def __init__(self, data_dir: Path, launcher: FakeLauncher | None = None, **config: Any):
        data_dir.mkdir(parents=True, exist_ok=True)
        self.clock = FakeClock()
        self.launcher = launcher or FakeLauncher()
        self.config = load_config(env={}, flags={"data_dir": str(data_dir),
                                                 "launcher": "none", **config})
        self.store = Store(data_dir / "nimbus.sqlite3")
        self.handler = NimbusHandler(N, self.config, self.store, self.launcher,
                                     clock=self.clock)
        # The fake clock for the age of a ClusterSummary too: a slow machine must not
        # make a second pass between two reads of a test.
        self.handler.infos.views._monotonic = self.clock
        self.handler.recover()

    def submit(self, name: str, conf: dict[str, Any] | None = None) -> str:
        location = upload(self.handler, make_zip())
        self.handler.submitTopology(name, location, json.dumps(conf or {}), wordcount())
        self.idle()
        return next(t.id for t in self.handler.getClusterInfo().topologies
                    if t.name == name)

    def idle(self) -> None:
        assert self.handler.background.wait_idle(10)

    def listed(self, tid: str) -> Any:
        return next(t for t in self.handler.getClusterInfo().topologies if t.id == tid)

    def tick(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.handler.timers.run_due()
        self.idle()

    def close(self) -> None:
        self.handler.close()
        self.store.close()


@pytest.fixture
def env(tmp_path: Path) -> Any:
    e = Env(tmp_path / "data")
    yield e
    e.close()


def no_store_reads(monkeypatch: pytest.MonkeyPatch, store: Store) -> None:
    def refuse(*args: Any) -> Any:
        raise AssertionError("a kept answer read the store")
    for name in ("listing", "topology", "topology_named", "errors", "topologies"):
        monkeypatch.setattr(store, name, refuse)


# --- served once built ----------------------------------------------------------------

def test_a_hit_is_the_same_answer_and_reads_no_store(
        env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    tid = env.submit("wc", {"app.key": "v"})
    cluster = env.handler.getClusterInfo()
    info = env.handler.getTopologyInfo(tid)
    conf = env.handler.getTopologyConf(tid)
    no_store_reads(monkeypatch, env.store)
    assert env.handler.getClusterInfo() is cluster
    assert env.handler.getTopologyInfo(tid) is info
    assert env.handler.getTopologyConf(tid) is conf
    assert json.loads(conf)["app.key"] == "v"
    assert env.handler.getTopologySummaries() == cluster.topologies
    assert env.handler.getTopologySummary(tid) is cluster.topologies[0]


def test_the_conf_is_serialised_once(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    tid = env.submit("wc")
    first = env.handler.getTopologyConf(tid)
    dumps = []
    monkeypatch.setattr(json, "dumps", lambda *a, **k: dumps.append(a) or "{}")
    assert env.handler.getTopologyConf(tid) == first and dumps == []


# --- never stale after a change -------------------------------------------------------

def test_state_changes_show_at_the_next_read(env: Env) -> None:
    tid = env.submit("wc")
    assert env.listed(tid).status == "ACTIVE"
    assert env.handler.getTopologyInfo(tid).status == "ACTIVE"
    env.handler.deactivate("wc")
    env.idle()
    assert env.listed(tid).status == "INACTIVE"
    assert env.handler.getTopologyInfo(tid).status == "INACTIVE"
    assert env.listed(tid).sched_status == "paused"
    env.handler.activate("wc")
    env.idle()
    assert env.listed(tid).status == "ACTIVE"
    assert env.handler.getTopologyInfo(tid).status == "ACTIVE"
    assert env.listed(tid).sched_status == "running"


def test_a_rebalance_shows_in_summary_and_info(env: Env) -> None:
    tid = env.submit("wc")
    before = env.handler.getTopologyInfo(tid)
    assert env.listed(tid).num_executors == 6 and len(before.executors) == 6
    env.handler.rebalance("wc", N.RebalanceOptions(wait_secs=0, num_executors={"count": 1}))
    env.tick(1)
    assert env.listed(tid).num_executors == 4
    assert len(env.handler.getTopologyInfo(tid).executors) == 4


def test_a_kill_then_the_removal(env: Env) -> None:
    tid = env.submit("wc")
    env.handler.getTopologyInfo(tid)
    env.handler.killTopologyWithOpts("wc", N.KillOptions(wait_secs=5))
    env.idle()
    assert env.listed(tid).status == "KILLED"
    assert env.handler.getTopologyInfo(tid).status == "KILLED"
    env.tick(6)
    assert env.handler.getClusterInfo().topologies == []
    for call in (env.handler.getTopologyInfo, env.handler.getTopologyConf):
        with pytest.raises(N.NotAliveException):
            call(tid)


def test_an_error_recorded_shows_in_the_info(env: Env) -> None:
    tid = env.submit("wc")
    assert env.handler.getTopologyInfo(tid).errors == {}
    env.launcher.fail.add("pause")
    env.handler.deactivate("wc")
    env.idle()
    errors = env.handler.getTopologyInfo(tid).errors
    assert "launcher pause failed" in errors["__nimbus"][0].error


def test_launcher_stats_show_at_the_next_read(env: Env) -> None:
    tid = env.submit("wc")
    first = env.handler.getTopologyInfo(tid)
    env.launcher.stats[tid] = {"split": ComponentStats(emitted=10, processed=5, rate=1.0)}
    info = env.handler.getTopologyInfo(tid)
    assert info is not first
    split = [e for e in info.executors if e.component_id == "split"]
    assert sum(e.stats.emitted[":all-time"]["default"] for e in split) == 10


def test_a_new_sched_status_seen_by_a_read_reaches_the_summary(env: Env) -> None:
    tid = env.submit("wc")
    assert env.listed(tid).sched_status == "running"
    env.launcher.state[tid] = "failed"          # the launcher changed on its own
    assert env.handler.getTopologyInfo(tid).sched_status == "failed"
    assert env.listed(tid).sched_status == "failed"


def test_debug_shows_in_component_debug(env: Env) -> None:
    tid = env.submit("wc")
    assert env.handler.getTopologyInfo(tid).component_debug is None
    env.handler.debug("wc", "split", True, 25.0)
    debug = env.handler.getTopologyInfo(tid).component_debug
    assert debug["split"].enable and debug["split"].samplingpct == 25.0


def test_uptimes_follow_the_clock(env: Env) -> None:
    tid = env.submit("wc")
    cluster = env.handler.getClusterInfo()
    info = env.handler.getTopologyInfo(tid)
    assert (env.listed(tid).uptime_secs, info.uptime_secs) == (0, 0)
    env.clock.advance(5)
    assert env.handler.getClusterInfo() is not cluster
    assert env.listed(tid).uptime_secs == 5
    assert env.handler.getClusterInfo().nimbus_uptime_secs == 5
    later = env.handler.getTopologyInfo(tid)
    assert later.uptime_secs == 5 and info.uptime_secs == 0    # the kept one unchanged
    assert env.handler.getTopologyInfo(tid) is later
    options = N.GetInfoOptions(num_err_choice=N.NumErrorsChoice.NONE)
    assert env.handler.getTopologyInfoWithOpts(tid, options).uptime_secs == 5


def test_a_submit_shows_in_the_kept_listing(env: Env) -> None:
    a = env.submit("a")
    env.handler.getClusterInfo()
    b = env.submit("b")
    assert [t.id for t in env.handler.getClusterInfo().topologies] == [a, b]


def test_a_change_during_a_build_is_not_kept(env: Env,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    tid = env.submit("wc")
    views = env.handler.infos.views
    views.changed(tid)                  # nothing kept of it now
    read = env.store.topology

    def read_then_change(topology_id: str) -> Any:
        rec = read(topology_id)
        monkeypatch.setattr(env.store, "topology", read)
        env.handler.deactivate("wc")    # commits while the view is being built
        return rec
    monkeypatch.setattr(env.store, "topology", read_then_change)
    assert env.handler.getTopologyInfo(tid).status == "ACTIVE"    # what it read
    assert env.handler.getTopologyInfo(tid).status == "INACTIVE"


# --- the store's watchers -------------------------------------------------------------

def test_watchers_are_told_after_the_commit_not_before(env: Env) -> None:
    tid = env.submit("wc")
    told: list[str] = []
    env.store.watch(told.append)
    with env.store.transaction():
        env.store.set_status(tid, "INACTIVE", "ACTIVE")
        env.store.add_error(tid, "split", "boom", 1)
        assert told == []
    assert told == [tid]
    told.clear()
    with pytest.raises(RuntimeError):
        with env.store.transaction():
            env.store.set_status(tid, "ACTIVE", "INACTIVE")
            raise RuntimeError("rolled back")
    assert told == []


# --- ACLs per caller ------------------------------------------------------------------

def test_each_caller_is_checked_against_the_kept_acl(tmp_path: Path) -> None:
    e = Env(tmp_path / "data", users=["alice", "bob", "carol"])
    try:
        with request_as("alice"):
            tid = e.submit("mine", {"topology.readonly.users": ["carol"]})
            info = e.handler.getTopologyInfo(tid)
            conf = e.handler.getTopologyConf(tid)
        with request_as("carol"):
            assert e.handler.getTopologyInfo(tid) is info
            assert e.handler.getTopologyConf(tid) is conf
        with request_as("bob"):
            assert [t.id for t in e.handler.getClusterInfo().topologies] == [tid]
            for call in (e.handler.getTopologyInfo, e.handler.getTopologyConf):
                with pytest.raises(N.AuthorizationException):
                    call(tid)
            with pytest.raises(N.AuthorizationException):
                e.handler.getTopologyInfoWithOpts(tid, N.GetInfoOptions())
    finally:
        e.close()


def test_the_sampler_brings_a_new_sched_status_to_the_summary(env: Env) -> None:
    tid = env.submit("wc")
    assert env.listed(tid).sched_status == "running"
    env.launcher.state[tid] = "failed"
    env.handler.sample_figures()
    assert env.listed(tid).sched_status == "failed"


def test_by_name_and_with_options_serve_the_kept_info(env: Env) -> None:
    tid = env.submit("wc")
    env.launcher.fail.add("pause")
    env.handler.deactivate("wc")
    env.idle()
    info = env.handler.getTopologyInfoByName("wc")
    assert env.handler.getTopologyInfo(tid) is info
    none = N.GetInfoOptions(num_err_choice=N.NumErrorsChoice.NONE)
    assert env.handler.getTopologyInfoByNameWithOpts("wc", none).errors == {"__nimbus": []}
    assert len(env.handler.getTopologyInfoWithOpts(tid, N.GetInfoOptions()).errors[
        "__nimbus"]) == 1


def test_a_change_rereads_its_row_only(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = env.submit("a"), env.submit("b")
    before = {t.id: t for t in env.handler.getClusterInfo().topologies}

    def refuse() -> Any:
        raise AssertionError("listed whole for one changed row")
    monkeypatch.setattr(env.store, "listing", refuse)
    env.handler.deactivate("a")
    env.idle()
    after = {t.id: t for t in env.handler.getClusterInfo().topologies}
    assert after[a].status == "INACTIVE" and after[b] is before[b]
    env.clock.advance(2)                # a new second: every uptime, no listing
    later = {t.id: t for t in env.handler.getClusterInfo().topologies}
    assert (later[a].uptime_secs, later[b].uptime_secs) == (2, 2)
    assert (before[b].uptime_secs, later[a].status) == (0, "INACTIVE")


def test_listing_of_reads_the_rows_asked(env: Env) -> None:
    a, b = env.submit("a"), env.submit("b")
    assert [r.id for r in env.store.listing_of([b, "ghost"])] == [b]
    assert {r.id: r for r in env.store.listing_of([a, b])} == \
        {r.id: r for r in env.store.listing()}


def test_the_structure_is_served_without_the_store(
        env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    tid = env.submit("wc")
    with pytest.raises(N.NotAliveException):
        env.handler.getTopology(tid + "x")
    assert env.handler.getTopology(tid) == wordcount()
    no_store_reads(monkeypatch, env.store)
    assert env.handler.getUserTopology(tid) == wordcount()


def test_past_the_bound_of_changed_ids_all_is_read_again(
        env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(views_module, "MAX_ROWS_REREAD", 1)
    ids = [env.submit(name) for name in ("a", "b", "c")]
    env.handler.getClusterInfo()
    for name in ("a", "b", "c"):
        env.handler.deactivate(name)
    env.idle()
    views = env.handler.infos.views
    assert len(views._rows_changed) == 2 and len(views._runs_changed) == 2
    listed = {t.id: t for t in env.handler.getClusterInfo().topologies}
    assert [(listed[i].status, listed[i].sched_status) for i in ids] == \
        [("INACTIVE", "paused")] * 3


def test_a_launcher_call_that_returns_later_reaches_the_summary(tmp_path: Path) -> None:
    launcher = BlockingLauncher("pause")
    e = Env(tmp_path / "data", launcher, launcher_reply_wait_secs=0.01)
    try:
        tid = e.submit("wc")
        e.handler.deactivate("wc")      # answered before the launcher has paused it
        assert launcher.entered["pause"].wait(10)
        assert (e.listed(tid).status, e.listed(tid).sched_status) == \
            ("INACTIVE", "running")
        launcher.release()
        e.idle()
        assert e.listed(tid).sched_status == "paused"
    finally:
        launcher.release()
        e.close()
