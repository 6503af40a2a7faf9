"""The spark launcher (client mode) in HA mode, against the fake spark-submit: the
drivers' fence flag, a launch record another host wrote (its status from status.json
alone, its pid never signalled, a new leader's takeover), a follower that only reads
the leader's records, a late step-down that finds the topology launched elsewhere, and
a step-down's stopped record started again by the next leader. Real processes of the
fake, no JVM, no ZooKeeper (the configuration alone says HA mode)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from launcher_parts import (Launchers, config, invocations, launch_spec, launched_pid,
                            live, state_is, wait_for)

from nimbus_thrift.nimbus.config import NimbusConfig
from nimbus_thrift.nimbus.launcher import LaunchSpec
from nimbus_thrift.nimbus.spark import proctree
from nimbus_thrift.nimbus.spark.records import this_host
from nimbus_thrift.nimbus.spark.standby_drivers import standby_count
from nimbus_thrift.runner.rundir import ReportedStats, RunDir, RunState
from nimbus_thrift.runner.spec import from_plan

OTHER = "nimbus-elsewhere"


def ha_config(tmp_path: Path, name: str = "a", **settings: Any) -> NimbusConfig:
    """One nimbus's configuration in HA mode: its own data_dir, the shared one."""
    return config(tmp_path / name, zookeeper_servers="127.0.0.1:1",
                  shared_dir=str(tmp_path / "shared"), **settings)


def ha_spec(cfg: NimbusConfig, **kw: Any) -> LaunchSpec:
    """A launch spec whose work directory is in shared_dir, as in HA mode."""
    spec = launch_spec(cfg, **kw)
    work = cfg.files_dir / "topologies" / spec.topology_id
    work.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(spec.work_dir), str(work))
    return dataclasses.replace(spec, work_dir=work)


@pytest.fixture
def victim() -> Iterator[subprocess.Popen[bytes]]:
    """A live process of this host whose pid a foreign record names: signalled, it
    would die."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                            start_new_session=True)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def signals(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Every signal the launcher sends (still sent: a test's own processes end)."""
    sent: list[tuple[int, int]] = []
    kill, killpg = os.kill, os.killpg

    def record_kill(pid: int, sig: int) -> None:
        sent.append((pid, sig))
        kill(pid, sig)

    def record_killpg(pgid: int, sig: int) -> None:
        sent.append((pgid, sig))
        killpg(pgid, sig)
    monkeypatch.setattr(proctree.os, "kill", record_kill)
    monkeypatch.setattr(proctree.os, "killpg", record_killpg)
    return sent


def foreign_record(spec: LaunchSpec, pid: int, *, host: str = OTHER, **fields: Any) -> None:
    """launch.json as a daemon on ``host`` wrote it for a driver of pid ``pid``."""
    info = proctree.proc_info(pid)
    record = {"pid": pid, "start_ticks": info.start_ticks if info else 1,
              "launched_at": time.time() - 100, "spouts": ["words"], "host": host,
              **fields}
    (spec.work_dir / "launch.json").write_text(json.dumps(record))


def driver_status(spec: LaunchSpec, state: str = "running", age: float = 0.0) -> None:
    """status.json as the driver writes it, ``age`` seconds ago."""
    now = time.time()
    RunDir(spec.work_dir).write_status(RunState(
        state=state, pid=4242, updated_at=now - age, started_at=now - 90, batch_id=7,
        batch_ms=120.0, components={"words": ReportedStats(emitted=700, rate=35.0),
                                    "count": ReportedStats(processed=650)}))


