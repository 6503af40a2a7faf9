"""Fakes tier: a client-mode driver with ``--fence`` (runner/driver.py main, the
daemon's HA mode): it takes driver.claim before Spark starts, and once another driver
took it, it writes no status more and exits 0. The topology is a fake serve_cold."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nimbus_thrift.runner import driver
from nimbus_thrift.runner.claim import Claim, DriverFence, read_claim, write_claim
from nimbus_thrift.runner.driver import (EXIT_FAILED, EXIT_OK, EXIT_USAGE, Status,
                                         parse_args)
from nimbus_thrift.runner.rundir import RunDir


@pytest.fixture
def run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RunDir:
    rd = RunDir(tmp_path)
    rd.spec.write_text("{}")            # read by the fake topology only (it is not)
    # main's process-wide steps: not in the test's process.
    monkeypatch.setattr(driver._StopSignal, "install", lambda self: None)
    monkeypatch.setattr(driver, "configure_logging", lambda: None)
    return rd


def another_driver(rd: RunDir) -> None:
    write_claim(rd.claim, Claim(token="theirs", attempt=0, driver_id="", host="other",
                                pid=1, at=0.0))


def test_fence_is_a_flag() -> None:
    assert parse_args(["--workdir", "w", "--fence"]).fence
    assert not parse_args(["--workdir", "w"]).fence


def test_a_fenced_driver_takes_the_claim_before_spark(
        run_dir: RunDir, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []

    def serve(rd: RunDir, status: Status, stop: Any, fence: DriverFence | None) -> int:
        seen.append((read_claim(rd.claim), fence, status.fence))
        status.write(state="stopping")
        status.write(state="stopped")
        return EXIT_OK
    monkeypatch.setattr(driver, "serve_cold", serve)
    assert driver.main(["--workdir", str(run_dir.root), "--fence"]) == EXIT_OK
    [(claim, fence, status_fence)] = seen
    assert fence is not None and status_fence is fence
    assert claim.token == fence.fence.token and claim.pid > 0 and claim.host
    status = run_dir.read_status()
    assert status is not None and status.state == "stopped"


def test_without_the_flag_no_claim(run_dir: RunDir,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []
    monkeypatch.setattr(driver, "serve_cold",
                        lambda rd, status, stop, fence: seen.append(fence) or EXIT_OK)
    assert driver.main(["--workdir", str(run_dir.root)]) == EXIT_OK
    assert seen == [None] and not run_dir.claim.exists()


def test_a_superseded_driver_writes_nothing_more_and_exits_0(
        run_dir: RunDir, monkeypatch: pytest.MonkeyPatch) -> None:
    def serve(rd: RunDir, status: Status, stop: Any, fence: DriverFence | None) -> int:
        assert fence is not None
        status.write(state="running", batch_id=3)
        another_driver(rd)                 # the new leader's driver takes it
        # What the foreachBatch sink's ClaimLost makes of the query: a failure.
        status.write(state="failed", error="ClaimLost: another one took over")
        assert fence.superseded
        status.write(state="stopped")
        status.write()
        return EXIT_FAILED
    monkeypatch.setattr(driver, "serve_cold", serve)
    assert driver.main(["--workdir", str(run_dir.root), "--fence"]) == EXIT_OK
    status = run_dir.read_status()
    assert status is not None and status.state == "running" and status.batch_id == 3
    assert read_claim(run_dir.claim).token == "theirs"


def test_a_failure_while_holding_the_claim_is_reported(
        run_dir: RunDir, monkeypatch: pytest.MonkeyPatch) -> None:
    def serve(rd: RunDir, status: Status, stop: Any, fence: DriverFence | None) -> int:
        status.write(state="failed", error="ValueError: bad")
        return EXIT_FAILED
    monkeypatch.setattr(driver, "serve_cold", serve)
    assert driver.main(["--workdir", str(run_dir.root), "--fence"]) == EXIT_FAILED
    status = run_dir.read_status()
    assert status is not None and status.state == "failed"


def test_a_standby_takes_no_fence(run_dir: RunDir) -> None:
    assert driver.main(["--workdir", str(run_dir.root), "--fence",
                        "--standby", "1:2"]) == EXIT_USAGE
    assert not run_dir.claim.exists()
