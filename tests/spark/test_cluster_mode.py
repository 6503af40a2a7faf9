"""Cluster deploy mode through the whole product: a real standalone master with its
REST server on and two real workers (started from the PySpark installation), the
nimbus daemon as a child process, and the word count, whose sink's counts are known
exactly for a finite spout.

What is shown: the driver runs on a worker (the master lists it; no JVM under the
daemon); the daemon SIGKILLed, the counts keep growing and the restarted daemon adopts
the driver (one driver, the same id); the worker running the driver SIGKILLed with
everything it started, the master relaunches the driver on the other worker and the
counts still end exact; a kill ends the driver through the master; a topology the
workers cannot hold is refused at submit with a sentence.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator

import pytest

from nimbus_thrift.nimbus.spark.proctree import proc_cmdline
from support.daemon_process import DaemonProcess
from support.spark_cluster import StandaloneCluster
from support.wordcounts import counts, expected_counts
from support.spark_daemon import (FAST_JVM_ENV, SPARK_TIMEOUT, SparkDaemons, client_of,
                                  wait_until)

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
WORDCOUNT = ROOT / "examples" / "wordcount.py"
#: The master takes a worker without heartbeats for lost after this many seconds
#: (Spark's default is 60): the bulk of the time a lost worker's driver is down.
WORKER_TIMEOUT = 20


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """Two workers of 3 cores and 3 GiB: each can hold a word count's driver (1 core,
    1 GiB) and its executor (2 cores), so a lost worker's topology fits on the other."""
    with StandaloneCluster(tmp_path_factory.mktemp("cluster"), cores=3, memory="3g",
                           workers=2, rest=True,
                           worker_timeout=WORKER_TIMEOUT) as running:
        yield running


@pytest.fixture
def daemons(tmp_path: Path, cluster: StandaloneCluster,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkDaemons]:
    running = SparkDaemons(tmp_path / "data", tmp_path_factory.mktemp("cache"),
                           env={**FAST_JVM_ENV,
                                "NIMBUS_THRIFT_SPARK_MASTER_UI": cluster.ui_url,
                                "NIMBUS_THRIFT_SPARK_MASTER_REST": cluster.rest_url})
    yield running
    running.stop_all()
    # Whatever a failed test left on the cluster: no driver outlives its test.
    for driver in cluster.state().get("activedrivers") or []:
        _kill_driver(cluster, driver["id"])
    wait_until("the killed drivers to be gone", lambda: not active_drivers(cluster),
               timeout=60)


def _kill_driver(cluster: StandaloneCluster, driver_id: str) -> None:
    import urllib.request
    request = urllib.request.Request(
        f"{cluster.rest_url}/v1/submissions/kill/{driver_id}", method="POST", data=b"")
    with urllib.request.urlopen(request, timeout=10):
        pass


def start_daemon(daemons: SparkDaemons, cluster: StandaloneCluster) -> DaemonProcess:
    return daemons.start("--spark-master", cluster.url, "--deploy-mode", "cluster")


def active_drivers(cluster: StandaloneCluster) -> list[dict[str, Any]]:
    return list(cluster.state().get("activedrivers") or [])


def record(tmp_path: Path, topology_id: str) -> dict[str, Any]:
    return json.loads((tmp_path / "data" / "topologies" / topology_id /
                       "launch.json").read_text())


