"""Topologies through the whole product: the nimbus daemon (a real process), the Spark
launcher, spark-submit and the runner, on local Spark and on a standalone cluster.

The topology is examples/wordcount.py, whose sink upserts counts into SQLite; with a
finite spout the final counts are known exactly, which is what proves a crashed and
restarted job continued from its checkpoint (state exactly once) rather than from
scratch or with a gap.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from nimbus_thrift.client.client import NimbusClient
from nimbus_thrift.nimbus.spark.proctree import proc_cmdline, session_members
from nimbus_thrift.runner.rundir import RunDir
from support.spark_cluster import StandaloneCluster
from support.wordcounts import counts, expected_counts
from support.daemon_process import DaemonProcess
from support.spark_daemon import (FAST_JVM_ENV, SPARK_TIMEOUT, SparkDaemons, client_of,
                                  wait_until)

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
WORDCOUNT = ROOT / "examples" / "wordcount.py"
CLI = [str(Path(sys.executable).with_name("nimbus-thrift"))]




def launch_record(data_dir: Path, topology_id: str) -> dict[str, Any]:
    return json.loads((data_dir / "topologies" / topology_id / "launch.json").read_text())


def session_left(record: dict[str, Any]) -> list[int]:
    return [p.pid for p in session_members(record["pid"], record["start_ticks"])]


@pytest.fixture(scope="module")
def cache_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """XDG_CACHE_HOME of the daemons: the launcher's mirror of Spark home and class
    archive are made by the first test and used by the others (not the user's)."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture
def daemon_factory(tmp_path: Path, cache_home: Path
                   ) -> Iterator[Callable[..., DaemonProcess]]:
    daemons = SparkDaemons(tmp_path / "data", cache_home, env=FAST_JVM_ENV)
    yield daemons.start
    daemons.stop_all()


def _kill_and_check_clean(client: NimbusClient, data_dir: Path, name: str,
                          topology_id: str) -> None:
    record = launch_record(data_dir, topology_id)
    client.killTopologyWithOpts(name, client.idl.KillOptions(wait_secs=0))
    wait_until("the topology to be removed",
               lambda: name not in {t.name for t in client.getClusterInfo().topologies})
    assert session_left(record) == [], "processes of the killed job are still running"
    # The row goes first, then the directory (the handler removes both, in that order).
    wait_until("its work directory to be deleted",
               lambda: not (data_dir / "topologies" / topology_id).exists(), timeout=30)


def test_wordcount_runs_pauses_resumes_survives_daemon_restart_and_dies_clean(
        tmp_path: Path, daemon_factory: Callable[..., DaemonProcess]) -> None:
    data_dir, db = tmp_path / "data", tmp_path / "wc.sqlite"
    d = daemon_factory()
    with client_of(d) as client:
        topology_id = client.submit_topology(
            WORDCOUNT, conf={"wordcount.db": str(db), "wordcount.rate": 500},
            wait=True, timeout=SPARK_TIMEOUT)
        wait_until("the first counts in SQLite", lambda: counts(db).get("the"))
        # The first batch read what the spouts had when it was planned, not nothing.
        offsets = data_dir / "topologies" / topology_id / "checkpoint" / "offsets" / "0"
        first_batch = json.loads(offsets.read_text().splitlines()[-1])
        assert len(first_batch) == 2 and min(first_batch.values()) > 0, first_batch

        info = client.getTopologyInfo(topology_id)
        assert info.sched_status == "running", info.sched_status
        assert {e.port for e in info.executors} == {0}    # no Spark UI unless asked
        components = {e.component_id for e in info.executors}
        assert components == {"sentences", "split", "count", "sink"}
        emitted = sum(e.stats.emitted[":all-time"]["default"] for e in info.executors
                      if e.component_id == "sentences" and e.stats)
        assert emitted > 0

        # Deactivated: the spouts stop; once the batch planned before the pause is done
        # (the driver says so: the status stops saying one may be running) nothing
        # changes. Activated: it goes on from the same state (counts only grow).
        # Counts that merely stood still for a while are no sign: on a loaded machine
        # that batch (all the spouts made while the one before ran) took over 3 s.
        client.deactivate("wordcount")
        wait_until("paused, no batch in flight",
                   lambda: _fully_paused(client, data_dir, topology_id))
        settled = counts(db)
        assert settled
        time.sleep(5)   # a window in which a running topology would add ~5000 sentences
        assert counts(db) == settled
        client.activate("wordcount")
        wait_until("counts to grow after activate",
                   lambda: counts(db).get("the", 0) > settled["the"])

        # A daemon restart adopts the running application: same process, still counting.
        before = launch_record(data_dir, topology_id)
    assert d.sigterm() == 0
    assert session_left(before), "stopping the daemon must not stop its topologies"
    grown_from = counts(db)["the"]
    d2 = daemon_factory()
    with client_of(d2) as client:
        info = wait_until("the adopted topology to report running",
                          lambda: (i := client.getTopologyInfo(topology_id))
                          .sched_status == "running" and i)
        assert launch_record(data_dir, topology_id)["pid"] == before["pid"]
        wait_until("counts to grow after the daemon restart",
                   lambda: counts(db).get("the", 0) > grown_from)
        _kill_and_check_clean(client, data_dir, "wordcount", topology_id)


def _fully_paused(client: NimbusClient, data_dir: Path, topology_id: str) -> bool:
    """Paused, and the driver says no batch planned before the pause still runs (its
    status.json; the launcher's sentence on the web page says the same)."""
    if client.getTopologyInfo(topology_id).sched_status != "paused":
        return False
    status = RunDir(data_dir / "topologies" / topology_id).read_status()
    return status is not None and status.state == "paused" and not status.in_flight


def test_crashed_job_restarts_from_its_checkpoint_with_exact_counts(
        tmp_path: Path, daemon_factory: Callable[..., DaemonProcess]) -> None:
    data_dir, db = tmp_path / "data", tmp_path / "wc.sqlite"
    per_task = 6000
    d = daemon_factory(env={"NIMBUS_THRIFT_RESTART_FAILED": "true"})
    with client_of(d) as client:
        topology_id = client.submit_topology(
            WORDCOUNT, conf={"wordcount.db": str(db), "wordcount.rate": 300,
                             "wordcount.total": per_task}, wait=True, timeout=SPARK_TIMEOUT)
        first = wait_until("the first counts", lambda: counts(db).get("the"))
        record = launch_record(data_dir, topology_id)
        for pid in session_left(record):          # a crash: the whole job, no cleanup
            os.kill(pid, signal.SIGKILL)
        wait_until("the launcher to notice the crash and relaunch",
                   lambda: launch_record(data_dir, topology_id)["pid"] != record["pid"])
        expected = expected_counts(per_task)
        final = wait_until("the exact final counts",
                           lambda: counts(db) == expected or None, timeout=SPARK_TIMEOUT * 2)
        assert final and first < expected["the"]
        # Relaunched (the web page's sentence says "relaunched from the checkpoint").
        assert launch_record(data_dir, topology_id)["restarts"] >= 1
        _kill_and_check_clean(client, data_dir, "wordcount", topology_id)


def test_wordcount_on_a_standalone_cluster(
        tmp_path: Path, daemon_factory: Callable[..., DaemonProcess]) -> None:
    data_dir, db = tmp_path / "data", tmp_path / "wc.sqlite"
    with StandaloneCluster(tmp_path / "cluster", cores=2) as cluster:
        d = daemon_factory("--spark-master", cluster.url,
                           env={"NIMBUS_THRIFT_SPARK_MASTER_UI": cluster.ui_url})
        with client_of(d) as client:
            nodes = client.getClusterInfo().supervisors
            assert [n.host for n in nodes] == ["127.0.0.1"] and nodes[0].num_workers == 2
            topology_id = client.submit_topology(
                WORDCOUNT, conf={"wordcount.db": str(db), "wordcount.rate": 500},
                wait=True, timeout=SPARK_TIMEOUT)
            wait_until("the first counts", lambda: counts(db).get("the"))
            apps = cluster.state()["activeapps"]
            assert [a["name"] for a in apps] == ["wordcount"], apps
            assert apps[0]["cores"] == 2
            _kill_and_check_clean(client, data_dir, "wordcount", topology_id)
            done = wait_until("the application to finish on the master",
                              lambda: cluster.state()["completedapps"])
            assert done[0]["name"] == "wordcount"
            assert done[0]["state"] == "FINISHED"


def test_a_later_launch_maps_the_class_archive_the_first_one_made(
        tmp_path: Path, daemon_factory: Callable[..., DaemonProcess]) -> None:
    data_dir, db, cache = tmp_path / "data", tmp_path / "wc.sqlite", tmp_path / "cache"
    archives = cache / "nimbus-thrift" / "spark-cds"
    d = daemon_factory(env={"XDG_CACHE_HOME": str(cache)})
    conf: dict[str, Any] = {"wordcount.db": str(db), "wordcount.rate": 500}
    with client_of(d) as client:
        topology_id = client.submit_topology(WORDCOUNT, conf=conf, wait=True,
                                             timeout=SPARK_TIMEOUT)
        wait_until("the first counts", lambda: counts(db).get("the"))
        # Dumped in the background once the first launch has run a batch.
        archive = wait_until("the class archive", lambda: list(archives.glob("*.jsa")),
                             timeout=SPARK_TIMEOUT * 2)[0]
        _kill_and_check_clean(client, data_dir, "wordcount", topology_id)

        db.unlink()
        _check_launch_maps(client, tmp_path, conf, archive)


def _check_launch_maps(client: NimbusClient, tmp_path: Path, conf: dict[str, Any],
                       archive: Path) -> None:
    """Submit word count (``conf``) with the JVM logging where its classes come from:
    its command maps ``archive``, and Spark's classes come from it."""
    data_dir, db = tmp_path / "data", Path(conf["wordcount.db"])
    loaded = tmp_path / "class-load.log"
    topology_id = client.submit_topology(WORDCOUNT, conf={
        **conf, "spark.driver.extraJavaOptions": f"-Xlog:class+load=info:file={loaded}"},
        wait=True, timeout=SPARK_TIMEOUT)
    # The driver's JVM options travel in its properties file (never on spark-submit's
    # command line): the JVM spark-submit execs has them on its own.
    assert f"-XX:SharedArchiveFile={archive}" in \
        proc_cmdline(launch_record(data_dir, topology_id)["pid"])
    wait_until("the first counts", lambda: counts(db).get("the"))
    shared = [line for line in loaded.read_text().splitlines()
              if "org.apache.spark." in line and "source: shared objects file" in line]
    assert len(shared) > 1000, "the JVM did not map the class archive"
    _kill_and_check_clean(client, data_dir, "wordcount", topology_id)


def test_warm_up_makes_the_archive_the_first_launch_maps(
        tmp_path: Path, daemon_factory: Callable[..., DaemonProcess]) -> None:
    db, cache = tmp_path / "wc.sqlite", tmp_path / "cache"
    env = {**os.environ, **FAST_JVM_ENV, "XDG_CACHE_HOME": str(cache), "TMPDIR": str(tmp_path)}
    warm = subprocess.run([*CLI, "warm-up"], env=env, capture_output=True, text=True,
                          timeout=SPARK_TIMEOUT * 2)
    assert warm.returncode == 0, warm.stderr
    archive = Path(warm.stderr.strip().splitlines()[-1].split(": ")[-1])
    assert "the class archive is made in" in warm.stderr
    assert archive.parent == cache / "nimbus-thrift" / "spark-cds" and archive.is_file()
    # It leaves nothing behind: no data directory, no list, no process of its own.
    assert list(tmp_path.glob("nimbus-warm-up-*")) == []
    assert sorted(p.name for p in archive.parent.iterdir()) == \
        [archive.name, archive.with_suffix(".json").name]
    assert [pid for pid in map(int, filter(str.isdigit, os.listdir("/proc")))
            if str(cache) in " ".join(proc_cmdline(pid))] == []
    again = subprocess.run([*CLI, "warm-up"], env=env, capture_output=True, text=True,
                           timeout=60)
    assert again.returncode == 0 and "the class archive is there" in again.stderr

    # The daemon's first launch (same settings, so the same key) maps that archive.
    d = daemon_factory(env={"XDG_CACHE_HOME": str(cache)})
    with client_of(d) as client:
        _check_launch_maps(client, tmp_path, {"wordcount.db": str(db),
                                              "wordcount.rate": 500}, archive)
