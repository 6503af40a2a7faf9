"""Standby drivers without a JVM: the pool's state table with fake processes, the
matching rule, the driver side's waiting, and the launcher handing topologies to a
fake standby (tests/support/fake_standby_submit.py: real processes and files)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from support.nimbus import make_zip, wordcount
from support.polling import wait_for_value

from nimbus_thrift.nimbus.config import ConfigError, load_config
from nimbus_thrift.nimbus.launcher import LaunchSpec
from nimbus_thrift.nimbus.spark.launcher import SparkLauncher
from nimbus_thrift.nimbus.spark.memory import memory_request
from nimbus_thrift.nimbus.spark.proctree import proc_info, session_members
from nimbus_thrift.nimbus.spark.records import Run
from nimbus_thrift.nimbus.spark.standby import (TRANSITIONS, Event, Phase, StandbyError,
                                                StandbyPool, next_phase)
from nimbus_thrift.nimbus.spark.standby_app import STANDBY_DIR, tidy_standbys
from nimbus_thrift.nimbus.spark.standby_drivers import standby_count
from nimbus_thrift.nimbus.spark.status import run_status
from nimbus_thrift.nimbus.spark.submit import (DAEMON_MODULE, WORKER_DAEMON, spark_confs,
                                               standby_key, submit_command)
from nimbus_thrift.runner.rundir import RunDir, RunState
from nimbus_thrift.runner.spec import RunSpec, from_plan
from nimbus_thrift.runner.standby import parse_parent, process_alive, wait_for_handoff
from nimbus_thrift.topology.validate import check_topology

FAKE = Path(__file__).parents[3] / "support" / "fake_standby_submit.py"
FAKE_SUBMIT = shlex.join([sys.executable, str(FAKE)])
DEADLINE = 30.0


def wait_for(predicate: Callable[[], Any], what: str, timeout: float = DEADLINE) -> Any:
    return wait_for_value(predicate, what, timeout)


# --- the state table ----------------------------------------------------------------

@pytest.mark.parametrize("phase", list(Phase))
@pytest.mark.parametrize("event", list(Event))
def test_every_transition_is_in_the_table_or_refused(phase: Phase, event: Event) -> None:
    allowed = {
        (Phase.WARMING, Event.READY): Phase.READY,
        (Phase.WARMING, Event.DIED): Phase.GONE,
        (Phase.WARMING, Event.STOP): Phase.GONE,
        (Phase.READY, Event.DIED): Phase.GONE,
        (Phase.READY, Event.STOP): Phase.GONE,
        (Phase.READY, Event.TAKE): Phase.TAKEN,
        (Phase.WARMING, Event.TAKE): Phase.TAKEN,
    }
    assert dict(TRANSITIONS) == allowed
    if (phase, event) in allowed:
        assert next_phase(phase, event) is allowed[(phase, event)]
    else:
        with pytest.raises(StandbyError, match=f"a {phase.value} standby cannot take "
                                               f"event '{event.value}'"):
            next_phase(phase, event)


# --- the pool, with fake processes ----------------------------------------------------

class FakeProcess:
    """A standby whose phase the test sets."""

    def __init__(self, key: Any, number: int):
        self.key = key
        self.number = number
        self.seen = Phase.WARMING
        self.stopped = False
        self.cleaned = False

    def probe(self) -> Phase:
        return Phase.GONE if self.stopped else self.seen

    def stop(self) -> None:
        self.stopped = True
        self.cleaned = True


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Pool:
    """A pool of fakes, what it started, and its clock."""

    def __init__(self, wanted: int = 1, *, room: Callable[[int], bool] = lambda n: True,
                 fail_spawns: int = 0):
        self.clock = Clock()
        self.started: list[FakeProcess] = []
        self.fail_spawns = fail_spawns
        self.pool: StandbyPool[FakeProcess] = StandbyPool(
            wanted, "default", self.spawn, room=room, clock=self.clock, backoff=5.0,
            replace_delay=10.0)

    def spawn(self) -> FakeProcess:
        if self.fail_spawns:
            self.fail_spawns -= 1
            raise RuntimeError("no java")
        process = FakeProcess("default", len(self.started))
        self.started.append(process)
        return process

    def at(self, now: float) -> None:
        self.clock.now = now
        self.pool.check()


def test_a_pool_keeps_its_standbys_and_none_when_it_wants_none() -> None:
    p = Pool(wanted=2)
    p.at(100)
    assert len(p.started) == 2 and p.pool.phases() == [Phase.WARMING] * 2
    p.at(101)
    assert len(p.started) == 2          # no more than wanted
    none = Pool(wanted=0)
    none.at(100)
    assert none.started == [] and none.pool.take("default") is None


def test_retarget_stops_another_keys_standbys_and_keeps_the_new_keys() -> None:
    """run_as_user: standbys are kept for the user who launched last; one of another
    user's key is stopped, never handed over."""
    p = Pool(wanted=0)
    p.at(100)
    assert p.started == []                  # nobody's yet: none
    alices: list[FakeProcess] = []

    def spawn_alices() -> FakeProcess:
        alices.append(FakeProcess(("alice",), len(alices)))
        return alices[-1]

    p.pool.retarget(("alice",), spawn_alices, 1)
    p.at(101)
    assert len(alices) == 1
    p.pool.retarget(("alice",), spawn_alices, 1)      # the same: nothing changes
    assert not alices[0].stopped
    bobs: list[FakeProcess] = []

    def spawn_bobs() -> FakeProcess:
        bobs.append(FakeProcess(("bob",), len(bobs)))
        return bobs[-1]

    p.pool.retarget(("bob",), spawn_bobs, 1)
    assert alices[0].stopped and alices[0].cleaned and p.pool.held() == 0
    assert p.pool.take(("alice",)) is None
    p.at(102)
    assert len(bobs) == 1 and len(alices) == 1
    bobs[0].seen = Phase.READY
    taken = p.pool.take(("bob",))
    assert taken is not None and taken[0] is bobs[0]


