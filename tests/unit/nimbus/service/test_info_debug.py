"""getTopologyInfo's parts that come from the run-time settings and the measured task
time (the fakes tier): ``component_debug`` from the settings ``debug`` writes, and
``execute_ms_avg`` equal to page info's ``execute_latency_ms``; and the Spark
application's view of its work directory (``$NIMBUS_THRIFT_WORK_DIR``), where the DSL's
blob helpers look.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from support.nimbus import FakeLauncher, N, make_zip, upload, wordcount
from nimbus_thrift.nimbus.config import load_config
from nimbus_thrift.nimbus.service.handler import NimbusHandler
from nimbus_thrift.nimbus.launcher import ComponentStats
from nimbus_thrift.nimbus.spark import submit as submit_module
from nimbus_thrift.nimbus.state.store import Store
from nimbus_thrift.runner.spec import RunSpec
from nimbus_thrift.topology.blobs import WORK_DIR_ENV


class Env:
    def __init__(self, data_dir: Path):
        data_dir.mkdir(parents=True)
        self.launcher = FakeLauncher()
        config = load_config(env={}, flags={"data_dir": str(data_dir), "launcher": "none"})
        self.store = Store(data_dir / "nimbus.sqlite3")
        self.handler = NimbusHandler(N, config, self.store, self.launcher)
        self.handler.recover()
        self.topologies = data_dir / "topologies"

    def submit(self, name: str = "wc") -> str:
        self.handler.submitTopology(name, upload(self.handler, make_zip()), "{}",
                                    wordcount())
        assert self.handler.background.wait_idle(10)
        return next(t.id for t in self.handler.getClusterInfo().topologies
                    if t.name == name)


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path / "data")
    yield e
    e.handler.close()
    e.store.close()


# --- component_debug ------------------------------------------------------------------

def test_component_debug_is_unset_until_debug_is_called(env: Env) -> None:
    tid = env.submit()
    assert env.handler.getTopologyInfo(tid).component_debug is None


def test_component_debug_follows_debug_with_the_topology_wide_entry_by_id(env: Env) -> None:
    tid = env.submit()
    env.handler.debug("wc", "split", True, 25.0)
    env.handler.debug("wc", "", True, 5.0)
    env.handler.debug("wc", "count", False, 40.0)
    debug = env.handler.getTopologyInfo(tid).component_debug
    assert {k: (v.enable, v.samplingpct) for k, v in debug.items()} == {
        "split": (True, 25.0), tid: (True, 5.0), "count": (False, 40.0)}
    # Off keeps the percentage, as Storm's debug does.
    env.handler.debug("wc", "split", False, 0.0)
    split = env.handler.getTopologyInfoByName("wc").component_debug["split"]
    assert (split.enable, split.samplingpct) == (False, 25.0)


@pytest.mark.parametrize("content", ["{not json", '["a list"]',
                                     '{"sampling": {"split": {"bogus": 1}}}'])
def test_unreadable_settings_leave_component_debug_unset_and_info_answers(
        env: Env, content: str) -> None:
    tid = env.submit()
    env.handler.debug("wc", "split", True, 25.0)
    (env.topologies / tid / "settings.json").write_text(content)
    info = env.handler.getTopologyInfo(tid)
    assert info.component_debug is None and info.name == "wc"


def test_settings_that_are_a_directory_leave_component_debug_unset(env: Env) -> None:
    tid = env.submit()
    (env.topologies / tid / "settings.json").mkdir()      # reading it is an OSError
    assert env.handler.getTopologyInfo(tid).component_debug is None


# --- execute_ms_avg -------------------------------------------------------------------

def _bolt_stats(info: Any, component: str, field: str) -> list[float]:
    return [value for e in info.executors if e.component_id == component
            for value in getattr(e.stats.specific.bolt, field)[":all-time"].values()]


def test_execute_ms_avg_is_the_task_time_per_tuple_as_page_info_says(env: Env) -> None:
    tid = env.submit()
    env.launcher.stats[tid] = {
        "sentences": ComponentStats(emitted=40, processed=0, latency_ms=120.0),
        "split": ComponentStats(emitted=240, processed=40, latency_ms=120.0, busy_ms=100.0),
        "count": ComponentStats(emitted=240, processed=240, latency_ms=120.0)}
    info = env.handler.getTopologyInfo(tid)
    # split: 100 ms over 40 tuples; the batch latency stays the process latency.
    assert _bolt_stats(info, "split", "execute_ms_avg") == [2.5, 2.5]
    assert _bolt_stats(info, "split", "process_ms_avg") == [120.0, 120.0]
    page = env.handler.getTopologyPageInfo(tid, ":all-time", False)
    assert page.id_to_bolt_agg_stats["split"].specific_stats.bolt.execute_latency_ms == 2.5
    # count's task time was not measured: 0, not the batch latency.
    assert _bolt_stats(info, "count", "execute_ms_avg") == [0.0, 0.0, 0.0]


# --- the application's work directory -------------------------------------------------

def test_the_application_environment_names_its_work_directory(tmp_path: Path) -> None:
    work = tmp_path / "topologies" / "wc-1-2"
    env = submit_module.environment(work, None, {"PATH": "/usr/bin",
                                                 WORK_DIR_ENV: "/the/daemon's/own"})
    assert env[WORK_DIR_ENV] == str(work)


def _spec() -> RunSpec:
    return RunSpec(topology_id="wc-1-2", name="wc", conf={}, components={})


def test_executors_of_a_cluster_get_the_work_directory(tmp_path: Path) -> None:
    work = tmp_path / "wc-1-2"
    confs = submit_module.spark_confs("spark://m:7077", _spec(), work, 0, 1)
    assert confs[f"spark.executorEnv.{WORK_DIR_ENV}"] == str(work)


def test_local_executors_inherit_it_from_the_environment_instead(tmp_path: Path) -> None:
    confs = submit_module.spark_confs("local[2]", _spec(), tmp_path / "wc-1-2", 0, 1)
    assert not any(k.startswith("spark.executorEnv.") for k in confs)