def test_drivers_take_the_fence_in_ha_mode_only(tmp_path: Path) -> None:
    plan = launch_spec(config(tmp_path)).plan
    assert plan is not None
    run_spec = from_plan("wc-1-1", "wc", plan)
    work = tmp_path / "w"
    work.mkdir()
    for cfg, fenced in ((config(tmp_path / "one"), False),
                        (ha_config(tmp_path), True),
                        (config(tmp_path / "s", shared_dir=str(tmp_path / "s2")), True)):
        launchers = Launchers(tmp_path)
        try:
            command = launchers(cfg).command(run_spec, work, 0, 1)
        finally:
            launchers.close()
        assert command[-2:] == (["--workdir", str(work), "--fence"][-2:] if fenced
                                else ["--workdir", str(work)])
        assert ("--fence" in command) is fenced


def test_no_standby_drivers_in_ha_mode(tmp_path: Path) -> None:
    assert standby_count(config(tmp_path, standby_drivers=2)) == 2
    assert standby_count(ha_config(tmp_path, standby_drivers=2)) == 0


def test_a_foreign_record_is_read_from_status_json_and_never_signalled(
        tmp_path: Path, launchers: Launchers, victim: subprocess.Popen[bytes],
        signals: list[tuple[int, int]]) -> None:
    cfg = ha_config(tmp_path)
    spec = ha_spec(cfg)
    foreign_record(spec, victim.pid)
    launcher = launchers(cfg)                   # a follower: it never launches

    driver_status(spec, age=1.0)
    status = launcher.status(spec.topology_id)
    assert status.state == "running", status.detail
    assert status.detail.startswith("running: batch 7, 35 tuples/s")
    assert status.detail.endswith(f"(on host {OTHER})")
    assert status.batches == 8 and status.last_batch_secs == pytest.approx(0.12)
    assert status.components["words"].emitted == 700
    assert status.components["count"].processed == 650
    assert status.host == OTHER and status.ui_url == ""

    record = (spec.work_dir / "launch.json").read_bytes()
    driver_status(spec, age=40.0)
    status = launcher.status(spec.topology_id)
    assert status.state == "failed"
    assert f"the Spark application on host {OTHER} stopped writing its status " \
           "(running)" in status.detail
    assert status.detail.endswith(f"(on host {OTHER}; its last status is 40 s old)")
    assert status.components["words"].emitted == 700    # its last figures
    launcher.check()                            # the monitor: no death noted here
    assert (spec.work_dir / "launch.json").read_bytes() == record

    # A leader stopping it: control says stop (read on the other host); no signal.
    launcher.stop(spec.topology_id, 0.5)
    assert RunDir(spec.work_dir).control_state() == "stop"
    assert signals == [] and victim.poll() is None


def test_takeover_of_a_foreign_record_starts_a_fenced_driver(
        tmp_path: Path, launchers: Launchers, victim: subprocess.Popen[bytes],
        signals: list[tuple[int, int]]) -> None:
    cfg = ha_config(tmp_path)
    spec = ha_spec(cfg)
    foreign_record(spec, victim.pid)
    driver_status(spec, age=0.5)                # the old driver still writes
    launcher = launchers(cfg)
    launcher.launch(spec)                       # the new leader's
    wait_for(state_is(launcher, spec, "running"), "the new driver running")
    [started] = invocations(spec)
    assert started["argv"][-1] == "--fence"
    record = json.loads((spec.work_dir / "launch.json").read_text())
    assert record["host"] == this_host() and record["pid"] == launched_pid(spec)
    assert record["last_failure"] == ""         # the old one was not a failure
    stderr = (spec.work_dir / "logs" / "stderr").read_text()
    assert "--- nimbus-thrift takeover at " in stderr
    assert victim.poll() is None
    assert all(pid != victim.pid for pid, _ in signals)


def test_takeover_of_a_stale_foreign_record_says_what_it_recovered_from(
        tmp_path: Path, launchers: Launchers, victim: subprocess.Popen[bytes]) -> None:
    cfg = ha_config(tmp_path)
    spec = ha_spec(cfg)
    foreign_record(spec, victim.pid)
    driver_status(spec, age=60.0)               # its host is gone
    launcher = launchers(cfg)
    launcher.launch(spec)
    status = wait_for(state_is(launcher, spec, "running"), "the new driver running")
    assert f"relaunched from the checkpoint after: the Spark application on host " \
           f"{OTHER} stopped writing its status (running), 60 s before" in status.detail
    assert victim.poll() is None