def test_take_gives_a_standby_of_the_same_key_only_a_ready_one_first() -> None:
    p = Pool(wanted=2)
    p.at(100)
    first, second = p.started
    second.seen = Phase.READY
    p.at(101)
    assert p.pool.take(("master", "other")) is None  # other settings: start cold
    assert p.pool.phases() == [Phase.WARMING, Phase.READY]     # ... and they stay
    assert p.pool.take("default") == (second, Phase.READY)
    # None ready: the one warming up is taken (it runs the topology as soon as its
    # session is up, sooner than a cold start and without a second JVM beside it).
    assert p.pool.take("default") == (first, Phase.WARMING)
    assert not first.stopped and not second.stopped
    assert p.pool.phases() == [] and p.pool.held() == 0
    assert p.pool.take("default") is None            # each is used once


def test_a_taken_standby_is_replaced_after_the_delay() -> None:
    p = Pool()
    p.at(100)
    p.started[0].seen = Phase.READY
    p.at(101)
    assert p.pool.take("default") == (p.started[0], Phase.READY)
    p.at(110.9)
    assert len(p.started) == 1          # the topology's first batch has the cores
    p.at(111)
    assert len(p.started) == 2 and p.pool.phases() == [Phase.WARMING]


def test_a_standby_that_dies_is_replaced_with_a_growing_back_off_reset_when_ready() -> None:
    p = Pool()
    p.at(100)
    starts = [100.0]
    for wait in (5, 20, 80, 300, 300):            # 5 * 4**n, at most 300
        p.started[-1].stopped = True              # it dies
        p.at(starts[-1] + 1)
        assert len(p.started) == len(starts), "replaced before its back-off"
        p.at(starts[-1] + 1 + wait - 0.01)
        assert len(p.started) == len(starts)
        p.at(starts[-1] + 1 + wait)
        assert len(p.started) == len(starts) + 1
        starts.append(starts[-1] + 1 + wait)
    p.started[-1].seen = Phase.READY
    p.at(starts[-1] + 1)
    assert p.pool.failures == 0
    p.started[-1].stopped = True
    p.at(starts[-1] + 2)
    p.at(starts[-1] + 2 + 5)                      # back to the first wait
    assert len(p.started) == len(starts) + 1


def test_a_failed_start_counts_as_a_failure() -> None:
    p = Pool(fail_spawns=1)
    p.at(100)
    assert p.started == [] and p.pool.failures == 1
    p.at(104.9)
    assert p.started == []
    p.at(105)
    assert len(p.started) == 1


