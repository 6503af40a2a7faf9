"""Standby drivers for real: a nimbus daemon (a process) keeping a warmed-up Spark
application, examples/wordcount.py submitted to it warm, killed, the standby replaced,
a submit with other Spark settings starting cold, and a daemon killed and restarted
adopting the warm topology while its idle standbys are not leaked."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from nimbus_thrift.client.client import NimbusClient
from nimbus_thrift.nimbus.spark.proctree import session_members
from nimbus_thrift.runner.rundir import STANDBY_READY, RunDir
from support.daemon_process import DaemonProcess
from support.spark_daemon import SparkDaemons, client_of, wait_until

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
WORDCOUNT = ROOT / "examples" / "wordcount.py"




def counted(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(db, timeout=30) as conn:
            return int(conn.execute("SELECT count(*) FROM counts").fetchone()[0])
    except sqlite3.OperationalError:
        return 0


def standbys(data_dir: Path) -> dict[str, dict[str, Any]]:
    """The standby directories: name -> their record and status state."""
    found = {}
    for path in sorted((data_dir / "standby").glob("*")):
        if not path.is_dir():
            continue
        status = RunDir(path).read_status()
        try:
            record = json.loads((path / "standby.json").read_text())
        except (OSError, ValueError):
            record = {}
        found[path.name] = {**record, "state": status.state if status else "",
                            "handed": (path / "handoff").exists()}
    return found


def ready_standby(data_dir: Path, but: frozenset[str] | set[str] = frozenset()) -> str:
    def ready() -> str | None:
        return next((name for name, s in standbys(data_dir).items()
                     if s["state"] == STANDBY_READY and not s["handed"]
                     and name not in but), None)
    return wait_until("a ready standby driver", ready)


def record_of(data_dir: Path, topology_id: str) -> dict[str, Any]:
    return json.loads((data_dir / "topologies" / topology_id / "launch.json").read_text())


def gone(record: dict[str, Any]) -> bool:
    return session_members(record["pid"], record["start_ticks"]) == []


@pytest.fixture
def daemons(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[Callable[[], DaemonProcess]]:
    cache = tmp_path_factory.getbasetemp() / "standby-cache"
    daemons = SparkDaemons(tmp_path / "data", cache, env={
        "NIMBUS_THRIFT_STANDBY_DRIVERS": "1", "NIMBUS_THRIFT_UI_PORT": "0"})
    yield daemons.start
    daemons.stop_all()


def kill(client: NimbusClient, name: str) -> None:
    client.killTopologyWithOpts(name, client.idl.KillOptions(wait_secs=0))
    wait_until(f"{name} to be removed",
               lambda: name not in {t.name for t in client.getClusterInfo().topologies})


def test_a_submit_takes_the_standby_and_one_with_other_settings_starts_cold(
        tmp_path: Path, daemons: Callable[[], DaemonProcess]) -> None:
    data_dir, db = tmp_path / "data", tmp_path / "wc.sqlite"
    d = daemons()
    first = ready_standby(data_dir)
    with client_of(d) as client:
        topology_id = client.submit_topology(
            WORDCOUNT, conf={"wordcount.db": str(db), "wordcount.rate": 500})
        record = record_of(data_dir, topology_id)
        assert record["warm"] == "ready" and record["pid"] == standbys(data_dir)[first]["pid"]
        wait_until("the first counts", lambda: counted(db))
        info = wait_until("running", lambda: (i := client.getTopologyInfo(topology_id))
                          .sched_status == "running" and i)
        # Warm shows in the launcher's sentence (the web page's), not in Storm's word.
        assert record_of(data_dir, topology_id)["warm"] == "ready"
        assert {e.component_id for e in info.executors} == \
            {"sentences", "split", "count", "sink"}
        # Its Spark log is the topology's, from the hand-off on.
        stderr = (data_dir / "topologies" / topology_id / "logs" / "stderr").read_text()
        assert f"warm: standby driver {first}" in stderr

        # A new standby replaces the one taken.
        second = ready_standby(data_dir, but={first})

        # Killed like a cold one: every process gone, the standby's directory too.
        kill(client, "wordcount")
        assert gone(record)
        wait_until("the taken standby's directory deleted",
                   lambda: first not in standbys(data_dir), timeout=30)

        # Other Spark settings: a cold start, the standby left waiting.
        db2 = tmp_path / "wc2.sqlite"
        cold_id = client.submit_topology(
            WORDCOUNT, conf={"wordcount.db": str(db2), "wordcount.rate": 500,
                             "spark.sql.shuffle.partitions": "2"})
        cold = record_of(data_dir, cold_id)
        assert not cold["warm"] and "--standby" not in cold["command"]
        wait_until("the cold topology's counts", lambda: counted(db2))
        assert not record_of(data_dir, cold_id)["warm"]
        assert standbys(data_dir)[second]["state"] == STANDBY_READY
        kill(client, "wordcount")
        assert gone(cold)
    # A daemon that stops stops its idle standby.
    spare = standbys(data_dir)[second]
    d.sigterm()
    assert session_members(spare["pid"], spare["start_ticks"]) == []
    assert standbys(data_dir) == {}


def test_a_restarted_daemon_adopts_a_warm_topology_and_leaks_no_standby(
        tmp_path: Path, daemons: Callable[[], DaemonProcess]) -> None:
    data_dir, db = tmp_path / "data", tmp_path / "wc.sqlite"
    d = daemons()
    first = ready_standby(data_dir)
    with client_of(d) as client:
        topology_id = client.submit_topology(
            WORDCOUNT, conf={"wordcount.db": str(db), "wordcount.rate": 500})
        wait_until("the first counts", lambda: counted(db))
    second = ready_standby(data_dir, but={first})
    idle = standbys(data_dir)[second]
    d.sigkill()                                   # a crash: nothing is stopped
    # The idle standby notices its daemon is gone and exits by itself.
    wait_until("the orphaned standby to exit",
               lambda: session_members(idle["pid"], idle["start_ticks"]) == [],
               timeout=30)
    record = record_of(data_dir, topology_id)
    assert not gone(record)                       # the topology runs on

    d2 = daemons()
    with client_of(d2) as client:
        info = wait_until("the adopted topology running",
                          lambda: (i := client.getTopologyInfo(topology_id))
                          .sched_status == "running" and i)
        assert record_of(data_dir, topology_id)["warm"]
        assert record_of(data_dir, topology_id)["pid"] == record["pid"]   # adopted
        before = _sum_counts(db)
        wait_until("counts to grow", lambda: _sum_counts(db) > before)
        # The left-over directory is gone, the topology's standby directory kept, and
        # the new daemon warms a standby of its own.
        names = set(standbys(data_dir))
        assert second not in names and first in names
        ready_standby(data_dir, but={first, second})
        kill(client, "wordcount")
        assert gone(record)
        wait_until("the taken standby's directory deleted",
                   lambda: first not in standbys(data_dir), timeout=30)


def _sum_counts(db: Path) -> int:
    with sqlite3.connect(db, timeout=30) as conn:
        return int(conn.execute("SELECT coalesce(sum(count), 0) FROM counts").fetchone()[0])


def test_a_submit_as_the_daemon_starts_takes_the_standby_still_warming_up(
        tmp_path: Path, daemons: Callable[[], DaemonProcess]) -> None:
    data_dir, db = tmp_path / "data", tmp_path / "wc.sqlite"
    d = daemons()
    with client_of(d) as client:
        topology_id = client.submit_topology(
            WORDCOUNT, conf={"wordcount.db": str(db), "wordcount.rate": 500})
        record = record_of(data_dir, topology_id)
        assert record["warm"] == "warming" and "--standby" in record["command"]
        wait_until("the first counts", lambda: counted(db))
        info = wait_until("running", lambda: (i := client.getTopologyInfo(topology_id))
                          .sched_status == "running" and i)
        assert info.executors
        assert record_of(data_dir, topology_id)["warm"] == "warming"    # taken warming
        kill(client, "wordcount")
        assert gone(record)

