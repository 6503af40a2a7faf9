"""Run a topology to completion inside the caller's SparkSession (tests, backfills).

::

    result = run_bounded(WordCount, spark, tmp_path, conf={"sentences": 1000})
    result.tuples("count")            # what the leaf bolt emitted, in batch order
    result.figures["split"].processed

A second run over the same ``work_dir`` continues from its checkpoint: spouts read
from the offsets where the first run stopped and keyed state carries over.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

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
