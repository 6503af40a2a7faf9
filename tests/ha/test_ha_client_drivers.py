"""HA mode with drivers on the leader's host (client mode, the default; issue 28): two
nimbus daemons on a real ZooKeeper, --launcher spark on local[2], the word count.

The leader SIGKILLed, its driver lives on (its own session). The launch record is
made to name another host (as if the new leader ran elsewhere, where that pid means
nothing): the follower then reports the topology from status.json alone, and once it
leads it starts its own driver, which takes driver.claim; the old driver stops at its
next poll ("superseded" in its stderr), never signalled by the new leader, and the
counts go on under the new driver: one driver at any time after the claim."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from nimbus_thrift.client import NimbusClient
from nimbus_thrift.nimbus.spark.proctree import proc_info
from nimbus_thrift.runner.claim import read_claim
from support.daemon_process import DaemonProcess
from support.polling import wait_for_value
from support.spark_daemon import FAST_JVM_ENV, SPARK_TIMEOUT
from support.wordcounts import counts, expected_counts, top_count
from test_ha_cluster_drivers import WORDCOUNT, sched_status
from test_ha_kill import ha_env, leader_of

pytestmark = pytest.mark.spark

OTHER = "nimbus-elsewhere"
#: Sentences per spout task: about 50 s of them at 300/s, so the takeover comes while
#: they flow and the final counts are known exactly.
PER_TASK = 15000


def live(pid: int, ticks: int) -> bool:
    info = proc_info(pid)
    return info is not None and info.live and info.start_ticks == ticks


def executor_hosts(port: int, topology_id: str) -> set[str]:
    with NimbusClient("127.0.0.1", port, timeout=30) as client:
        return {e.host for e in client.getTopologyInfo(topology_id).executors}


def test_the_old_driver_stops_by_the_claim_once_the_new_leaders_driver_runs(
        zookeeper: Any, tmp_path: Path) -> None:
    shared, db = tmp_path / "shared", tmp_path / "wc.sqlite"
    env = {**ha_env(zookeeper, zookeeper.root(), shared), **FAST_JVM_ENV,
           "NIMBUS_THRIFT_STANDBY_DRIVERS": "0"}
    flags = ("--launcher", "spark", "--spark-master", "local[2]")
    a = DaemonProcess(tmp_path / "a", *flags, env=env)
    daemons = [a]
    old: tuple[int, int] | None = None          # the old driver's JVM: pid, start ticks
    try:
        wait_for_value(lambda: leader_of(a.port) == a.port, "a leading", timeout=30)
        b = DaemonProcess(tmp_path / "b", *flags, env=env)
        daemons.append(b)
        seeds = [f"127.0.0.1:{a.port}", f"127.0.0.1:{b.port}"]
        with NimbusClient(hosts=seeds, timeout=60, leader_wait=60) as client:
            topology_id = client.submit_topology(
                WORDCOUNT, conf={"wordcount.db": str(db), "wordcount.rate": 300,
                                 "wordcount.total": PER_TASK},
                wait=True, timeout=SPARK_TIMEOUT)
        wait_for_value(lambda: top_count(db), "the first counts", SPARK_TIMEOUT)
        work = shared / "topologies" / topology_id
        record = json.loads((work / "launch.json").read_text())
        assert record["command"][-1] == "--fence"
        old = (record["pid"], record["start_ticks"])
        first_claim = read_claim(work / "driver.claim")

        # As if a had run on another host: its pid means nothing to b.
        (work / "launch.json").write_text(json.dumps({**record, "host": OTHER}))
        wait_for_value(lambda: executor_hosts(b.port, topology_id) == {OTHER},
                       "the follower reading the record of another host", timeout=30)
        assert sched_status(b.port, topology_id) == "running"   # from status.json

        a.sigkill()
        assert live(*old)                       # the driver outlives its daemon
        wait_for_value(lambda: leader_of(b.port) == b.port, "b leading", timeout=60)
        claim = wait_for_value(
            lambda: (c := read_claim(work / "driver.claim")).token != first_claim.token
            and c, "the new driver's claim", timeout=SPARK_TIMEOUT)
        wait_for_value(lambda: not live(*old), "the old driver to stop by the claim",
                       timeout=60, every=0.05)
        stopped_after = time.time() - claim.at
        print(f"\nold driver gone {stopped_after:.2f} s after the new one took the claim")
        assert stopped_after < 30
        # The driver's Python output: in stdout (spark-submit's PythonRunner merges it).
        logs = "".join((work / "logs" / name).read_text(errors="replace")
                       for name in ("stdout", "stderr"))
        assert "spark_main: superseded: a driver on " in logs

        # One driver at a time through the takeover: the counts end exact (a second
        # driver on the same checkpoint would count batches twice or lose them).
        expected = expected_counts(PER_TASK)
        wait_for_value(lambda: counts(db) == expected, "the exact final counts",
                       timeout=SPARK_TIMEOUT)
        wait_for_value(lambda: sched_status(b.port, topology_id) == "running",
                       "the new leader reporting it running", timeout=60)
        record = json.loads((work / "launch.json").read_text())
        assert record["host"] != OTHER and record["pid"] != old[0]
        assert read_claim(work / "driver.claim").token == claim.token
        with NimbusClient("127.0.0.1", b.port, timeout=60) as client:
            client.killTopologyWithOpts("wordcount", client.idl.KillOptions(wait_secs=0))
            wait_for_value(lambda: not client.getClusterInfo().topologies,
                           "the topology's removal", timeout=120)
    finally:
        for d in daemons:
            if d.proc.poll() is None:
                d.sigterm()
        if old is not None and live(*old):      # started by the daemon a this test ran
            os.killpg(old[0], signal.SIGKILL)
