"""setLogConfig, getLogConfig, debug and the page-info calls through a Nimbus handler
with a fake launcher and a fake clock (the fakes tier): Storm's merge of log configs,
the settings file the runner follows, windows of the daemon's time series, errors and
authorization."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from thriftpy2.thrift import TApplicationException

from support.handler_env import HandlerEnv
from support.nimbus import FakeClock, N, make_zip, request_as, upload, wordcount
from support.web import FiguresLauncher
from nimbus_thrift.nimbus.service.handler import NimbusHandler
from nimbus_thrift.nimbus.launcher import ComponentStats
from nimbus_thrift.nimbus.service.pages import window_seconds
from nimbus_thrift.runner.rundir import LoggerSetting, RunDir, Sampling

UPDATE, REMOVE, UNCHANGED = (N.LogLevelAction.UPDATE, N.LogLevelAction.REMOVE,
                             N.LogLevelAction.UNCHANGED)


def running_launcher(clock: FakeClock) -> FiguresLauncher:
    """A fake launcher whose runs have a start time and errors, on one local node (no
    Spark UI)."""
    return FiguresLauncher(clock, ui_url="")


class Env(HandlerEnv):
    launcher: FiguresLauncher

    def __init__(self, data_dir: Path):
        super().__init__(data_dir, admins=["root"], users=["reader", "stranger"])

    def new_launcher(self) -> FiguresLauncher:
        return running_launcher(self.clock)

    def submit(self, name: str = "wc", conf: dict[str, Any] | None = None) -> str:
        location = upload(self.handler, make_zip())
        self.handler.submitTopology(name, location, json.dumps(conf or {}), wordcount())
        assert self.handler.background.wait_idle(10)
        return next(t.id for t in self.handler.getClusterInfo().topologies if t.name == name)

    def settings(self, topology_id: str) -> Any:
        return RunDir(self.data_dir / "topologies" / topology_id).read_settings()

    def report(self, topology_id: str, split: int, sentences: int,
               latency: float = 100.0) -> None:
        """What the runner says now: cumulative counts since the run started."""
        self.launcher.stats[topology_id] = {
            "sentences": ComponentStats(emitted=sentences, processed=0, latency_ms=latency),
            "split": ComponentStats(emitted=split * 6, processed=split, latency_ms=latency,
                                    busy_ms=split * 5.0),
            "count": ComponentStats(emitted=split * 6, processed=split * 6,
                                    latency_ms=latency)}


@pytest.fixture
def env(tmp_path: Path) -> Env:
    e = Env(tmp_path / "data")
    yield e
    e.close()


def log_config(**levels: Any) -> Any:
    return N.LogConfig(named_logger_level=levels)


# --- log levels ----------------------------------------------------------------------

def test_set_log_config_merges_as_storm_and_the_runner_file_follows(env: Env) -> None:
    tid = env.submit()
    env.handler.setLogConfig(tid, log_config(
        ROOT=N.LogLevel(action=UPDATE, target_log_level="DEBUG",
                        reset_log_level_timeout_secs=30),
        **{"wordcount.bolts": N.LogLevel(action=UPDATE, target_log_level="warn")}))
    settings = env.settings(tid)
    assert settings.loggers == {
        "ROOT": LoggerSetting("DEBUG", reset_at=env.clock.now + 30, timeout_secs=30),
        "wordcount.bolts": LoggerSetting("WARN")}
    # A second call merges: UNCHANGED keeps, REMOVE drops, UPDATE replaces; by name,
    # any case of ROOT is the root logger.
    env.clock.advance(5)
    env.handler.setLogConfig("wc", log_config(
        root=N.LogLevel(action=UPDATE, target_log_level="ERROR", reset_log_level="INFO",
                        reset_log_level_timeout_secs=60),
        **{"wordcount.bolts": N.LogLevel(action=REMOVE),
           "other": N.LogLevel(action=UNCHANGED, target_log_level="DEBUG")}))
    assert env.settings(tid).loggers == {
        "ROOT": LoggerSetting("ERROR", reset_at=env.clock.now + 60, reset_level="INFO",
                              timeout_secs=60)}
    got = env.handler.getLogConfig(tid).named_logger_level["ROOT"]
    assert (got.action, got.target_log_level, got.reset_log_level,
            got.reset_log_level_timeout_secs, got.reset_log_level_timeout_epoch) == (
        UPDATE, "ERROR", "INFO", 60, int((env.clock.now + 60) * 1000))


def test_a_level_kept_until_changed_has_no_reset_fields(env: Env) -> None:
    tid = env.submit()
    env.handler.setLogConfig(tid, log_config(ROOT=N.LogLevel(
        action=UPDATE, target_log_level="INFO", reset_log_level_timeout_secs=0)))
    got = env.handler.getLogConfig(tid).named_logger_level["ROOT"]
    assert got.reset_log_level_timeout_epoch is None and got.reset_log_level is None
    assert env.handler.getLogConfig(tid) == N.LogConfig(named_logger_level={"ROOT": got})


@pytest.mark.parametrize("levels, message", [
    ({"": N.LogLevel(action=UPDATE, target_log_level="DEBUG")}, "need a name"),
    ({"a": N.LogLevel(action=UPDATE, target_log_level="LOUD")}, "'LOUD' is not a log level"),
    ({"a": N.LogLevel(action=UPDATE)}, "target_log_level None is not a log level"),
    ({"a": N.LogLevel(action=UPDATE, target_log_level="DEBUG", reset_log_level="x")},
     "reset_log_level 'x'"),
    ({"a": N.LogLevel(action=9, target_log_level="DEBUG")}, "has action 9"),
    ({"a": N.LogLevel(action=UPDATE, target_log_level="DEBUG",
                      reset_log_level_timeout_secs=10**9)}, "over the limit"),
    ({"x" * 1001: N.LogLevel(action=UPDATE, target_log_level="DEBUG")}, "1001 characters"),
])
def test_bad_log_settings_are_refused_with_a_sentence_and_change_nothing(
        env: Env, levels: dict[str, Any], message: str) -> None:
    tid = env.submit()
    with pytest.raises(TApplicationException, match=message):
        env.handler.setLogConfig(tid, log_config(**levels))
    assert not (env.data_dir / "topologies" / tid / "settings.json").exists()


def test_log_calls_on_an_unknown_topology_say_so(env: Env) -> None:
    # Storm declares no exception for them: a TApplicationException with the sentence.
    with pytest.raises(TApplicationException, match="no topology with id or name 'nope'"):
        env.handler.setLogConfig("nope", log_config())
    with pytest.raises(TApplicationException, match="no topology"):
        env.handler.getLogConfig("nope")
    with pytest.raises(N.NotAliveException):
        env.handler.debug("nope", "", True, 10.0)


def test_log_config_survives_a_daemon_restart_and_goes_with_the_topology(env: Env) -> None:
    tid = env.submit()
    env.handler.setLogConfig(tid, log_config(ROOT=N.LogLevel(action=UPDATE,
                                                             target_log_level="DEBUG")))
    env.handler.close()
    again = NimbusHandler(N, env.config, env.store, running_launcher(env.clock), clock=env.clock)
    again.recover()
    assert again.getLogConfig(tid).named_logger_level["ROOT"].target_log_level == "DEBUG"
    env.handler = again
    env.handler.killTopologyWithOpts("wc", N.KillOptions(wait_secs=0))
    env.handler.timers.run_due()
    assert env.handler.background.wait_idle(10)
    assert not (env.data_dir / "topologies" / tid).exists()


def test_only_who_controls_a_topology_changes_its_levels(env: Env) -> None:
    tid = env.submit(conf={"topology.readonly.users": ["reader"]})
    update = log_config(ROOT=N.LogLevel(action=UPDATE, target_log_level="DEBUG"))
    with request_as("reader"):
        assert env.handler.getLogConfig(tid) == N.LogConfig(named_logger_level={})
        with pytest.raises(TApplicationException, match="'reader' may not call setLogConfig"):
            env.handler.setLogConfig(tid, update)
        with pytest.raises(N.AuthorizationException):
            env.handler.debug("wc", "", True, 5.0)
    with request_as("root"):
        env.handler.setLogConfig(tid, update)
    assert "ROOT" in env.settings(tid).loggers


def test_debug_samples_a_component_or_all_and_keeps_the_percentage_when_off(
        env: Env) -> None:
    tid = env.submit()
    env.handler.debug("wc", "", True, 150.0)                  # clamped, as Storm
    env.handler.debug("wc", "split", True, 12.5)
    assert env.settings(tid).sampling == {"": Sampling(True, 100.0),
                                          "split": Sampling(True, 12.5)}
    env.handler.debug("wc", "split", False, 0.0)
    assert env.settings(tid).sampling["split"] == Sampling(False, 12.5)
    assert env.settings(tid).sample_percent("split") == 0.0
    assert env.settings(tid).sample_percent("count") == 100.0
    with pytest.raises(N.NotAliveException, match="no component 'nope'"):
        env.handler.debug("wc", "nope", True, 1.0)
    # Log levels and sampling share the file: neither overwrites the other.
    env.handler.setLogConfig(tid, log_config(ROOT=N.LogLevel(action=UPDATE,
                                                             target_log_level="INFO")))
    assert env.settings(tid).sampling["split"] == Sampling(False, 12.5)
    page = env.handler.getComponentPageInfo(tid, "split", ":all-time", False)
    assert page.debug_options == N.DebugOptions(enable=False, samplingpct=12.5)
    topology = env.handler.getTopologyPageInfo(tid, ":all-time", False)
    assert topology.debug_options == N.DebugOptions(enable=True, samplingpct=100.0)


# --- page info -----------------------------------------------------------------------

def test_windows_are_storm_keys_or_seconds() -> None:
    assert window_seconds(":all-time") is None and window_seconds(None) is None
    assert window_seconds("600") == 600.0
    with pytest.raises(ValueError, match="'10m' is neither"):
        window_seconds("10m")


def test_topology_page_figures_per_window_match_topology_info(env: Env) -> None:
    tid = env.submit()
    for minute in range(0, 21):                  # 20 minutes at 10 sentences/s
        env.report(tid, split=minute * 600, sentences=minute * 600)
        env.handler.sample_figures()
        env.clock.advance(60)
    env.clock.advance(-60)
    page = env.handler.getTopologyPageInfo(tid, ":all-time", False)
    assert (page.id, page.name, page.status, page.num_tasks, page.num_executors) == (
        tid, "wc", "ACTIVE", 6, 6)
    assert json.loads(page.topology_conf)["topology.name"] == "wc"
    split = page.id_to_bolt_agg_stats["split"]
    assert split.common_stats.emitted == 20 * 600 * 6
    assert split.specific_stats.bolt.executed == 20 * 600
    # Busy 3 s of each minute on 2 executors: 3/(60*2); 300 ms per 600 tuples.
    assert split.specific_stats.bolt.capacity == 0.025
    assert split.specific_stats.bolt.execute_latency_ms == 5.0
    assert split.specific_stats.bolt.process_latency_ms == 100.0
    assert split.common_stats.acked is None                   # no per-tuple acking
    spout = page.id_to_spout_agg_stats["sentences"]
    assert spout.specific_stats.spout.complete_latency_ms == 100.0
    # The same figures as getTopologyInfo's executors, summed.
    info = env.handler.getTopologyInfo(tid)
    executed = sum(v for e in info.executors if e.component_id == "split"
                   for v in e.stats.specific.bolt.executed[":all-time"].values())
    assert executed == split.specific_stats.bolt.executed
    ten = env.handler.getTopologyPageInfo(tid, "600", False)
    assert ten.id_to_bolt_agg_stats["split"].specific_stats.bolt.executed == 10 * 600
    stats = page.topology_stats
    assert stats.window_to_emitted["600"] == 10 * 600 * (1 + 6 + 6)
    assert stats.window_to_emitted[":all-time"] == 20 * 600 * 13
    assert stats.window_to_acked is None and stats.window_to_failed is None
    [worker] = page.workers
    assert (worker.supervisor_id, worker.topology_id, worker.num_executors) == (
        "local-box", tid, 6)


def test_component_page_has_all_windows_streams_executors_and_errors(env: Env) -> None:
    tid = env.submit()
    env.report(tid, split=0, sentences=0)
    env.handler.sample_figures()
    env.clock.advance(100)
    env.report(tid, split=1001, sentences=1001)
    env.launcher.run_errors[tid] = (("split", "ValueError: bad", int(env.clock.now)),)
    page = env.handler.getComponentPageInfo(tid, "split", "600", False)
    assert page.component_type == N.ComponentType.BOLT
    assert set(page.window_to_stats) == {":all-time", "600", "10800", "86400"}
    assert page.window_to_stats["600"].specific_stats.bolt.executed == 1001
    [(source, stats)] = page.gsid_to_input_stats.items()
    assert (source.componentId, stats.specific_stats.bolt.executed) == ("sentences", 1001)
    assert page.sid_to_output_stats["default"].common_stats.emitted == 6006
    # Executors share the counts evenly; the shares add up.
    assert [e.stats.specific_stats.bolt.executed for e in page.exec_stats] == [501, 500]
    [error] = page.errors
    assert (error.error, error.host, error.port) == ("ValueError: bad", "127.0.0.1", 4040)
    assert page.window_to_stats["600"].last_error == error
    with pytest.raises(N.NotAliveException, match="no component 'nope'"):
        env.handler.getComponentPageInfo(tid, "nope", "600", False)
    with pytest.raises(TApplicationException, match="'1d' is neither"):
        env.handler.getComponentPageInfo(tid, "split", "1d", False)


def test_a_topology_that_is_not_running_has_counts_only(env: Env) -> None:
    tid = env.submit()
    page = env.handler.getTopologyPageInfo(tid, ":all-time", False)
    split = page.id_to_bolt_agg_stats["split"]
    assert (split.common_stats.num_executors, split.common_stats.emitted,
            split.specific_stats) == (2, None, None)
    assert page.topology_stats.window_to_emitted == {}


def test_supervisor_page_lists_the_node_and_its_applications(env: Env) -> None:
    tid = env.submit(conf={"topology.readonly.users": ["reader"]})
    page = env.handler.getSupervisorPageInfo("local-box", "", False)
    [node] = page.supervisor_summaries
    assert (node.supervisor_id, node.num_workers, node.num_used_workers) == ("local-box", 4, 1)
    [worker] = page.worker_summaries
    assert (worker.topology_id, worker.component_to_num_tasks) == (
        tid, {"sentences": 1, "split": 2, "count": 3})
    assert env.handler.getSupervisorPageInfo("", "box", False).supervisor_summaries == [node]
    assert env.handler.getSupervisorPageInfo("", "elsewhere", False) == N.SupervisorPageInfo(
        supervisor_summaries=[], worker_summaries=[])
    with pytest.raises(N.NotAliveException, match="no Spark worker with id 'w9'"):
        env.handler.getSupervisorPageInfo("w9", "", False)
    # Someone who may not read the topology sees that it runs there, not its details.
    with request_as("stranger"):
        [hidden] = env.handler.getSupervisorPageInfo("local-box", "", False).worker_summaries
    assert hidden.topology_id == tid and hidden.component_to_num_tasks is None
    with request_as("stranger"), pytest.raises(N.AuthorizationException):
        env.handler.getTopologyPageInfo(tid, "600", False)


def test_removed_topologies_are_forgotten_by_the_series(env: Env) -> None:
    tid = env.submit()
    env.report(tid, split=10, sentences=10)
    env.handler.sample_figures()
    assert len(env.handler.figures) == 1
    env.handler.killTopologyWithOpts("wc", N.KillOptions(wait_secs=0))
    env.handler.timers.run_due()
    assert env.handler.background.wait_idle(10)
    env.handler.sample_figures()
    assert len(env.handler.figures) == 0