def test_take_notices_a_standby_that_died_since_the_last_check() -> None:
    p = Pool()
    p.at(100)
    p.started[0].seen = Phase.READY
    p.at(101)
    p.started[0].stopped = True
    p.started[0].cleaned = False
    assert p.pool.take("default") is None          # and the launch starts cold
    assert p.pool.phases() == [] and p.pool.failures == 1
    assert p.started[0].cleaned              # its directory and zombie are cleared


def test_no_standby_starts_without_room_for_its_memory() -> None:
    held: list[int] = []
    room = {"free": False}

    def check(n: int) -> bool:
        held.append(n)
        return room["free"]

    p = Pool(wanted=2, room=check)
    p.at(100)
    assert p.started == [] and held == [0]
    room["free"] = True
    p.at(101)
    assert len(p.started) == 2 and held[-2:] == [0, 1]


def test_shed_stops_a_warming_standby_before_a_ready_one_and_close_stops_all() -> None:
    p = Pool(wanted=2)
    p.at(100)
    first, second = p.started
    first.seen = Phase.READY
    p.at(101)
    assert p.pool.shed()
    assert second.stopped and not first.stopped
    assert p.pool.phases() == [Phase.READY]
    p.pool.close()
    assert first.stopped and p.pool.phases() == [] and not p.pool.shed()
    p.at(500)
    assert len(p.started) == 2          # a closed pool starts nothing
    assert p.pool.take("default") is None


# --- the matching rule and the command line -------------------------------------------------

def _spec(conf: dict[str, Any] | None = None, par: int = 2) -> RunSpec:
    plan = check_topology(wordcount(split_par=par, count_par=par),
                          {"topology.name": "wc", **(conf or {})}, None)
    return from_plan("wc-1-1", "wc", plan)


def test_a_topology_matches_a_standby_when_its_spark_settings_are_the_same() -> None:
    default = standby_key("local[*]", _spec(par=1), 1)
    assert standby_key("local[*]", _spec({"wordcount.rate": 5}, par=3), 2) == default
    assert standby_key("local[*]", _spec({"spark.driver.memory": "2g"}), 1) != default
    assert standby_key("local[2]", _spec(), 1) != default
    # On a cluster the cores an application takes come from its parallelism.
    cluster = "spark://127.0.0.1:7077"
    assert standby_key(cluster, _spec(par=2), 1) != standby_key(cluster, _spec(par=3), 1)
    assert standby_key(cluster, _spec(par=2), 1) == standby_key(cluster, _spec(par=2), 1)


def test_a_standby_command_has_no_code_its_own_daemon_module_and_the_parent(
        tmp_path: Path) -> None:
    properties = tmp_path / "spark.properties"
    command = submit_command(["spark-submit"], "spark://h:7077", _spec(), tmp_path,
                             properties, standby="12:34")
    assert command[-4:] == ["--workdir", str(tmp_path), "--standby", "12:34"]
    assert "--py-files" not in command and "--conf" not in command
    assert command[command.index("--properties-file") + 1] == str(properties)
    confs = spark_confs("spark://h:7077", _spec(), tmp_path, 0, 1, standby="12:34")
    assert confs[DAEMON_MODULE] == WORKER_DAEMON
    assert confs["spark.executorEnv.NIMBUS_THRIFT_WORK_DIR"] == str(tmp_path / "current")
    # A cluster's applications authenticate with the cluster's secret, if any: the
    # launcher makes none up there.
    assert "spark.authenticate" not in confs
    cold = submit_command(["spark-submit"], "local[2]", _spec(), tmp_path, properties)
    assert "--standby" not in cold
    assert cold[cold.index("--py-files") + 1] == str(tmp_path / "code.zip")
    assert DAEMON_MODULE not in spark_confs("local[2]", _spec(), tmp_path, 0, 1)


@pytest.mark.parametrize("settings, count", [
    ({}, 1),
    ({"spark_master": "local[2]"}, 1),
    ({"spark_master": "spark://127.0.0.1:7077"}, 0),
    ({"spark_submit": "/opt/spark/bin/spark-submit"}, 0),
    ({"spark_master": "spark://127.0.0.1:7077", "standby_drivers": 2}, 2),
    ({"standby_drivers": 0}, 0),
])
def test_standby_drivers_default_by_master(settings: dict[str, Any], count: int) -> None:
    assert standby_count(load_config(env={}, flags=settings)) == count


