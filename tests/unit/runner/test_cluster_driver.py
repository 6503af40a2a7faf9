"""Fakes tier: a cluster-mode driver's attempt (runner/cluster_driver.py) with a fake
clock, sleep and topology: attempts.json, the back-off and what it says meanwhile,
giving up, the exit codes, and a driver superseded by another."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pytest

from nimbus_thrift.runner import attempts as at
from nimbus_thrift.runner.attempts import (Attempt, AttemptBook, Supervision,
                                           read_attempts, write_attempts,
                                           write_supervision)
from nimbus_thrift.runner.claim import Claim, DriverFence, read_claim, write_claim
from nimbus_thrift.runner.cluster_driver import ClusterDriver, Identity, banner_line
from nimbus_thrift.runner.driver import EXIT_FAILED, EXIT_OK, Status, _StopSignal
from nimbus_thrift.runner.rundir import RunDir, RunState

ME = Identity("driver-20261128015434-0001", "worker-a", 4242)


@dataclass
class Clock:
    """Epoch seconds that move only when the driver sleeps (or a test says)."""

    now: float = 1000.0
    slept: list[float] = field(default_factory=list)
    on_sleep: Callable[[], None] | None = None

    def __call__(self) -> float:
        return self.now

    def sleep(self, secs: float) -> None:
        self.slept.append(secs)
        self.now += secs
        if self.on_sleep is not None:
            self.on_sleep()


class Topology:
    """A fake serve_cold: runs for ``runs`` seconds, then ends in ``state``."""

    def __init__(self, clock: Clock, state: str = "stopped", error: str = "",
                 runs: float = 10.0, during: Callable[..., None] | None = None):
        self.clock, self.state, self.error, self.runs = clock, state, error, runs
        self.during = during
        self.calls: list[tuple[Status, DriverFence]] = []

    def __call__(self, run_dir: RunDir, status: Status, stop: Any,
                 fence: DriverFence) -> int:
        self.calls.append((status, fence))
        status.write(state="running", app_id="app-1")
        self.clock.now += self.runs
        if self.during is not None:
            self.during(run_dir, status, fence)
        if self.state == "failed":
            status.write(state="failed", error=self.error)
            return EXIT_FAILED
        status.write(state=self.state)
        return EXIT_OK


def attempt(run_dir: RunDir, clock: Clock, topology: Topology, me: Identity = ME) -> int:
    stop = _StopSignal()
    return ClusterDriver(run_dir, me, stop, clock=clock, sleep=clock.sleep,
                         serve=topology).run(logs=False)


@pytest.fixture
def run_dir(tmp_path: Path) -> RunDir:
    return RunDir(tmp_path)


def status_of(run_dir: RunDir) -> RunState:
    status = run_dir.read_status()
    assert status is not None
    return status


def test_a_first_attempt_takes_the_claim_runs_at_once_and_records_its_end(run_dir) -> None:
    clock = Clock()
    topology = Topology(clock, "finished")
    assert attempt(run_dir, clock, topology) == EXIT_OK
    assert clock.slept == [] and len(topology.calls) == 1
    claim = read_claim(run_dir.claim)
    assert (claim.attempt, claim.driver_id, claim.host, claim.pid) == (
        1, ME.driver_id, "worker-a", 4242)
    assert topology.calls[0][1].fence.token == claim.token
    book = read_attempts(run_dir.attempts)
    assert book.count == 1 and book.gave_up is None
    [record] = book.attempts
    assert (record.outcome, record.restarts, record.claimed_at, record.ended_at) == (
        at.FINISHED, 0, 1000.0, 1010.0)
    assert status_of(run_dir).state == "finished"


def test_a_failure_with_restarts_left_exits_1_for_the_master(run_dir) -> None:
    clock = Clock()
    failing = Topology(clock, "failed", "ValueError: x")
    assert attempt(run_dir, clock, failing) == EXIT_FAILED
    status = status_of(run_dir)
    assert (status.state, status.error, status.relaunch) == (
        "failed", "ValueError: x", True)
    [record] = read_attempts(run_dir.attempts).attempts
    assert (record.outcome, record.error) == (at.FAILED, "ValueError: x")


def test_a_relaunch_waits_its_backoff_saying_so_and_obeys_a_stop(run_dir) -> None:
    clock = Clock()
    attempt(run_dir, clock, Topology(clock, "failed", "E: 1"))
    seen: list[RunState] = []
    clock.on_sleep = lambda: seen.append(status_of(run_dir))
    clock.slept.clear()
    topology = Topology(clock, "failed", "E: 2")
    assert attempt(run_dir, clock, topology) == EXIT_FAILED
    assert sum(clock.slept) == 5.0 and max(clock.slept) <= 0.5   # polls while it waits
    assert {(s.state, s.restarts, s.relaunch_at) for s in seen} == {
        ("starting", 1, 1010.0 + 5.0)}
    assert status_of(run_dir).relaunch_at == 0.0        # cleared once Spark starts
    # The third attempt waits 20 s; a stop in its wait ends it (no Spark, exit 0).
    clock.slept.clear()
    clock.on_sleep = lambda: run_dir.set_control("stop") if sum(clock.slept) >= 3 else None
    third = Topology(clock)
    assert attempt(run_dir, clock, third) == EXIT_OK
    assert third.calls == [] and sum(clock.slept) == pytest.approx(3.0)
    assert status_of(run_dir).state == "stopped"
    book = read_attempts(run_dir.attempts)
    assert [(r.attempt, r.outcome, r.restarts) for r in book.attempts] == [
        (1, at.FAILED, 0), (2, at.FAILED, 1), (3, at.STOPPED, 2)]


def test_the_last_allowed_failure_gives_up_itself_and_exits_0(run_dir) -> None:
    write_supervision(run_dir.supervision, Supervision(max_restarts=2, backoff_secs=1))
    clock = Clock()
    codes = [attempt(run_dir, clock, Topology(clock, "failed", f"E: {n}"))
             for n in range(3)]
    assert codes == [EXIT_FAILED, EXIT_FAILED, EXIT_OK]
    status = status_of(run_dir)
    assert (status.state, status.relaunch, status.restarts) == ("failed", False, 2)
    assert status.error == "gave up after 2 restarts: E: 2"
    book = read_attempts(run_dir.attempts)
    assert book.gave_up is not None and book.gave_up["error"] == status.error


def test_without_restart_failed_a_failure_is_final_and_says_only_itself(run_dir) -> None:
    write_supervision(run_dir.supervision, Supervision(restart_failed=False))
    clock = Clock()
    assert attempt(run_dir, clock, Topology(clock, "failed", "E: once")) == EXIT_OK
    status = status_of(run_dir)
    assert (status.error, status.relaunch) == ("E: once", False)


def test_dead_attempts_count_and_too_many_give_up_at_the_start(run_dir) -> None:
    write_supervision(run_dir.supervision, Supervision(max_restarts=1, submission="s"))
    clock = Clock()
    book = AttemptBook()
    book.start(Attempt(1, "driver-1-0001", "worker-b", 7, 900.0, at.FAILED, "E: first",
                       submission="s", claimed_at=901.0, ended_at=905.0))
    book.start(Attempt(2, "driver-1-0002", "worker-b", 8, 910.0, restarts=1,
                       submission="s", claimed_at=915.0))  # "running": its worker died
    write_attempts(run_dir.attempts, book)
    topology = Topology(clock)
    assert attempt(run_dir, clock, topology) == EXIT_OK
    assert topology.calls == []
    status = status_of(run_dir)
    assert status.state == "failed" and status.error.startswith(
        "gave up after 1 restarts: the driver on worker-b (pid 8) ended without a word")
    book = read_attempts(run_dir.attempts)
    assert [r.outcome for r in book.attempts] == [at.FAILED, at.DIED]
    assert book.count == 2 and book.gave_up is not None


def test_an_attempt_that_ran_reset_secs_starts_the_count_again(run_dir) -> None:
    write_supervision(run_dir.supervision, Supervision(max_restarts=1, reset_secs=60))
    clock = Clock()
    assert attempt(run_dir, clock, Topology(clock, "failed", "E")) == EXIT_FAILED
    assert attempt(run_dir, clock, Topology(clock, "failed", "E", runs=61)) == EXIT_FAILED
    assert status_of(run_dir).relaunch


def test_a_new_submission_starts_at_no_failures(run_dir) -> None:
    write_supervision(run_dir.supervision, Supervision(max_restarts=0))
    clock = Clock()
    assert attempt(run_dir, clock, Topology(clock, "failed", "E")) == EXIT_OK   # gave up
    # The master's relaunch (a new driver id, the same submission) gives up at once...
    relaunched = Identity("driver-20261128020000-0002", "worker-c", 5)
    topology = Topology(clock, "stopped")
    assert attempt(run_dir, clock, topology, relaunched) == EXIT_OK
    assert topology.calls == []
    # ...a new submission by the daemon (supervision.json written again) runs.
    write_supervision(run_dir.supervision, Supervision(max_restarts=0))
    assert attempt(run_dir, clock, topology, relaunched) == EXIT_OK
    assert clock.slept == [] and len(topology.calls) == 1
    book = read_attempts(run_dir.attempts)
    assert book.gave_up is None and [r.outcome for r in book.attempts] == [
        at.FAILED, at.STOPPED]


def test_a_superseded_driver_stops_and_writes_nothing_more(run_dir, capsys) -> None:
    clock = Clock()
    theirs: dict[str, Any] = {}

    def taken_over(rd: RunDir, status: Status, fence: DriverFence) -> None:
        # The master relaunched this driver elsewhere: the new one records itself,
        # takes the claim, and writes its status.
        book = read_attempts(rd.attempts)
        book.mark_died(clock())
        book.start(Attempt(2, "driver-1-0002", "worker-b", 99, clock(), restarts=1))
        write_attempts(rd.attempts, book)
        write_claim(rd.claim, Claim("theirs", 2, "driver-1-0002", "worker-b", 99,
                                    clock()))
        theirs["book"] = rd.attempts.read_bytes()
        Status(rd).write(state="starting")
        theirs["status"] = rd.status.read_bytes()
        assert not fence.poll()             # the driver's loop: stop at once

    # The fake then writes a final status, as the real loop would not: it is dropped.
    assert attempt(run_dir, clock, Topology(clock, "failed", "E", during=taken_over)) == \
        EXIT_OK
    assert run_dir.status.read_bytes() == theirs["status"]
    assert run_dir.attempts.read_bytes() == theirs["book"]
    assert "superseded: driver driver-1-0002 on worker-b (pid 99, attempt 2) took the " \
           "claim" in capsys.readouterr().err


def test_a_withdrawn_claim_ends_the_record_as_superseded(run_dir) -> None:
    clock = Clock()

    def withdrawn(rd: RunDir, status: Status, fence: DriverFence) -> None:
        rd.claim.unlink()
        assert not fence.poll()

    assert attempt(run_dir, clock, Topology(clock, during=withdrawn)) == EXIT_OK
    [record] = read_attempts(run_dir.attempts).attempts
    assert record.outcome == at.SUPERSEDED


def test_the_banner_is_the_daemons() -> None:
    line = banner_line("attempt 3", ME, 0.0)
    assert line == ("--- nimbus-thrift cluster attempt 3 of driver "
                    "driver-20261128015434-0001 on host worker-a (pid 4242) at "
                    "1970-01-01T00:00:00+00:00")
    from nimbus_thrift.nimbus.spark.status import BANNER
    assert line.startswith(BANNER)


def test_a_work_dir_it_cannot_write_fails_no_faster_than_the_backoff(run_dir,
                                                                     monkeypatch) -> None:
    from nimbus_thrift.runner import cluster_driver

    def full(path: Path, book: AttemptBook) -> None:
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(cluster_driver, "write_attempts", full)
    clock = Clock()
    topology = Topology(clock)
    assert attempt(run_dir, clock, topology) == EXIT_FAILED
    assert topology.calls == [] and sum(clock.slept) == 5.0     # the first back-off
