"""HA mode with drivers on the cluster (issue 28 with issue 29): two nimbus daemons on
a real ZooKeeper, a real standalone master with two workers, the word count. The
follower reports the topology as the leader does (its status comes from the shared
directory and the master); the leader SIGKILLed, the new leader adopts the running
driver by its id: one driver, never submitted again, the counts never stop and end
exact."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import pytest

from nimbus_thrift.client import NimbusClient
from support.daemon_process import DaemonProcess
from support.polling import wait_for_value
from support.spark_cluster import StandaloneCluster
from support.spark_daemon import FAST_JVM_ENV, SPARK_TIMEOUT
from support.wordcounts import counts, expected_counts, top_count
from test_ha_kill import ha_env, leader_of

pytestmark = pytest.mark.spark

WORDCOUNT = Path(__file__).resolve().parents[2] / "examples" / "wordcount.py"
#: Sentences per spout task: about 30 s of them at 300/s, so the failover comes while
#: they flow and the final counts are known exactly.
PER_TASK = 9000


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[StandaloneCluster]:
    with StandaloneCluster(tmp_path / "cluster", cores=3, memory="3g", workers=2,
                           rest=True, worker_timeout=20) as running:
        yield running


def active_drivers(cluster: StandaloneCluster) -> list[str]:
    return [d["id"] for d in cluster.state().get("activedrivers") or []]


def sched_status(port: int, topology_id: str) -> str:
    with NimbusClient("127.0.0.1", port, timeout=30) as client:
        return str(client.getTopologyInfo(topology_id).sched_status)


def test_the_new_leader_adopts_the_running_driver_after_the_leaders_sigkill(
        zookeeper: Any, tmp_path: Path, cluster: StandaloneCluster) -> None:
    shared, db = tmp_path / "shared", tmp_path / "wc.sqlite"
    env = {**ha_env(zookeeper, zookeeper.root(), shared), **FAST_JVM_ENV,
           "NIMBUS_THRIFT_SPARK_MASTER_UI": cluster.ui_url,
           "NIMBUS_THRIFT_SPARK_MASTER_REST": cluster.rest_url,
           "NIMBUS_THRIFT_STANDBY_DRIVERS": "0"}
    flags = ("--launcher", "spark", "--spark-master", cluster.url,
             "--deploy-mode", "cluster")
    a = DaemonProcess(tmp_path / "a", *flags, env=env)
    daemons = [a]
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
        record = shared / "topologies" / topology_id / "launch.json"
        driver_id = json.loads(record.read_text())["driver_id"]
        assert active_drivers(cluster) == [driver_id]
        # The follower tells the truth about it: the shared directory and the master.
        wait_for_value(lambda: sched_status(b.port, topology_id) == "running",
                       "the follower to report it running", timeout=30)

        a.sigkill()
        wait_for_value(lambda: leader_of(b.port) == b.port, "b leading", timeout=60)
        seen = top_count(db)
        wait_for_value(lambda: top_count(db) > seen, "counts to grow after the failover",
                       timeout=120)
        wait_for_value(lambda: sched_status(b.port, topology_id) == "running",
                       "the new leader to report it running", timeout=60)
        # Adopted, not started again: the same driver, one submission in all, and the
        # counts end exact.
        assert active_drivers(cluster) == [driver_id]
        assert json.loads(record.read_text())["submissions"] == 1
        expected = expected_counts(PER_TASK)
        wait_for_value(lambda: counts(db) == expected, "the exact final counts",
                       SPARK_TIMEOUT)
        assert active_drivers(cluster) == [driver_id]
        with NimbusClient("127.0.0.1", b.port, timeout=60) as client:
            client.killTopologyWithOpts("wordcount", client.idl.KillOptions(wait_secs=0))
            wait_for_value(lambda: not client.getClusterInfo().topologies,
                           "the topology's removal", timeout=120)
        assert active_drivers(cluster) == []
    finally:
        for d in daemons:
            if d.proc.poll() is None:
                d.sigterm()
        for driver in active_drivers(cluster):
            import urllib.request
            urllib.request.urlopen(urllib.request.Request(
                f"{cluster.rest_url}/v1/submissions/kill/{driver}", method="POST",
                data=b""), timeout=10).close()