def test_standby_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="standby_drivers must be at least -1, not -2"):
        load_config(env={}, flags={"standby_drivers": -2})
    with pytest.raises(ConfigError, match="standby_memory must be an integer"):
        load_config(env={"NIMBUS_THRIFT_STANDBY_MEMORY": "2g"})


# --- the driver side ------------------------------------------------------------------

def test_the_parent_is_pid_and_start_ticks() -> None:
    assert parse_parent("12:3456") == (12, 3456)
    for bad in ("12", "12:", "a:1", "-1:2", ""):
        with pytest.raises(ValueError, match=f"--standby must be PID:TICKS, not {bad!r}"):
            parse_parent(bad)
    me = proc_info(os.getpid())
    assert me is not None
    assert process_alive(os.getpid(), me.start_ticks)
    assert not process_alive(os.getpid(), me.start_ticks + 1)     # a reused pid
    assert not process_alive(2 ** 22 + 1, 0)


def test_a_waiting_standby_takes_the_hand_off_or_exits(tmp_path: Path) -> None:
    rd = RunDir(tmp_path / "sb")
    rd.root.mkdir()
    rd.handoff.write_text("not json")              # half a file is never a hand-off
    calls = {"n": 0}

    def stopped() -> bool:
        calls["n"] += 1
        if calls["n"] == 3:
            rd.write_handoff(tmp_path / "topologies" / "wc-1-1")
        return False

    assert wait_for_handoff(rd, lambda: True, stopped, poll=0.001) == \
        tmp_path / "topologies" / "wc-1-1"
    rd.handoff.unlink()
    assert wait_for_handoff(rd, lambda: True, lambda: True, poll=0.001) is None
    # The daemon is gone: checked every parent_poll seconds.
    now = {"t": 0.0}

    def clock() -> float:
        now["t"] += 0.4
        return now["t"]

    parent = iter([True, True, False])
    assert wait_for_handoff(rd, lambda: next(parent), lambda: False, poll=0.001,
                            parent_poll=1.0, clock=clock) is None


def test_the_status_says_a_topology_started_warm(tmp_path: Path) -> None:
    run = Run("wc-1-1", RunDir(tmp_path))
    run.pid, run.warm = 1, "ready"
    last = RunState(state="running", pid=1, updated_at=0, started_at=0, batch_id=3)
    cfg = load_config(env={}, flags={"data_dir": str(tmp_path)})
    status = run_status(run, True, last, cfg, time.time)
    assert status.detail.startswith("running: batch 3, ")
    assert status.detail.endswith("; started warm from a standby driver")
    run.warm = "warming"
    assert run_status(run, True, last, cfg, time.time).detail.endswith(
        "; started warm from a standby driver (taken while it warmed up)")
    run.warm = ""
    assert "warm" not in run_status(run, True, last, cfg, time.time).detail
    run.warm = "ready"
    run.load(run.record())
    assert run.warm == "ready"
    run.load({"warm": True})                  # a record of before the phase was kept
    assert run.warm == "ready"


# --- the launcher with a fake standby -------------------------------------------------

def config(tmp_path: Path, **settings: Any) -> Any:
    return load_config(env={}, flags={"data_dir": str(tmp_path / "data"),
                                      "spark_submit": FAKE_SUBMIT, "restart_failed": False,
                                      "spark_master": "local[2]", "standby_drivers": 1,
                                      **settings})


def launch_spec(cfg: Any, topology_id: str = "wc-1-1",
                conf: dict[str, Any] | None = None) -> LaunchSpec:
    conf = {"topology.name": "wc", **(conf or {})}
    topology = wordcount()
    plan = check_topology(topology, conf, None)
    work = cfg.data_dir / "topologies" / topology_id
    work.mkdir(parents=True, exist_ok=True)
    code = cfg.data_dir / "inbox" / f"{topology_id}.zip"
    code.parent.mkdir(parents=True, exist_ok=True)
    code.write_bytes(make_zip())
    return LaunchSpec(topology_id=topology_id, name="wc", topology=topology, conf=conf,
                      code_path=code, work_dir=work, num_workers=plan.num_workers,
                      executors=plan.executors, tasks=plan.tasks, active=True, plan=plan)


@pytest.fixture
def made(tmp_path: Path) -> Iterator[list[SparkLauncher]]:
    launchers: list[SparkLauncher] = []
    yield launchers
    for launcher in launchers:
        launcher.close()
        for topology_id in list(launcher._runs):
            launcher.stop(topology_id, 0)