def java_under(pid: int) -> list[str]:
    """Command lines of the JVMs among the descendants of ``pid``."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], list(children.get(pid, []))
    while todo:
        child = todo.pop()
        todo.extend(children.get(child, []))
        line = " ".join(proc_cmdline(child) or [])
        if "java" in line:
            found.append(line)
    return found


def test_the_driver_runs_on_a_worker_outlives_the_daemons_sigkill_and_is_adopted(
        tmp_path: Path, cluster: StandaloneCluster, daemons: SparkDaemons) -> None:
    db = tmp_path / "wc.sqlite"
    d = start_daemon(daemons, cluster)
    with client_of(d) as client:
        topology_id = client.submit_topology(
            WORDCOUNT, conf={"wordcount.db": str(db), "wordcount.rate": 300},
            wait=True, timeout=SPARK_TIMEOUT)
        wait_until("the first counts", lambda: counts(db).get("the"))
        driver_id = record(tmp_path, topology_id)["driver_id"]
        drivers = active_drivers(cluster)
        assert [x["id"] for x in drivers] == [driver_id], drivers
        assert java_under(d.proc.pid) == [], "a JVM runs under the daemon"
        # Where it runs: the topology's executors name the driver's worker.
        info = client.getTopologyInfo(topology_id)
        assert {e.host for e in info.executors} == {"127.0.0.1"}
        assert driver_id in info.sched_status or info.sched_status == "running"
    d.sigkill()
    grown_from = counts(db)["the"]
    wait_until("counts to grow with no daemon", lambda: counts(db)["the"] > grown_from)
    d2 = start_daemon(daemons, cluster)
    with client_of(d2) as client:
        wait_until("the adopted topology to report running",
                   lambda: client.getTopologyInfo(topology_id).sched_status == "running")
        assert [x["id"] for x in active_drivers(cluster)] == [driver_id]
        assert record(tmp_path, topology_id)["submissions"] == 1
        grown_from = counts(db)["the"]
        wait_until("counts to grow after the adoption",
                   lambda: counts(db)["the"] > grown_from)
        client.killTopologyWithOpts("wordcount", client.idl.KillOptions(wait_secs=0))
        wait_until("the topology to be removed",
                   lambda: not client.getClusterInfo().topologies)
    assert active_drivers(cluster) == []
    done = {x["id"]: x["state"] for x in cluster.state()["completeddrivers"]}
    assert done[driver_id] in ("FINISHED", "KILLED")


def test_a_lost_workers_driver_is_relaunched_on_the_other_and_counts_end_exact(
        tmp_path: Path, cluster: StandaloneCluster, daemons: SparkDaemons) -> None:
    db = tmp_path / "wc.sqlite"
    per_task = 6000
    d = start_daemon(daemons, cluster)
    with client_of(d) as client:
        topology_id = client.submit_topology(
            WORDCOUNT, conf={"wordcount.db": str(db), "wordcount.rate": 300,
                             "wordcount.total": per_task},
            wait=True, timeout=SPARK_TIMEOUT)
        first = wait_until("the first counts", lambda: counts(db).get("the"))
        (driver,) = active_drivers(cluster)
        port = int(re.search(r"-(\d+)$", driver["worker"]).group(1))
        cluster.kill_worker_of(port)
        try:
            # Relaunched under a new id (Spark's master does so since SPARK-19900),
            # which the daemon follows through the driver's attempts.
            moved = wait_until(
                "the master to relaunch the driver on the other worker",
                lambda: [x for x in active_drivers(cluster)
                         if x["state"] == "RUNNING" and x["worker"] != driver["worker"]],
                timeout=SPARK_TIMEOUT)
            assert len(moved) == 1 and moved[0]["id"] != driver["id"]
            expected = expected_counts(per_task)
            final = wait_until("the exact final counts",
                               lambda: counts(db) == expected or None,
                               timeout=SPARK_TIMEOUT * 2)
            assert final and first < expected["the"]
            attempts = json.loads((tmp_path / "data" / "topologies" / topology_id /
                                   "attempts.json").read_text())
            assert [(a["driver_id"], a["outcome"]) for a in attempts["attempts"]][-2:] \
                == [(driver["id"], "died"), (moved[0]["id"], "running")]
            # The kill finds the relaunched driver (followed through its attempts).
            client.killTopologyWithOpts("wordcount", client.idl.KillOptions(wait_secs=0))
            wait_until("the topology to be removed",
                       lambda: not client.getClusterInfo().topologies)
            assert active_drivers(cluster) == []
        finally:
            cluster.add_worker(len(cluster.workers) + 1)


@pytest.mark.parametrize("conf, words", [
    ({"spark.driver.memory": "16g"}, "no worker has room for the driver"),
    ({"spark.cores.max": "12", "spark.executor.cores": "3"},
     "only 1 executor(s) beside it"),
])
def test_a_topology_the_workers_cannot_hold_is_refused_at_submit(
        tmp_path: Path, cluster: StandaloneCluster, daemons: SparkDaemons,
        conf: dict[str, str], words: str) -> None:
    d = start_daemon(daemons, cluster)
    with client_of(d) as client:
        with pytest.raises(client.idl.InvalidTopologyException) as refused:
            client.submit_topology(WORDCOUNT, conf={"wordcount.db": str(tmp_path / "x"),
                                                    **conf})
        assert words in refused.value.msg and "alive worker(s) have" in refused.value.msg
        assert not client.getClusterInfo().topologies
    assert active_drivers(cluster) == []
