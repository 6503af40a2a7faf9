#!/usr/bin/env python3
"""Client and cluster deploy mode side by side on one standalone cluster (issue 29).

Starts a real standalone master (REST server on) and two workers from the PySpark
installation, then for each deploy mode a nimbus daemon (a child process) that runs the
word count (examples/wordcount.py), and measures:

- submit to first counts: from the submit call to the first row in the sink's SQLite;
- the daemon host's memory per topology: the resident memory of the daemon's process
  tree (the daemon and everything it started) with the topology running, less the
  daemon's own before the submit (on one machine the workers are here too: they are
  not the daemon's tree, which is what a separate nimbus host would carry);
- worker loss to counts moving again: the worker running the driver (cluster mode) or
  the executor (client mode) SIGKILLed with everything it started, until the counts
  grow again (the master notices a lost worker after spark.worker.timeout, set to
  --worker-timeout here; Spark's default is 60 s).

One round per mode by default (each takes minutes); a shared machine is noisy, so
read the figures side by side, not alone.

    .venv/bin/python scripts/bench/cluster_mode.py [--rounds N] [--worker-timeout 20]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))     # the tests' cluster and daemon helpers

from support.daemon_process import DaemonProcess  # noqa: E402
from support.spark_cluster import StandaloneCluster  # noqa: E402
from support.wordcounts import top_count  # noqa: E402

from nimbus_thrift.client import NimbusClient  # noqa: E402

WORDCOUNT = ROOT / "examples" / "wordcount.py"
TIMEOUT = 300.0


def wait(what: str, check, timeout: float = TIMEOUT):   # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise TimeoutError(f"no {what} after {timeout:.0f} s")


def tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and all its descendants."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(stat[1]), []).append(int(entry.name))
            rss[int(entry.name)] = int(stat[21]) * 4096
        except (OSError, IndexError, ValueError):
            continue
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        total += rss.get(current, 0)
        todo.extend(children.get(current, []))
    return total


def one_round(mode: str, cluster: StandaloneCluster, work: Path) -> dict[str, float]:
    data, db = work / f"data-{mode}", work / f"wc-{mode}.sqlite"
    daemon = DaemonProcess(data, "--launcher", "spark", "--spark-master", cluster.url,
                           "--deploy-mode", mode,
                           env={"NIMBUS_THRIFT_SPARK_MASTER_UI": cluster.ui_url,
                                "NIMBUS_THRIFT_SPARK_MASTER_REST": cluster.rest_url})
    try:
        time.sleep(2)
        before = tree_rss(daemon.proc.pid)
        with NimbusClient("127.0.0.1", daemon.port, timeout=60) as client:
            start = time.monotonic()
            topology_id = client.submit_topology(
                WORDCOUNT, conf={"wordcount.db": str(db), "wordcount.rate": 300})
            wait("first counts", lambda: top_count(db))
            first = time.monotonic() - start
            time.sleep(10)                      # a steady state
            per_topology = tree_rss(daemon.proc.pid) - before
            record = json.loads((data / "topologies" / topology_id /
                                 "launch.json").read_text())
            state = json.loads(urllib_get(cluster.ui_url + "/json/"))
            if mode == "cluster":
                (driver,) = [d for d in state["activedrivers"]
                             if d["id"] == record["driver_id"]]
                worker_id = driver["worker"]
            else:
                app = state["activeapps"][0]["id"]
                worker_id = executor_worker(cluster, app)
            port = int(re.search(r"-(\d+)$", worker_id).group(1))
            seen = top_count(db)
            lost_at = time.monotonic()
            cluster.kill_worker_of(port)
            # Counts move again: two reads apart that grow past what was seen.
            wait("counts moving after the worker's loss",
                 lambda: top_count(db) > seen + 10)
            recovered = time.monotonic() - lost_at
            cluster.add_worker(len(cluster.workers) + 10)
            client.killTopologyWithOpts("wordcount", client.idl.KillOptions(wait_secs=0))
            wait("the topology's removal", lambda: not client.getClusterInfo().topologies)
        return {"first_counts_s": first, "host_mib_per_topology": per_topology / 2**20,
                "worker_loss_to_counts_s": recovered}
    finally:
        daemon.sigterm()


def urllib_get(url: str) -> str:
    import urllib.request
    with urllib.request.urlopen(url, timeout=10) as reply:
        return reply.read().decode()


def executor_worker(cluster: StandaloneCluster, app_id: str) -> str:
    """The worker running an executor of ``app_id`` (client mode: the app's driver is
    on this host, its executors on the workers): read from each worker's JSON."""
    state = json.loads(urllib_get(cluster.ui_url + "/json/"))
    for worker in state["workers"]:
        if worker.get("state") != "ALIVE":
            continue
        info = json.loads(urllib_get(worker["webuiaddress"] + "/json/"))
        if any(e.get("appid") == app_id for e in info.get("executors") or []):
            return str(worker["id"])
    raise LookupError(f"no worker runs an executor of {app_id}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--worker-timeout", type=int, default=20)
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {"client": [], "cluster": []}
    with tempfile.TemporaryDirectory(prefix="cluster-mode-") as tmp:
        work = Path(tmp)
        with StandaloneCluster(work / "cluster", cores=3, memory="3g", workers=2,
                               rest=True, worker_timeout=args.worker_timeout) as cluster:
            for index in range(args.rounds):
                for mode in ("client", "cluster"):
                    figures = one_round(mode, cluster, work / f"{mode}{index}")
                    print(f"round {index + 1} {mode}: " + ", ".join(
                        f"{k} {v:.1f}" for k, v in figures.items()), flush=True)
                    results[mode].append(figures)
    print(f"\nspark.worker.timeout {args.worker_timeout} s; medians of {args.rounds} "
          "round(s)")
    print(f"{'':28}{'client':>10}{'cluster':>10}")
    for key in ("first_counts_s", "host_mib_per_topology", "worker_loss_to_counts_s"):
        row = [statistics.median(r[key] for r in results[m]) for m in results]
        print(f"{key:28}{row[0]:>10.1f}{row[1]:>10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