def standby_launcher(made: list[SparkLauncher], cfg: Any, **kw: Any) -> SparkLauncher:
    kw = {"monitor_secs": 0.02, "term_grace": 1.0, "restart_backoff": 0.2,
          "standby_replace_delay": 0.0, "standbys": True, **kw}
    launcher = SparkLauncher(cfg, **kw)
    made.append(launcher)
    return launcher


def ready_standby(launcher: SparkLauncher) -> Path:
    def ready() -> Any:
        pool = launcher.standbys
        assert pool is not None
        return pool.phases() == [Phase.READY] and \
            next(p for p in (launcher.config.data_dir / STANDBY_DIR).iterdir()
                 if p.is_dir())
    return wait_for(ready, "a ready standby")


def invocations(cfg: Any, where: str) -> list[dict[str, Any]]:
    path = cfg.data_dir / where / "invocations.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] \
        if path.exists() else []


def test_a_launch_takes_the_standby_and_a_new_one_replaces_it(
        tmp_path: Path, made: list[SparkLauncher]) -> None:
    cfg = config(tmp_path)
    launcher = standby_launcher(made, cfg)
    standby = ready_standby(launcher)
    [started] = invocations(cfg, STANDBY_DIR)
    assert started["env_work_dir"] == str(standby / "current")
    spec = launch_spec(cfg)
    launcher.launch(spec)
    record = json.loads((spec.work_dir / "launch.json").read_text())
    assert record["warm"] == "ready" and record["standby_dir"] == str(standby)
    assert record["pid"] == json.loads((standby / "standby.json").read_text())["pid"]
    status = wait_for(lambda: (s := launcher.status(spec.topology_id)).state == "running"
                      and s, "the handed standby running the topology")
    assert status.detail.endswith("; started warm from a standby driver")
    [handoff] = [json.loads(line) for line in
                 (cfg.data_dir / STANDBY_DIR / "handoffs.jsonl").read_text().splitlines()]
    assert handoff == {"standby": standby.name, "work_dir": str(spec.work_dir),
                       "link": str(spec.work_dir)}
    # Its logs are the topology's now: what it wrote before, a banner, what after.
    out = (spec.work_dir / "logs" / "stdout").read_text()
    assert out.startswith("standby warming\n") and f"handed {spec.work_dir}" in out
    err = (spec.work_dir / "logs" / "stderr").read_text()
    assert f"warm: standby driver {standby.name} (pid {record['pid']}, ready)" in err
    assert not (standby / "logs" / "stdout").exists()
    # The replacement (no delay in this test) starts and gets ready in turn.
    wait_for(lambda: len(invocations(cfg, STANDBY_DIR)) == 2, "a new standby")
    ready_standby(launcher)
    # Killed like any topology; the standby's directory goes with its process.
    pid = record["pid"]
    launcher.stop(spec.topology_id, 5.0)
    assert session_members(pid, record["start_ticks"]) == []
    assert not standby.exists()
    assert json.loads((spec.work_dir / "status.json").read_text())["state"] == "stopped"


def test_a_launch_takes_a_standby_still_warming_when_none_is_ready(
        tmp_path: Path, made: list[SparkLauncher]) -> None:
    cfg = config(tmp_path)
    (cfg.data_dir / STANDBY_DIR).mkdir(parents=True)
    (cfg.data_dir / STANDBY_DIR / "gate").write_text("")      # it stays warming
    launcher = standby_launcher(made, cfg, standby_replace_delay=60.0)
    wait_for(lambda: launcher.standbys is not None and launcher.standbys.phases()
             == [Phase.WARMING], "a warming standby")
    spec = launch_spec(cfg)
    launcher.launch(spec)
    assert json.loads((spec.work_dir / "launch.json").read_text())["warm"] == "warming"
    (cfg.data_dir / STANDBY_DIR / "go-ready").write_text("")  # its warm-up ends
    status = wait_for(lambda: (s := launcher.status(spec.topology_id)).state == "running"
                      and s, "the topology running in it")
    assert status.detail.endswith("(taken while it warmed up)")
    assert invocations(cfg, "topologies") == []               # no cold start


