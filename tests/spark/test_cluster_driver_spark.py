"""A cluster-mode driver (runner/cluster_driver.py) under a real spark-submit, with a
local master in place of a standalone one: started in a directory named as a worker
names a driver's, it runs a bounded word count to the end through its fence (the
spouts' offsets and acks, the foreachBatch tail), its Python output in WORKDIR/logs
after the banner, its attempt in attempts.json and its claim in driver.claim."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from nimbus_thrift.runner.attempts import FINISHED, read_attempts
from nimbus_thrift.runner.claim import read_claim
from nimbus_thrift.runner.local import spec_of
from nimbus_thrift.runner.rundir import RunDir
from support.spark import TESTS_DIR, spark_env, spark_submit_command
from topologies import wordcount

pytestmark = pytest.mark.spark

#: Generous: a first micro-batch takes 5-30 s on a busy 2-core machine.
DEADLINE_S = 240.0
DRIVER_ID = "driver-20261128015434-0001"


def test_a_cluster_driver_keeps_its_logs_attempts_and_claim_in_the_work_dir(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    run_dir = RunDir(tmp_path / "work")
    shutil.copytree(TESTS_DIR / "topologies", run_dir.code / "topologies")
    spec_of(wordcount.WordCountToFiles, {"sentences": 600, "out_dir": str(out),
                                         "topology.max.spout.pending": 200},
            {"bounded": True}).write(run_dir.spec)
    worker_dir = tmp_path / "worker" / DRIVER_ID        # where a worker runs a driver
    worker_dir.mkdir(parents=True)
    with open(worker_dir / "stderr", "wb") as jvm_log:
        proc = subprocess.Popen([*spark_submit_command(run_dir.root), "--cluster"],
                                env=spark_env(run_dir.code), stdout=jvm_log,
                                stderr=subprocess.STDOUT, cwd=worker_dir,
                                start_new_session=True)
    try:
        code = proc.wait(timeout=DEADLINE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    logs = (run_dir.logs / "stderr").read_text(errors="replace")
    assert code == 0, logs[-3000:] + (worker_dir / "stderr").read_text()[-3000:]
    status = run_dir.read_status()
    assert status is not None and status.state == "finished", status
    rows = [row for path in out.glob("*.json") for row in json.loads(path.read_text())]
    assert wordcount.final_counts(rows) == wordcount.expected_counts(600)
    # The Python driver's stderr is ours, from its banner on; the JVM's stays the worker's.
    assert logs.startswith(f"--- nimbus-thrift cluster attempt 1 of driver {DRIVER_ID} "
                           "on host "), logs[:300]
    assert (run_dir.logs / "stdout").read_text().startswith("--- nimbus-thrift cluster")
    book = read_attempts(run_dir.attempts)
    [record] = book.attempts
    assert (book.count, record.attempt, record.driver_id, record.outcome) == (
        1, 1, DRIVER_ID, FINISHED)
    assert record.claimed_at is not None and record.ended_at >= record.claimed_at
    claim = read_claim(run_dir.claim)
    assert (claim.driver_id, claim.attempt, claim.pid) == (DRIVER_ID, 1, record.pid)
