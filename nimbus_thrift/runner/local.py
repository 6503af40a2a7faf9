"""Run a topology inside the caller's process: to completion in the caller's
SparkSession (tests, backfills), or streaming for a while in a local one
(``nimbus-thrift run``, Storm's ``storm local``).

::

    result = run_bounded(WordCount, spark, tmp_path, conf={"sentences": 1000})
    result.tuples("count")            # what the leaf bolt emitted, in batch order
    result.figures["split"].processed

    spark = local_session(tmp_path / "spark", code_dirs=[project])
    run_for(WordCount, spark, tmp_path / "run", 30, on_batch=print)

A second run over the same ``work_dir`` continues from its checkpoint: spouts read
from the offsets where the first run stopped and keyed state carries over.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..topology.streams import DEFAULT_STREAM
from .rundir import ReportedStats, RunDir
from .spec import RunSpec, from_plan


class RunFailed(RuntimeError):
    """A bounded run failed; ``component`` names the one whose code raised, if any."""

    def __init__(self, component: str, message: str):
        super().__init__(message)
        self.component = component


@dataclass
class RunResult:
    figures: dict[str, ReportedStats]
    #: component -> stream -> tuples the leaf bolts emitted (empty if not collected).
    outputs: dict[str, dict[str, list[tuple]]] = field(default_factory=dict)
    batches: int = 0

    def tuples(self, component: str, stream: str = DEFAULT_STREAM) -> list[tuple]:
        return self.outputs.get(component, {}).get(stream, [])


def spec_of(topology: Any, conf: Mapping[str, Any] | None = None,
            run: Mapping[str, Any] | None = None, topology_id: str | None = None) -> RunSpec:
    """The run spec of a Topology class, validated as Nimbus validates a submission
    (``conf`` over the class's ``config``)."""
    from ..topology.validate import check_topology
    merged = {**getattr(topology, "config", {}), **(conf or {})}
    plan = check_topology(topology.to_thrift(), merged, None)
    name = topology.__name__
    return from_plan(topology_id or f"{name}-local", name, plan, run=dict(run or {}))


def run_bounded(topology: Any, spark: Any, work_dir: Path | str,
                conf: Mapping[str, Any] | None = None, collect: bool = True,
                timeout_s: float | None = None) -> RunResult:
    """Run ``topology`` (a Topology class or a RunSpec) over what its spouts have
    now, in ``max_batch`` micro-batches (``trigger availableNow``), and return the
    figures and, with ``collect``, the tuples its leaf bolts emitted.

    Raises:
        RunFailed: the query failed (the message names the component at fault).
        TimeoutError: not done within ``timeout_s``.
    """
    from .query import TopologyQuery
    if isinstance(topology, RunSpec):
        spec = topology
        if conf:
            spec = replace(spec, conf={**spec.conf, **conf})
    else:
        spec = spec_of(topology, conf)
    spec = replace(spec, run={**spec.run, "bounded": True})
    run_dir = RunDir(Path(work_dir))
    run_dir.root.mkdir(parents=True, exist_ok=True)
    previous = spark.conf.get("spark.sql.shuffle.partitions")
    run = TopologyQuery(spark, spec, run_dir, collect=collect)
    try:
        query = run.start()
        try:
            finished = query.awaitTermination(timeout_s)  # type: ignore[arg-type]
        except Exception:
            finished = True       # failed: reported below
        if finished is False:
            query.stop()
            raise TimeoutError(f"topology {spec.name} did not finish in {timeout_s} s")
        failure = run.failure()
        if failure is not None:
            raise RunFailed(*failure)
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", previous)
    from .stats import StatsTracker
    progress = run.progress()
    figures = StatsTracker(run.plan).update(run.counts(), progress)
    outputs = run.collected.tuples() if run.collected is not None else {}
    return RunResult(figures, outputs, batches=len([p for p in progress
                                                    if p.get("numInputRows", 0)]))


#: A local session's settings: loopback only, no web UI, no console progress bar (the
#: tests' session, tests/support/spark.py, says the same).
LOCAL_SESSION_CONF = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
}
#: Seconds between two looks at a streaming run (new batches, failure, the time).
RUN_POLL_S = 0.5
#: Seconds a streaming run waits for its first micro-batch before its time starts
#: anyway (a spout with nothing to read never makes one).
FIRST_BATCH_WAIT_S = 120.0
#: Seconds a stopping run gives the batch under way to end (the spouts are paused
#: first, as the daemon's kill does, so no batch is cut in the middle).
STOP_WAIT_S = 30.0