def test_a_launch_with_other_spark_settings_starts_cold(
        tmp_path: Path, made: list[SparkLauncher]) -> None:
    cfg = config(tmp_path)
    launcher = standby_launcher(made, cfg)
    ready_standby(launcher)
    spec = launch_spec(cfg, conf={"spark.sql.shuffle.partitions": "3"})
    launcher.launch(spec)
    record = json.loads((spec.work_dir / "launch.json").read_text())
    assert not record["warm"] and "--standby" not in record["command"]
    assert launcher.standbys is not None and launcher.standbys.phases() == [Phase.READY]
    [cold] = wait_for(lambda: invocations(cfg, "topologies"), "the cold start")
    assert cold["standby"] is None and cold["env_work_dir"] == str(spec.work_dir)
    wait_for(lambda: launcher.status(spec.topology_id).state == "running", "running")
    assert "warm" not in launcher.status(spec.topology_id).detail


def test_a_standby_that_dies_is_replaced_after_its_back_off(
        tmp_path: Path, made: list[SparkLauncher]) -> None:
    cfg = config(tmp_path)
    launcher = standby_launcher(made, cfg, restart_backoff=0.5)
    first = ready_standby(launcher)
    (cfg.data_dir / STANDBY_DIR / "die").write_text("")
    wait_for(lambda: launcher.standbys is not None and launcher.standbys.failures >= 1,
             "the death noticed")
    (cfg.data_dir / STANDBY_DIR / "die").unlink()
    second = ready_standby(launcher)
    assert second != first and len(invocations(cfg, STANDBY_DIR)) >= 2
    assert not first.exists()               # the dead one's directory is cleared


def test_closing_stops_idle_standbys_and_a_new_launcher_stops_leftovers(
        tmp_path: Path, made: list[SparkLauncher]) -> None:
    cfg = config(tmp_path)
    launcher = standby_launcher(made, cfg)
    standby = ready_standby(launcher)
    pid = json.loads((standby / "standby.json").read_text())["pid"]
    launcher.close()
    assert proc_info(pid) is None or not proc_info(pid).live  # type: ignore[union-attr]
    assert not standby.exists()
    # A daemon that died: its idle standby found alive by the next one is stopped,
    # one handed to a topology is kept.
    root = cfg.data_dir / STANDBY_DIR
    idle, handed, dead = (_sleeper(root / name) for name in ("idle", "handed", "dead"))
    (root / "handed" / "handoff").write_text("{}")
    dead.kill()
    dead.wait()
    assert tidy_standbys(root) == ["idle"]
    assert idle.wait(5) == -9
    assert handed.poll() is None and (root / "handed").is_dir()
    assert not (root / "idle").exists() and not (root / "dead").exists()
    handed.kill()
    handed.wait()
    assert tidy_standbys(root) == [] and [p for p in root.iterdir() if p.is_dir()] == []


def _sleeper(directory: Path) -> subprocess.Popen[bytes]:
    directory.mkdir(parents=True)
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                               start_new_session=True)
    info = proc_info(process.pid)
    assert info is not None
    (directory / "standby.json").write_text(json.dumps(
        {"pid": process.pid, "start_ticks": info.start_ticks}))
    return process


def test_standbys_only_take_memory_topologies_leave(
        tmp_path: Path, made: list[SparkLauncher]) -> None:
    one = memory_request({})
    # Room in the budget for one application: the standby, until a topology with
    # other settings starts cold and takes its room.
    cfg = config(tmp_path, spark_memory_budget=one + 1)
    launcher = standby_launcher(made, cfg, standby_replace_delay=60.0)
    standby = ready_standby(launcher)
    spec = launch_spec(cfg, conf={"spark.sql.shuffle.partitions": "3"})
    launcher.launch(spec)
    assert launcher.standbys is not None and launcher.standbys.phases() == []
    assert not standby.exists()
    time.sleep(0.3)                       # monitor passes: none may start now
    assert launcher.standbys.phases() == []
    launcher.stop(spec.topology_id, 5.0)
    wait_for(lambda: launcher.standbys.phases(), "a standby once the room is free")
    # standby_memory caps what standbys hold whatever the budget.
    capped = config(tmp_path / "capped", standby_drivers=2, standby_memory=one)
    other = standby_launcher(made, capped)
    wait_for(lambda: other.standbys is not None and other.standbys.phases(), "one")
    time.sleep(0.3)
    assert other.standbys is not None and len(other.standbys.phases()) == 1
