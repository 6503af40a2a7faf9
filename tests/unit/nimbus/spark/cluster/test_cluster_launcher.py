"""The cluster launcher against a fake master (its REST replies and JSON view as
objects): it never submits a second driver for a topology whose driver the master
may still run, stops through control then the kill, rebalances with a new driver,
and says what the master and the driver's files say."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from support.nimbus import make_zip, wordcount

from nimbus_thrift.nimbus.config import NimbusConfig, load_config
from nimbus_thrift.nimbus.launcher import LauncherError, LaunchSpec
from nimbus_thrift.nimbus.spark.cluster.launcher import ClusterLauncher
from nimbus_thrift.nimbus.spark.cluster.masterview import (Driver, MasterView,
                                                           MasterWatch, Worker)
from nimbus_thrift.nimbus.spark.cluster.rest import DriverStatus, RestError
from nimbus_thrift.runner.attempts import Attempt, AttemptBook, write_attempts
from nimbus_thrift.runner.rundir import RunDir, RunState
from nimbus_thrift.topology.validate import check_topology

WORKER = Worker(worker_id="worker-20261128015403-10.0.0.7-7078", host="10.0.0.7",
                port=7078, cores=4, cores_free=4, memory_mb=8192, memory_free_mb=8192,
                alive=True, web_url="http://10.0.0.7:8081")


class FakeMaster:
    """The REST server and JSON view of a master, in memory."""

    def __init__(self) -> None:
        self.url = "http://fake:6066"
        self.drivers: dict[str, str] = {}
        self.requests: list[dict[str, Any]] = []
        self.kills: list[str] = []
        self.down = False
        #: What a driver does when asked to stop through its control file.
        self.obeys_control = True
        self.work: dict[str, Path] = {}

    def create(self, request: dict[str, Any]) -> str:
        self._check()
        driver_id = f"driver-20261128000000-{len(self.requests):04d}"
        self.requests.append(request)
        self.drivers[driver_id] = "RUNNING"
        self.work[driver_id] = Path(request["appArgs"][request["appArgs"].index(
            "--workdir") + 1])
        return driver_id

    def status(self, driver_id: str) -> DriverStatus:
        self._check()
        state = self.drivers.get(driver_id, "UNKNOWN")
        work = self.work.get(driver_id)
        if state == "RUNNING" and self.obeys_control and work is not None and \
                RunDir(work).control_state() == "stop":
            state = self.drivers[driver_id] = "FINISHED"
        return DriverStatus(driver_id, state, WORKER.worker_id, "10.0.0.7:7078")

    def kill(self, driver_id: str) -> None:
        self._check()
        self.kills.append(driver_id)
        self.drivers[driver_id] = "KILLED"

    def view(self, url: str) -> MasterView:
        if self.down:
            return MasterView(error="cannot read the master's state: refused")
        return MasterView(workers=(WORKER,), drivers={
            d: Driver(d, s, WORKER.worker_id, 1, 1024) for d, s in self.drivers.items()},
            read_at=0.0)

    def _check(self) -> None:
        if self.down:
            raise RestError("cannot reach the master's REST server (refused)")


def config(tmp_path: Path, **settings: Any) -> NimbusConfig:
    return load_config(env={}, flags={"data_dir": str(tmp_path / "data"),
                                      "spark_master": "spark://fake:7077",
                                      "deploy_mode": "cluster", **settings})


def launcher(cfg: NimbusConfig, master: FakeMaster) -> ClusterLauncher:
    return ClusterLauncher(cfg, rest=master,  # type: ignore[arg-type]
                           watch=MasterWatch("x", max_age=0.0, reader=master.view),
                           poll_secs=0.01, kill_wait=0.2)


def spec(cfg: NimbusConfig, topology_id: str = "wc-1-1", **changes: Any) -> LaunchSpec:
    topology = wordcount()
    conf = {"topology.name": "wc"}
    plan = check_topology(topology, conf, None)
    work = cfg.data_dir / "topologies" / topology_id
    code = cfg.data_dir / "inbox" / f"{topology_id}.zip"
    code.parent.mkdir(parents=True, exist_ok=True)
    code.write_bytes(make_zip())
    fields: dict[str, Any] = dict(
        topology_id=topology_id, name="wc", topology=topology, conf=conf,
        code_path=code, work_dir=work, num_workers=plan.num_workers,
        executors=plan.executors, tasks=plan.tasks, active=True, plan=plan)
    fields.update(changes)
    return LaunchSpec(**fields)


def test_a_launch_submits_spark_submit_of_the_runner_with_the_work_directory(
        tmp_path: Path) -> None:
    cfg = config(tmp_path)
    master = FakeMaster()
    s = spec(cfg)
    launcher(cfg, master).launch(s)
    (request,) = master.requests
    args = request["appArgs"]
    assert args[:2] == ["--master", "spark://fake:7077"]
    assert args[-4:] == ["--workdir", str(s.work_dir), "--cluster"][-4:] or \
        args[-3:] == ["--workdir", str(s.work_dir), "--cluster"]
    assert request["sparkProperties"]["spark.driver.supervise"] == "true"
    props = (s.work_dir / "spark.properties").read_text()
    # The driver binds to its worker's address, not this host's loopback.
    assert "spark.driver.host" not in props and "spark.cores.max" in props
    assert json.loads((s.work_dir / "supervision.json").read_text())["max_restarts"] \
        == cfg.max_restarts
    record = json.loads((s.work_dir / "launch.json").read_text())
    assert record["mode"] == "cluster" and record["driver_id"] == "driver-20261128000000-0000"


def test_a_second_launch_adopts_the_running_driver_and_never_submits_another(
        tmp_path: Path) -> None:
    cfg = config(tmp_path)
    master = FakeMaster()
    s = spec(cfg)
    launcher(cfg, master).launch(s)
    # A restarted daemon (a new launcher reading the same directory).
    again = launcher(cfg, master)
    again.launch(spec(cfg, active=False))
    assert len(master.requests) == 1
    assert RunDir(s.work_dir).control_state() == "paused"


def test_when_the_master_cannot_answer_no_driver_is_submitted(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    master = FakeMaster()
    launcher(cfg, master).launch(spec(cfg))
    master.down = True
    restarted = launcher(cfg, master)
    with pytest.raises(LauncherError, match="none is submitted until the master answers"):
        restarted.launch(spec(cfg))
    status = restarted.status("wc-1-1")
    assert status.state == "starting" and "cannot be read" in status.detail
    master.down = False
    restarted.launch(spec(cfg))
    assert len(master.requests) == 1
    restarted.close()


def test_a_driver_gone_while_nobody_watched_is_submitted_again_unless_it_ended_well(
        tmp_path: Path) -> None:
    cfg = config(tmp_path)
    master = FakeMaster()
    s = spec(cfg)
    first = launcher(cfg, master)
    first.launch(s)
    master.drivers["driver-20261128000000-0000"] = "FAILED"
    launcher(cfg, master).launch(s)
    assert len(master.requests) == 2
    # One that stopped (its status says so) is not started again.
    master.drivers["driver-20261128000000-0001"] = "FINISHED"
    RunDir(s.work_dir).write_status(RunState(state="stopped", pid=1, updated_at=1.0,
                                             started_at=1.0))
    launcher(cfg, master).launch(s)
    assert len(master.requests) == 2


def test_stop_asks_through_control_and_kills_only_a_driver_that_does_not_obey(
        tmp_path: Path) -> None:
    cfg = config(tmp_path)
    master = FakeMaster()
    one = launcher(cfg, master)
    one.launch(spec(cfg))
    one.stop("wc-1-1", grace=0.1)
    assert master.kills == []
    assert master.drivers["driver-20261128000000-0000"] == "FINISHED"
    master.obeys_control = False
    two = launcher(cfg, master)
    two.launch(spec(cfg, "wc-2-2"))
    two.stop("wc-2-2", grace=0.05)
    assert master.kills == ["driver-20261128000000-0001"]
    assert two.status("wc-2-2").state == "stopped"


def test_rebalance_stops_the_driver_and_submits_one_with_the_new_parallelism(
        tmp_path: Path) -> None:
    cfg = config(tmp_path)
    master = FakeMaster()
    one = launcher(cfg, master)
    one.launch(spec(cfg))
    plan = spec(cfg).plan
    assert plan is not None
    wider = spec(cfg, executors={**plan.executors, "count": 4})
    one.rebalance(wider)
    assert len(master.requests) == 2
    assert master.drivers["driver-20261128000000-0000"] == "FINISHED"
    assert json.loads((wider.work_dir / "spec.json").read_text())
    assert "spark.cores.max=4" in (wider.work_dir / "spark.properties").read_text()


def test_the_status_says_what_the_master_and_the_drivers_files_say(
        tmp_path: Path) -> None:
    cfg = config(tmp_path)
    master = FakeMaster()
    one = launcher(cfg, master)
    s = spec(cfg)
    one.launch(s)
    status = one.status("wc-1-1")
    assert status.state == "starting" and "driver driver-20261128000000-0000 on " \
        "10.0.0.7" in status.detail and status.host == "10.0.0.7"
    RunDir(s.work_dir).write_status(RunState(state="running", pid=1, updated_at=1.0,
                                             started_at=1.0, batch_id=3))
    status = one.status("wc-1-1")
    assert status.state == "running" and status.detail.startswith("running: batch 3")
    assert status.batches == 4
    master.drivers["driver-20261128000000-0000"] = "RELAUNCHING"
    status = one.status("wc-1-1")
    assert status.state == "failed" and status.sched_status == \
        "relaunching after a failure"
    master.drivers["driver-20261128000000-0000"] = "KILLED"
    status = one.status("wc-1-1")
    assert status.state == "failed" and "not by nimbus-thrift" in status.detail
    master.drivers["driver-20261128000000-0000"] = "ERROR"
    status = one.status("wc-1-1")
    assert "its worker's log: http://10.0.0.7:8081/logPage/?driverId=driver-" \
        "20261128000000-0000&logType=stdout" in status.detail
    # Where each driver runs, for getClusterInfo's supervisors.
    master.drivers["driver-20261128000000-0000"] = "RUNNING"
    (node,) = one.nodes()
    assert node.host == "10.0.0.7" and node.topologies == ("wc-1-1",)


def test_capacity_is_checked_against_the_alive_workers(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    one = launcher(cfg, FakeMaster())
    one.check_capacity({"spark.driver.memory": "2g"}, 2, 1)
    with pytest.raises(ValueError, match="no worker has room for the driver"):
        one.check_capacity({"spark.driver.memory": "9g"}, 2, 1)
    assert one.memory_request({"spark.driver.memory": "9g"}) == 0
    with pytest.raises(ValueError):
        one.memory_request({"spark.executor.memory": "lots"})


def test_a_driver_the_master_relaunched_under_a_new_id_is_followed_not_doubled(
        tmp_path: Path) -> None:
    cfg = config(tmp_path)
    master = FakeMaster()
    s = spec(cfg)
    launcher(cfg, master).launch(s)
    first = "driver-20261128000000-0000"
    # The master relaunched it (its worker was lost): the old id says RELAUNCHING
    # until the new driver announces itself in its attempts.
    master.drivers[first] = "RELAUNCHING"
    restarted = launcher(cfg, master)
    restarted.launch(s)
    assert len(master.requests) == 1, "a relaunching driver counts as running"
    relaunched = "driver-20261128000100-0001"
    master.drivers[relaunched] = "RUNNING"
    master.work[relaunched] = s.work_dir
    book = AttemptBook()
    book.start(Attempt(attempt=1, driver_id=first, host="a", pid=1, started_at=1.0))
    book.start(Attempt(attempt=2, driver_id=relaunched, host="b", pid=2, started_at=2.0))
    write_attempts(RunDir(s.work_dir).attempts, book)
    assert restarted.status("wc-1-1").state == "starting"
    # Followed in memory by a status (a follower's too), written by the leader's calls.
    assert json.loads((s.work_dir / "launch.json").read_text())["driver_id"] == first
    restarted.stop("wc-1-1", grace=0.1)
    assert json.loads((s.work_dir / "launch.json").read_text())["driver_id"] == relaunched
    assert master.drivers[relaunched] == "FINISHED" and len(master.requests) == 1


def test_each_failed_or_lost_driver_is_an_error_and_giving_up_is_said(
        tmp_path: Path) -> None:
    cfg = config(tmp_path)
    master = FakeMaster()
    one = launcher(cfg, master)
    s = spec(cfg)
    one.launch(s)
    driver = "driver-20261128000000-0000"
    book = AttemptBook()
    book.start(Attempt(attempt=1, driver_id=driver, host="a", pid=1, started_at=1.0,
                       outcome="failed", error="ZeroDivisionError: in bolt count",
                       ended_at=5.0))
    book.start(Attempt(attempt=2, driver_id=driver, host="b", pid=2, started_at=6.0,
                       outcome="died", error="ended without a word", ended_at=9.0,
                       restarts=1))
    book.gave_up = {"driver_id": driver, "at": 10.0,
                    "error": "gave up after 1 restarts: ended without a word"}
    write_attempts(RunDir(s.work_dir).attempts, book)
    master.drivers[driver] = "FINISHED"
    status = one.status("wc-1-1")
    assert [e[1] for e in status.errors] == [
        f"driver {driver} on a: ZeroDivisionError: in bolt count",
        f"driver {driver} on b: ended without a word"]
    assert status.state == "failed" and "gave up after 1 restarts" in status.detail
