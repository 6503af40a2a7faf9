"""sched_status as Storm's, a word or two (issue 32), in the fakes tier: the Spark
launcher's status of a gone application says when it is being relaunched, and a
topology whose executors are too many to list still leads with its state word, which
``submit --wait`` reads."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from nimbus_thrift.client.submit import state_of
from nimbus_thrift.nimbus.config import load_config
from nimbus_thrift.nimbus.service import infos
from nimbus_thrift.nimbus.spark import status as spark_status
from nimbus_thrift.nimbus.spark.records import Run
from nimbus_thrift.runner.rundir import RunDir, RunState
from support.handler_env import HandlerEnv
from support.nimbus import make_zip, upload, wordcount


def gone_run(tmp_path: Path, **fields: object) -> tuple[Run, RunState]:
    work = RunDir(tmp_path / "work")
    work.root.mkdir()
    run = Run("t-1-1", work, pid=os.getpid(), ui_port=0)
    for name, value in fields.items():
        setattr(run, name, value)
    last = RunState(state="running", pid=os.getpid(), updated_at=time.time(),
                    started_at=time.time(), batch_id=3)
    return run, last


@pytest.mark.parametrize("restart_failed, expected", [
    ("true", "relaunching after a failure"), ("false", "failed")])
def test_a_crashed_application_is_relaunching_or_failed(
        tmp_path: Path, restart_failed: str, expected: str) -> None:
    config = load_config(env={}, flags={"data_dir": str(tmp_path / "data"),
                                        "launcher": "none",
                                        "restart_failed": restart_failed})
    run, last = gone_run(tmp_path)
    status = spark_status.run_status(run, False, last, config, time.time)
    assert (status.state, status.sched_status) == ("failed", expected)
    # The sentence keeps the whole story for the web page.
    assert status.detail.startswith("failed: the Spark application exited")
    assert state_of(status.sched_status) in ("", "failed")   # --wait: polls or fails


def test_a_rebalance_between_stop_and_launch_is_relaunching(tmp_path: Path) -> None:
    config = load_config(env={}, flags={"data_dir": str(tmp_path / "data"),
                                        "launcher": "none"})
    run, last = gone_run(tmp_path, pending_relaunch=True)
    status = spark_status.run_status(run, False, last, config, time.time)
    assert status.sched_status == "relaunching with the new parallelism"
    run.launch_error = "OSError: no room"
    status = spark_status.run_status(run, False, last, config, time.time)
    assert status.sched_status == "failed"


def test_unlisted_executors_keep_the_state_word_first(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch
                                                      ) -> None:
    monkeypatch.setattr(infos, "MAX_LISTED_EXECUTORS", 2)
    env = HandlerEnv(tmp_path / "data", admins=["root"])
    try:
        env.handler.submitTopology("wc", upload(env.handler, make_zip()), "{}",
                                   wordcount())
        assert env.handler.background.wait_idle(10)
        (summary,) = env.handler.getClusterInfo().topologies
        info = env.handler.getTopologyInfo(summary.id)
        assert info.executors == []
        assert info.sched_status == "running: 6 executors, not listed"
        assert state_of(info.sched_status) == "running"
    finally:
        env.close()