def local_session(scratch: Path, code_dirs: Sequence[Path] = (),
                  app_name: str = "nimbus-thrift-run", log_level: str = "WARN") -> Any:
    """A ``local[*]`` SparkSession in this process for :func:`run_for`: loopback, UI
    off, Spark's scratch space and warehouse in ``scratch``, this interpreter for the
    Python workers and ``code_dirs`` on their path (set in this process's environment,
    which the JVM and its workers take at launch)."""
    from pyspark.sql import SparkSession

    paths = [str(p) for p in code_dirs]
    if os.environ.get("PYTHONPATH"):
        paths.append(os.environ["PYTHONPATH"])
    os.environ.update(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
                      PYTHONPATH=os.pathsep.join(paths), SPARK_LOCAL_IP="127.0.0.1",
                      SPARK_LOCAL_DIRS=str(scratch / "local"))
    builder = SparkSession.builder.master("local[*]").appName(app_name)
    for key, value in {**LOCAL_SESSION_CONF,
                       "spark.sql.warehouse.dir": str(scratch / "warehouse")}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(log_level)
    return session


#: What :func:`run_for` hands its caller after each micro-batch: the batch id and the
#: tuples the leaf bolts emitted in it (component -> stream -> tuples).
BatchOutputs = Callable[[int, dict[str, dict[str, list[tuple]]]], None]


def run_for(topology: Any, spark: Any, work_dir: Path | str, seconds: float | None,
            conf: Mapping[str, Any] | None = None, on_batch: BatchOutputs | None = None,
            stop: threading.Event | None = None) -> RunResult:
    """Run ``topology`` (a Topology class or a RunSpec) streaming, as the daemon runs
    it, for ``seconds`` from its first micro-batch (None: until ``stop`` is set),
    handing each finished micro-batch's leaf tuples to ``on_batch`` as it ends; then
    pause its spouts, let the batch under way end and stop it. Returns the figures
    (``outputs`` stays empty: they went to ``on_batch``).

    Raises:
        RunFailed: the query failed (the message names the component at fault).
    """
    from .query import TopologyQuery
    from .stats import StatsTracker
    if isinstance(topology, RunSpec):
        spec = replace(topology, conf={**topology.conf, **(conf or {})})
    else:
        spec = spec_of(topology, conf)
    run_dir = RunDir(Path(work_dir))
    run_dir.root.mkdir(parents=True, exist_ok=True)
    run_dir.set_control("active")
    previous = spark.conf.get("spark.sql.shuffle.partitions")
    run = TopologyQuery(spark, spec, run_dir, collect=on_batch is not None)
    delivered = -1

    def deliver() -> None:
        nonlocal delivered
        if run.collected is None or on_batch is None:
            return
        batches = run.collected.batches
        for batch_id in sorted(list(batches)):
            if batch_id > delivered:
                delivered = batch_id
                on_batch(batch_id, batches.pop(batch_id))

    try:
        query = run.start()
        started = time.monotonic()
        ends = None
        while stop is None or not stop.is_set():
            if ends is None and seconds is not None and (
                    query.lastProgress is not None
                    or time.monotonic() - started > FIRST_BATCH_WAIT_S):
                ends = time.monotonic() + seconds
            left = RUN_POLL_S if ends is None else min(RUN_POLL_S, ends - time.monotonic())
            if left <= 0:
                break
            try:
                # PySpark takes float seconds (it checks int or float) but types int.
                if query.awaitTermination(left):  # type: ignore[arg-type]
                    break               # ended by itself: a failure, reported below
            except Exception:
                break
            deliver()
        _stop_between_batches(run, run_dir)
    finally:
        if run.query is not None and run.query.isActive:
            run.query.stop()
        spark.conf.set("spark.sql.shuffle.partitions", previous)
    deliver()
    failure = run.failure()
    if failure is not None:
        raise RunFailed(*failure)
    progress = run.progress()
    figures = StatsTracker(run.plan).update(run.counts(), progress)
    return RunResult(figures, batches=len([p for p in progress if p.get("numInputRows", 0)]))


def _stop_between_batches(run: Any, run_dir: RunDir) -> None:
    """Pause the spouts and wait (STOP_WAIT_S at most) until no batch can be running:
    a query stopped in the middle of one interrupts Spark's threads mid-work."""
    if run.query is None or not run.query.isActive:
        return
    run_dir.set_control("paused")
    waited_until = time.monotonic() + STOP_WAIT_S
    while run.query.isActive and run.batch_in_flight() and time.monotonic() < waited_until:
        try:
            run.query.awaitTermination(0.1)
        except Exception:
            return
