"""Processes tier (no Spark): a cluster-mode driver's own logs and exit codes, in real
processes with real file descriptors: what the driver, its child processes and
Python's logging write lands in WORKDIR/logs after the banner the daemon looks for;
the exits a supervising master must not relaunch are 0; SIGTERM during a back-off."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nimbus_thrift
from nimbus_thrift.nimbus.spark.status import launch_stderr
from nimbus_thrift.runner import driver
from nimbus_thrift.runner.attempts import (FAILED, Attempt, AttemptBook, Supervision,
                                           read_attempts, write_attempts,
                                           write_supervision)
from nimbus_thrift.runner.cluster_driver import LOG_ROTATE_BYTES
from nimbus_thrift.runner.rundir import RunDir

PACKAGE_ROOT = Path(nimbus_thrift.__file__).resolve().parent.parent
SPARK_MAIN = PACKAGE_ROOT / "nimbus_thrift" / "runner" / "spark_main.py"
#: A process of ours starts and writes in well under a second; this is for a busy machine.
DEADLINE_S = 60.0

WRITER = """
import logging, os, sys
from pathlib import Path
from nimbus_thrift.runner.cluster_driver import redirect_output
print("before: stays where it was", flush=True)
redirect_output(Path(sys.argv[1]), sys.argv[2])
print("python stdout")
sys.stderr.write("python stderr\\n")
logging.basicConfig()
logging.getLogger("topology").warning("a warning")
os.system("echo child stdout; echo child stderr >&2")
"""


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(PACKAGE_ROOT)}


def write_logs(logs: Path, banner: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WRITER, str(logs), banner], env=env(),
                          capture_output=True, text=True, timeout=DEADLINE_S, check=True)


def test_fds_1_and_2_and_a_childs_go_to_the_logs_after_the_banner(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    first = write_logs(logs, "--- nimbus-thrift cluster attempt 1 of driver d")
    assert first.stdout == "before: stays where it was\n" and first.stderr == ""
    write_logs(logs, "--- nimbus-thrift cluster attempt 2 of driver d")
    for name, launch in (("stdout", ["child stdout", "python stdout"]),
                         ("stderr", ["WARNING:topology:a warning", "child stderr",
                                     "python stderr"])):
        lines = (logs / name).read_text().splitlines()
        n = len(launch) + 1
        assert [lines[0], lines[n]] == ["--- nimbus-thrift cluster attempt 1 of driver d",
                                        "--- nimbus-thrift cluster attempt 2 of driver d"]
        # (In the order Python's buffers let them out: PYTHONUNBUFFERED or not.)
        assert sorted(lines[1:n]) == sorted(lines[n + 1:]) == launch, lines
    # The daemon reads the lines after the last banner as this launch's.
    assert sorted(launch_stderr(logs / "stderr")) == launch


def test_logs_past_the_limit_are_renamed_first(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    with open(logs / "stderr", "wb") as big:
        big.truncate(LOG_ROTATE_BYTES + 1)          # sparse: no 50 MiB written
    (logs / "stdout").write_text("small\n")
    write_logs(logs, "--- nimbus-thrift cluster attempt 9")
    assert (logs / "stderr.1").stat().st_size == LOG_ROTATE_BYTES + 1
    assert (logs / "stderr").read_text().startswith("--- nimbus-thrift cluster attempt 9\n")
    assert not (logs / "stdout.1").exists()
    assert (logs / "stdout").read_text().startswith("small\n--- nimbus-thrift")


def spark_main(*args: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(SPARK_MAIN), *args], env=env(), cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def work_dir(tmp_path: Path) -> RunDir:
    run_dir = RunDir(tmp_path / "work")
    run_dir.root.mkdir()
    run_dir.spec.write_text("{}")           # never read on the paths tested here
    return run_dir


def test_usage_errors_exit_0_so_that_no_master_relaunches_them(tmp_path: Path) -> None:
    for args in (["--workdir", str(tmp_path / "gone"), "--cluster"],
                 ["--workdir", str(tmp_path), "--cluster", "--standby", "1:2"]):
        proc = spark_main(*args, cwd=tmp_path)
        out, err = proc.communicate(timeout=DEADLINE_S)
        assert proc.returncode == 0, err
        assert err.startswith("spark_main: ")
    assert driver.main(["--workdir", str(tmp_path), "--cluster"]) == driver.EXIT_USAGE


def test_a_relaunch_past_max_restarts_gives_up_with_exit_0(tmp_path: Path) -> None:
    run_dir = work_dir(tmp_path)
    write_supervision(run_dir.supervision, Supervision(max_restarts=0, submission="s"))
    book = AttemptBook()
    book.start(Attempt(1, "driver-1-0001", "w", 5, time.time() - 60, FAILED,
                       "ValueError: boom", submission="s", claimed_at=time.time() - 59,
                       ended_at=time.time() - 50))
    write_attempts(run_dir.attempts, book)
    cwd = tmp_path / "driver-1-0002"            # the worker's directory of the driver
    cwd.mkdir()
    proc = spark_main("--workdir", str(run_dir.root), "--cluster", cwd=cwd)
    out, err = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 0 and (out, err) == ("", "")
    status = run_dir.read_status()
    assert status is not None and status.state == "failed"
    assert status.error == "gave up after 0 restarts: ValueError: boom"
    stderr = (run_dir.logs / "stderr").read_text()
    assert stderr.startswith("--- nimbus-thrift cluster give-up of driver "
                             "driver-1-0002 on host ")
    assert "spark_main: gave up after 0 restarts: ValueError: boom" in stderr
    assert read_attempts(run_dir.attempts).gave_up is not None


def test_sigterm_in_a_backoff_stops_the_driver_before_spark(tmp_path: Path) -> None:
    run_dir = work_dir(tmp_path)
    policy = Supervision(backoff_secs=600, backoff_max_secs=600, submission="s")
    write_supervision(run_dir.supervision, policy)
    book = AttemptBook()
    book.start(Attempt(1, "", "w", 5, time.time() - 60, FAILED, "E: x", submission="s",
                       claimed_at=time.time() - 59, ended_at=time.time() - 50))
    write_attempts(run_dir.attempts, book)
    proc = spark_main("--workdir", str(run_dir.root), "--cluster", cwd=tmp_path)
    try:
        deadline = time.monotonic() + DEADLINE_S
        while True:
            status = run_dir.read_status()
            if status is not None and status.state == "starting":
                break
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.02)                # polling a file, with a deadline
        assert status.restarts == 1 and status.relaunch_at > time.time() + 500
        os.kill(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=DEADLINE_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, err
    status = run_dir.read_status()
    assert status is not None and status.state == "stopped"
    assert [r.outcome for r in read_attempts(run_dir.attempts).attempts] == [
        FAILED, "stopped"]
    assert not run_dir.claim.exists()
