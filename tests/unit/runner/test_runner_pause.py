"""Fakes tier: when a paused topology is fully paused (runner/driver.py's Pause, the
query's batch_in_flight) and what status.json and the daemon's detail say meanwhile.

A batch Spark planned before the spouts saw ``paused`` still runs after the pause, and
on a loaded machine for seconds: the status says so until no batch can be running,
and a reader waiting for the topology to be quiet waits for that, not for a time.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from nimbus_thrift.nimbus.config import load_config
from nimbus_thrift.nimbus.spark import status as spark_status
from nimbus_thrift.nimbus.spark.records import Run
from nimbus_thrift.runner.driver import Pause, Status
from nimbus_thrift.runner.query import TopologyQuery, uncommitted_batch
from nimbus_thrift.runner.rundir import RunDir, RunState


class Probe:
    """A batch_in_flight that answers from a list, counting the questions."""

    def __init__(self, *answers: bool) -> None:
        self.answers = list(answers)
        self.asked = 0

    def __call__(self) -> bool:
        self.asked += 1
        return self.answers.pop(0)


def test_a_pause_is_in_flight_until_the_probe_first_says_no_batch_can_run() -> None:
    pause, probe = Pause(), Probe(True, True, False)
    assert [pause.in_flight(True, probe) for _ in range(3)] == [True, True, False]
    # Held from then on: triggers come and go while paused, and none plans data.
    assert pause.in_flight(True, probe) is False and probe.asked == 3


def test_not_paused_is_never_in_flight_and_a_new_pause_asks_again() -> None:
    pause, probe = Pause(), Probe(False, True, False)
    assert pause.in_flight(False, probe) is False and probe.asked == 0
    assert pause.in_flight(True, probe) is False
    assert pause.in_flight(False, probe) is False        # activated
    assert pause.in_flight(True, probe) is True          # paused again: a batch runs
    assert pause.in_flight(True, probe) is False
    assert probe.asked == 3


def _log(directory: Path, *batches: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for batch in batches:
        (directory / str(batch)).write_text("v1\n{}\n")
        (directory / f".{batch}.crc").write_bytes(b"crc")


def test_a_planned_batch_without_a_commit_is_uncommitted(tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint"
    assert not uncommitted_batch(checkpoint)                     # no query yet
    _log(checkpoint / "offsets", 0, 1, 2, 10)
    assert uncommitted_batch(checkpoint)                         # no commit at all
    _log(checkpoint / "commits", 0, 1, 2)
    assert uncommitted_batch(checkpoint)                         # 10, not 9 < 10
    _log(checkpoint / "commits", 10)
    assert not uncommitted_batch(checkpoint)


@pytest.mark.parametrize("active, planned, committed, in_flight", [
    (True, 3, 3, True),          # a trigger plans or runs a batch
    (False, 4, 3, True),         # planned, not committed: run again after a relaunch
    (False, 3, 3, False),
])
def test_a_batch_is_in_flight_while_a_trigger_is_active_or_a_batch_uncommitted(
        tmp_path: Path, active: bool, planned: int, committed: int,
        in_flight: bool) -> None:
    work = RunDir(tmp_path)
    _log(work.checkpoint / "offsets", *range(planned + 1))
    _log(work.checkpoint / "commits", *range(committed + 1))
    run = TopologyQuery.__new__(TopologyQuery)       # no Spark: only what it reads
    run.run_dir = work
    run.query = SimpleNamespace(status={"message": "", "isDataAvailable": active,
                                        "isTriggerActive": active})
    assert run.batch_in_flight() is in_flight


def test_in_flight_is_written_by_a_paused_status_only(tmp_path: Path) -> None:
    work = RunDir(tmp_path)
    status = Status(work)
    status.write(state="paused", in_flight=True)
    read = work.read_status()
    assert read is not None and read.in_flight
    status.write(state="stopping")
    read = work.read_status()
    assert read is not None and (read.state, read.in_flight) == ("stopping", False)


def test_in_flight_parses_and_defaults_to_false() -> None:
    base: dict[str, Any] = {"state": "paused", "pid": 1, "updated_at": 0,
                            "started_at": 0}
    assert RunState.from_json(RunState(**base).to_json()).in_flight is False
    assert RunState.from_json(RunState(**base, in_flight=True).to_json()).in_flight
    with pytest.raises(ValueError):
        RunState.from_json(RunState(**base, in_flight=1).to_json())


def test_the_detail_says_a_batch_still_runs_after_the_ui(tmp_path: Path) -> None:
    config = load_config(env={}, flags={"data_dir": str(tmp_path / "data"),
                                        "launcher": "none"})
    work = RunDir(tmp_path / "work")
    work.root.mkdir()
    work.set_control("paused")
    run = Run("t-1-1", work, pid=os.getpid(), ui_port=4040)
    last = RunState(state="paused", pid=os.getpid(), updated_at=time.time(),
                    started_at=time.time(), batch_id=12, in_flight=True)
    status = spark_status.run_status(run, True, last, config, time.time)
    assert status.state == "paused"
    assert status.detail == ("paused: spouts stopped, batch 12, Spark UI "
                             f"http://127.0.0.1:4040; {spark_status.IN_FLIGHT}")
    assert (status.sched_status, status.port) == ("paused", 4040)
    last.in_flight = False
    status = spark_status.run_status(run, True, last, config, time.time)
    assert status.detail == "paused: spouts stopped, batch 12, Spark UI " \
                            "http://127.0.0.1:4040"
