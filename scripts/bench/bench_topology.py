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
in its SQLite sink (and to the 'running' status); ``--latency-runs N`` does it N times
(a daemon each), ``--breakdown`` prints when each step happened (from the work
directory: launch.json, status.json, the checkpoint's offsets/0 and commits/0), and
``--keep DIR`` keeps each run's data directory and a copy of the topology's work
directory (stderr with Spark's own log) in ``DIR/runN``. ``--start warm`` submits once
the daemon's standby driver is ready (standby_drivers=1), so the topology takes it;
``--start cold`` runs without one (standby_drivers=0); ``both`` (the default) does N
runs of each, alternating, and prints the two medians side by side; ``early`` submits
as soon as the daemon listens, so the topology takes the standby while it warms up.
``--start all --run-as USER`` adds ``run-as`` and ``run-as-warm``: the daemon with
run_as_user (as root, mapping the submitting principal, root, to the existing account
USER through principal_users), cold, and warm (a first launch, killed at once, leaves
a standby driver of USER's, which the measured launch takes). It needs the install
reachable by USER (docs/team.md: this Python, the package, the cache directory).

The launcher keeps a mirror of Spark home and the driver's class archive in the user's
cache directory (``$XDG_CACHE_HOME/nimbus-thrift``): the first launch on a machine
makes the archive (in the background, once it has run a batch), so it starts without
one. Point XDG_CACHE_HOME at an empty directory to measure that first launch.

    .venv/bin/python scripts/bench/bench_topology.py [--sentences 200000] [--rounds 3]
    .venv/bin/python scripts/bench/bench_topology.py --skip-throughput --latency-runs 5 --breakdown
    XDG_CACHE_HOME=$(mktemp -d) .venv/bin/python scripts/bench/bench_topology.py \
        --skip-throughput --latency-runs 3 --until-archive    # first launch, then two more
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
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
    modes = {"both": ["warm", "cold"],
             "all": ["warm", "cold", "run-as-warm", "run-as"]}.get(args.start, [args.start])
    if "run-as" in modes and not args.run_as:
        raise SystemExit("--start all needs --run-as USER (an existing account)")
    runs: dict[str, list[float]] = {mode: [] for mode in modes}
    for i in range(args.latency_runs):
        for mode in modes:         # alternating: a load that comes and goes hits both
            print(f"run {i + 1}, {mode} start")
            if args.keep:
                keep = Path(args.keep, f"run{i}-{mode}")
                keep.mkdir(parents=True, exist_ok=False)
                runs[mode].append(_first_output_once(args, keep, mode))
            else:
                with tempfile.TemporaryDirectory() as tmp:
                    runs[mode].append(_first_output_once(args, Path(tmp), mode))
    for mode, seconds in runs.items():
        print(f"first counts, {mode} start: " + ", ".join(f"{r:.1f}" for r in seconds)
              + f" s; median {statistics.median(seconds):.1f} s")
    if "warm" in runs and "cold" in runs:
        warm, cold = (statistics.median(runs[m]) for m in ("warm", "cold"))
        print(f"median warm / cold: {warm:.1f} / {cold:.1f} s = {warm / cold:.2f}")
    for run_as, plain in (("run-as", "cold"), ("run-as-warm", "warm")):
        if run_as in runs and plain in runs:
            a, b = (statistics.median(runs[m]) for m in (run_as, plain))
            print(f"median {run_as} / {plain}: {a:.1f} / {b:.1f} s = {a / b:.2f}")


#: Milestones of the first output, in the order they happen, and how each is seen:
#: the daemon's launch record, the driver's status.json (polled), the checkpoint's
#: write-ahead log (file times), the sink's SQLite table (polled).
MILESTONES = (
    ("launched", "the daemon started spark-submit or took a standby (launch.json)"),
    ("driver", "the Python driver started (status.json started_at)"),
    ("session", "SparkSession up (status.json has the app id)"),
    ("query", "query started (status.json rewritten after the app id)"),
    ("planned", "batch 0 planned (checkpoint offsets/0)"),
    ("counts", "first counts in SQLite"),
    ("committed", "batch 0 committed (checkpoint commits/0)"),
    ("running", "status running"),
)


def _first_output_once(args: argparse.Namespace, tmp: Path, mode: str) -> float:
    db = Path(tmp, "wc.sqlite")
    env = {**os.environ, "NIMBUS_THRIFT_LAUNCHER": "spark", "NIMBUS_THRIFT_UI_PORT": "0",
           "NIMBUS_THRIFT_STANDBY_DRIVERS": "1" if mode.endswith("warm") else "0"}
    if mode.startswith("run-as"):
        import pwd
        user = pwd.getpwnam(args.run_as)
        me = pwd.getpwuid(os.geteuid()).pw_name
        env.update(NIMBUS_THRIFT_RUN_AS_USER="1",
                   NIMBUS_THRIFT_PRINCIPAL_USERS=f"{me}={args.run_as}")
        # The topology, as USER, enters the data directory and writes its counts.
        os.chmod(tmp, 0o711)
        out = Path(tmp, "out")
        out.mkdir()
        os.chown(out, user.pw_uid, user.pw_gid)
        db = out / "wc.sqlite"
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
        from nimbus_thrift.client.client import NimbusClient
        from nimbus_thrift.runner.rundir import RunDir
        if mode == "run-as-warm":
            # A run-as standby is kept for the user who launched last: one launch
            # (killed at once) first, then the standby it leaves, as that user.
            with NimbusClient("127.0.0.1", port, timeout=60) as client:
                client.submit_topology(ROOT / "examples" / "wordcount.py", name="primer",
                                       conf={"wordcount.db": str(db) + ".primer"})
                client.killTopologyWithOpts("primer",
                                            client.idl.KillOptions(wait_secs=0))
        if mode.endswith("warm"):
            _wait_for_standby(Path(tmp, "data"))
            # Spark ends Python workers idle for a minute: --standby-idle 90 measures
            # a standby that waited longer than that (runner/worker_daemon.py).
            time.sleep(args.standby_idle)
        with NimbusClient("127.0.0.1", port, timeout=60) as client:
            wall0 = time.time()
            t0 = time.monotonic()
            topology_id = client.submit_topology(
                ROOT / "examples" / "wordcount.py",
                conf={"wordcount.db": str(db), "wordcount.rate": 2000})
            seen: dict[str, float] = {"submitted": time.monotonic() - t0}
            rd = RunDir(Path(tmp, "data", "topologies", topology_id))
            app_write = 0.0
            while "counts" not in seen or "running" not in seen:
                now = time.monotonic() - t0
                if "running" not in seen and client.getTopologyInfo(topology_id) \
                        .sched_status == "running":
                    seen["running"] = now
                status = rd.read_status()
                if status is not None:
                    seen.setdefault("driver", status.started_at - wall0)
                    if status.app_id and "session" not in seen:
                        seen["session"] = app_write = status.updated_at - wall0
                    elif "session" in seen and "query" not in seen \
                            and status.updated_at - wall0 > app_write:
                        seen["query"] = status.updated_at - wall0
                    if status.batch_id >= 0 and "batch0_ms" not in seen:
                        seen["batch0_ms"] = status.batch_ms / 1000
                if "counts" not in seen and _has_counts(db):
                    seen["counts"] = now
                if now > 300:
                    raise SystemExit("no output after 300 s")
                time.sleep(0.05)
            launched = rd.launch if not mode.startswith("run-as") else \
                Path(tmp, "data", "launches", f"{topology_id}.json")
            for name, path in (("launched", launched),
                               ("planned", rd.checkpoint / "offsets" / "0"),
                               ("committed", rd.checkpoint / "commits" / "0")):
                try:
                    seen[name] = path.stat().st_mtime - wall0
                except OSError:
                    pass
            print(f"submit call {seen['submitted']:.1f} s; status running at "
                  f"{seen['running']:.1f} s; first counts in SQLite at "
                  f"{seen['counts']:.1f} s after submit")
            if args.breakdown:
                last = 0.0
                for at, what in sorted((seen[name], what) for name, what in MILESTONES
                                       if name in seen):
                    print(f"  {at:6.1f} s  (+{at - last:4.1f})  {what}")
                    last = at
                if "batch0_ms" in seen:
                    print(f"  batch 0 took {seen['batch0_ms']:.1f} s (its triggerExecution)")
            if args.until_archive:
                _wait_for_class_archive(t0)
            if args.keep:       # the kill removes the work directory
                time.sleep(args.keep_secs)
                shutil.copytree(rd.root, Path(tmp, "workdir"), ignore_dangling_symlinks=True)
            client.killTopologyWithOpts("wordcount", client.idl.KillOptions(wait_secs=0))
            while client.getClusterInfo().topologies:
                time.sleep(0.2)
            return seen["counts"]
    finally:
        daemon.terminate()
        daemon.wait(60)


def _wait_for_standby(data_dir: Path, limit: float = 300.0) -> None:
    """Wait until the daemon's standby driver is warmed up and waiting."""
    from nimbus_thrift.runner.rundir import STANDBY_READY, RunDir
    t0 = time.monotonic()
    while True:
        ready = [d for d in Path(data_dir, "standby").glob("*")
                 if d.is_dir() and (status := RunDir(d).read_status()) is not None
                 and status.state == STANDBY_READY]
        if ready:
            print(f"standby ready {time.monotonic() - t0:.1f} s after the daemon")
            return
        if time.monotonic() - t0 > limit:
            raise SystemExit(f"no standby driver ready after {limit:.0f} s")
        time.sleep(0.2)


def _wait_for_class_archive(t0: float, limit: float = 300.0) -> None:
    """Let the topology run until the daemon has made the driver's class archive (it
    starts the dump once a batch is done), so that the next runs map it."""
    from nimbus_thrift.nimbus.spark.install import CLASS_ARCHIVE_DIR, default_cache_dir
    directory = default_cache_dir() / CLASS_ARCHIVE_DIR
    while not any(directory.glob("driver-*.jsa")):
        if time.monotonic() - t0 > limit:
            print(f"no class archive in {directory} after {limit:.0f} s")
            return
        time.sleep(0.5)
    print(f"class archive made {time.monotonic() - t0:.0f} s after submit")


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
    parser.add_argument("--latency-runs", type=int, default=1,
                        help="submit this many times, one daemon each (latency part)")
    parser.add_argument("--run-as", metavar="USER",
                        help="latency, --start all: the account run-as starts run as")
    parser.add_argument("--start", choices=("both", "all", "warm", "cold", "early"),
                        default="both",
                        help="latency: with a standby driver ready (warm), without "
                             "(cold), each in turn (both), or as soon as the daemon "
                             "listens, its standby still warming up (early)")
    parser.add_argument("--standby-idle", type=float, default=0.0, metavar="SECS",
                        help="latency, warm: submit this long after the standby is ready")
    parser.add_argument("--breakdown", action="store_true",
                        help="print when each step of the first output happened")
    parser.add_argument("--keep", metavar="DIR",
                        help="keep each latency run's data (logs, checkpoint) in DIR/runN")
    parser.add_argument("--keep-secs", type=float, default=0.0,
                        help="with --keep, let the topology run this long more first")
    parser.add_argument("--until-archive", action="store_true",
                        help="keep each topology running until the driver's class "
                             "archive exists (the first run on a machine makes it)")
    args = parser.parse_args()
    if not args.skip_throughput:
        throughput(args)
    if not args.skip_latency:
        first_output(args)


if __name__ == "__main__":
    main()
