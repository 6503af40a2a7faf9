#!/usr/bin/env python3
"""Word count through our runner against the same pipeline hand-written in PySpark.

Part 1, throughput: in one SparkSession (local[2] unless --master), alternately runs
  ours        examples/wordcount.py's SentenceSpout -> SplitBolt -> CountBolt (no sink)
              through nimbus_thrift.runner.local.run_bounded, and
  hand-written scripts/bench/handwritten_wordcount.py: the same source, a mapInArrow
              split and an applyInPandasWithState count (vectorised)
over the same sentences (availableNow, same batch size, same partitions), and prints
sentences/s of each and the ratio per round and the median.

Part 2, latency: starts a nimbus daemon (spark launcher, local Spark), submits
examples/wordcount.py and prints the seconds from the submit call to the first counts
in its SQLite sink (and to the 'running' status).

    .venv/bin/python scripts/bench_topology.py [--sentences 200000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "examples"), str(ROOT / "scripts" / "bench")]

import handwritten_wordcount  # noqa: E402
from wordcount import SENTENCES, CountBolt, SentenceSpout, SplitBolt  # noqa: E402

from nimbus_thrift.topology import Grouping, Topology  # noqa: E402


class BenchWordCount(Topology):
    sentences = SentenceSpout.spec(par=2)
    split = SplitBolt.spec(inputs={sentences: Grouping.shuffle}, par=2)
    count = CountBolt.spec(inputs={split: Grouping.fields("word")}, par=2)


def session(master: str):  # type: ignore[no-untyped-def]
    from pyspark.sql import SparkSession
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Spark's Python workers and data-source runners are other processes: they find the
    # example's and the baseline's modules through PYTHONPATH, not this sys.path.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "examples"), str(ROOT / "scripts" / "bench"), str(ROOT),
         os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return (SparkSession.builder.master(master).appName("bench-topology")
            .config("spark.ui.enabled", "false")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate())


def throughput(args: argparse.Namespace) -> None:
    from nimbus_thrift.runner.local import run_bounded
    spark = session(args.master)
    spark.sparkContext.setLogLevel("ERROR")
    total = args.sentences * 2
    words = sum(len(s.split()) for s in SENTENCES)  # per 5
    print(f"word count, {total:,} sentences (~{total * words // 5:,} words) per run, "
          f"{args.batch:,} sentences per spout task per batch, master {args.master}")
    print(f"{'round':>5} {'ours s/s':>12} {'hand-written s/s':>17} {'ratio':>7}")
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds + 1):
            t0 = time.perf_counter()
            result = run_bounded(BenchWordCount, spark, Path(tmp, f"ours{i}"), conf={
                "wordcount.rate": 0, "wordcount.total": args.sentences,
                "topology.max.spout.pending": args.batch}, collect=False)
            ours = time.perf_counter() - t0
            t0 = time.perf_counter()
            emitted = handwritten_wordcount.run(spark, str(Path(tmp, f"hand{i}")), 2,
                                                args.sentences, args.batch, 2)
            hand = time.perf_counter() - t0
            counted = result.figures["count"].emitted
            if counted != emitted:
                raise SystemExit(f"the two pipelines disagree: ours emitted {counted} "
                                 f"counts, the hand-written one {emitted}")
            label = "warm" if i == 0 else str(i)
            if i:
                ratios.append(hand / ours)
            print(f"{label:>5} {total / ours:>12,.0f} {total / hand:>17,.0f} "
                  f"{hand / ours:>7.2f}")
    print(f"median ratio ours / hand-written: {statistics.median(ratios):.2f} "
          "(1.0 = as fast; the warm-up round is not counted)")
    spark.stop()


def first_output(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp, "wc.sqlite")
        env = {**os.environ, "NIMBUS_THRIFT_LAUNCHER": "spark"}
        daemon = subprocess.Popen(
            [sys.executable, "-m", "nimbus_thrift.cli", "nimbus", "--port", "0",
             "--data-dir", f"{tmp}/data", "--log-level", "warning"],
            stderr=subprocess.PIPE, text=True, env=env)
        try:
            assert daemon.stderr is not None
            port = 0
            for line in daemon.stderr:
                match = re.match(r"nimbus listening on [^:]+:(\d+)", line)
                if match:
                    port = int(match.group(1))
                    break
            if not port:
                raise SystemExit("nimbus did not start")
            from nimbus_thrift.client import NimbusClient
            with NimbusClient("127.0.0.1", port, timeout=60) as client:
                t0 = time.monotonic()
                topology_id = client.submit_topology(
                    ROOT / "examples" / "wordcount.py",
                    conf={"wordcount.db": str(db), "wordcount.rate": 2000})
                submitted = time.monotonic() - t0
                running = None
                while True:
                    now = time.monotonic() - t0
                    if running is None and client.getTopologyInfo(topology_id) \
                            .sched_status.startswith("running:"):
                        running = now
                    if _has_counts(db):
                        break
                    if now > 300:
                        raise SystemExit("no output after 300 s")
                    time.sleep(0.1)
                first = time.monotonic() - t0
                print(f"submit call {submitted:.1f} s; status running at "
                      f"{running if running is not None else first:.1f} s; "
                      f"first counts in SQLite at {first:.1f} s after submit")
                client.killTopologyWithOpts("wordcount", client.idl.KillOptions(wait_secs=0))
                while client.getClusterInfo().topologies:
                    time.sleep(0.2)
        finally:
            daemon.terminate()
            daemon.wait(60)


def _has_counts(db: Path) -> bool:
    if not db.exists():
        return False
    try:
        with sqlite3.connect(db, timeout=5) as conn:
            return bool(conn.execute("SELECT count(*) FROM counts").fetchone()[0])
    except sqlite3.OperationalError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=200_000, help="per spout task")
    parser.add_argument("--batch", type=int, default=100_000,
                        help="sentences per spout task per micro-batch")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--skip-throughput", action="store_true")
    args = parser.parse_args()
    if not args.skip_throughput:
        throughput(args)
    if not args.skip_latency:
        first_output(args)


if __name__ == "__main__":
    main()