def test_a_follower_follows_the_leaders_record_and_never_relaunches(
        tmp_path: Path, launchers: Launchers) -> None:
    leader = launchers(ha_config(tmp_path, "a", restart_failed=True))
    follower = launchers(ha_config(tmp_path, "b", restart_failed=True))
    spec = ha_spec(leader.config)
    leader.launch(spec)
    first = launched_pid(spec)
    status = wait_for(state_is(follower, spec, "running"), "running on the follower")
    assert f"(on host" not in status.detail             # same host: its pid is seen
    leader.rebalance(spec)                              # a new driver, a new record
    second = launched_pid(spec)
    assert second != first
    wait_for(lambda: follower.status(spec.topology_id).state == "running"
             and follower._runs[spec.topology_id].pid == second,
             "the follower reading the new record")

    leader.close()                                      # its monitor stops
    record = (spec.work_dir / "launch.json").read_bytes()
    started = len(invocations(spec))
    os.killpg(second, signal.SIGKILL)
    wait_for(lambda: not live(second), "the driver gone")
    status = wait_for(state_is(follower, spec, "failed"), "failed on the follower")
    follower.check()
    assert len(invocations(spec)) == started            # no relaunch from a follower
    assert (spec.work_dir / "launch.json").read_bytes() == record
    assert status.detail.startswith("failed: ")


def test_a_late_step_down_leaves_a_relaunch_elsewhere_alone(
        tmp_path: Path, launchers: Launchers) -> None:
    cfg = ha_config(tmp_path)
    launcher = launchers(cfg)
    spec = ha_spec(cfg)
    launcher.launch(spec)
    pid = launched_pid(spec)
    wait_for(state_is(launcher, spec, "running"), "running")
    # Meanwhile a new leader on another host launched it.
    foreign_record(spec, 7, start_ticks=1, launched_at=time.time())
    elsewhere = (spec.work_dir / "launch.json").read_bytes()
    launcher.stop(spec.topology_id, 5.0)
    assert not live(pid)                            # this host's old driver went
    assert RunDir(spec.work_dir).control_state() == "active"    # the new one's
    assert (spec.work_dir / "launch.json").read_bytes() == elsewhere


@pytest.mark.parametrize("ha", [True, False])
def test_a_step_downs_stop_is_started_again_by_the_next_leader_in_ha_mode(
        tmp_path: Path, launchers: Launchers, ha: bool) -> None:
    cfg = ha_config(tmp_path) if ha else config(tmp_path)
    spec = ha_spec(cfg) if ha else launch_spec(cfg)
    old = launchers(cfg)
    old.launch(spec)
    wait_for(state_is(old, spec, "running"), "running")
    old.stop(spec.topology_id, 5.0)                  # step-down (HA) or removal
    old.close()
    new = launchers(cfg)
    new.launch(spec)
    if ha:
        wait_for(state_is(new, spec, "running"), "running under the new leader")
        assert len(invocations(spec)) == 2
    else:
        assert new.status(spec.topology_id).state == "stopped"
        assert len(invocations(spec)) == 1


def test_a_finished_bounded_run_stays_finished_in_ha_mode(
        tmp_path: Path, launchers: Launchers) -> None:
    cfg = ha_config(tmp_path)
    spec = ha_spec(cfg, behaviour={"finish_after": 2})
    old = launchers(cfg)
    old.launch(spec)
    wait_for(state_is(old, spec, "finished"), "finished")
    old.close()
    new = launchers(cfg)
    new.launch(spec)
    assert new.status(spec.topology_id).state == "finished"
    assert len(invocations(spec)) == 1
