"""Start a topology's one streaming query in a SparkSession, and read it back.

Shared by the spark-submit driver (:mod:`.driver`) and the in-process runs of
:mod:`.local`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from .claim import Fence
from .dataflow import BatchSink, Collected, StatsParam, build_query
from .failures import describe_failure
from .plan import Plan, build_plan
from .rundir import RunDir
from .spec import RunSpec

SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"


class TopologyQuery:
    """One run of a topology: the query, its accumulator and collected tuples.

    Run settings (``spec.run``): ``trigger_ms`` (processing-time trigger interval;
    0, the default, starts the next batch as soon as one ends), ``bounded`` (read what
    the spouts have at the start, in batches, then end: ``availableNow``),
    ``max_batch`` (see :func:`~.plan.max_batch_of`).

    ``fence`` (a cluster-mode driver's, :mod:`.claim`): the spouts plan no batch and
    the sink runs none while another driver holds the claim.
    """

    def __init__(self, spark: SparkSession, spec: RunSpec, run_dir: RunDir, *,
                 collect: bool = False, fence: Fence | None = None):
        self.spark = spark
        self.spec = spec
        self.run_dir = run_dir
        self.plan: Plan = build_plan(spec)
        self.bounded = bool(spec.run.get("bounded", False))
        trigger_ms = spec.run.get("trigger_ms", 0)
        if not isinstance(trigger_ms, (int, float)) or isinstance(trigger_ms, bool) \
                or trigger_ms < 0:
            raise ValueError(f"trigger_ms must be a number >= 0, not {trigger_ms!r}")
        self.trigger_ms = trigger_ms
        self.accumulator = spark.sparkContext.accumulator({}, StatsParam())
        self.collected = Collected() if collect else None
        self.fence = fence
        self.query: StreamingQuery | None = None

    def start(self) -> StreamingQuery:
        """Build and start the query (checkpoint in the work dir's ``checkpoint``).

        The state partition count is the stateful bolts' parallelism at the first
        start; afterwards Spark takes it from the checkpoint whatever the session says.
        """
        if self.plan.stateful is not None:
            self.spark.conf.set(SHUFFLE_PARTITIONS, str(self.plan.stateful.parallelism))
        frame, sink = build_query(self.spark, self.plan, self.run_dir.root,
                                  self.accumulator, self.bounded, self.collected,
                                  self.fence)
        writer = (frame.writeStream.queryName(self.spec.name).outputMode("append")
                  .option("checkpointLocation", str(self.run_dir.checkpoint)))
        if self.bounded:
            writer = writer.trigger(availableNow=True)
        elif self.trigger_ms:
            writer = writer.trigger(processingTime=f"{self.trigger_ms} milliseconds")
        if isinstance(sink, BatchSink):
            writer = writer.foreachBatch(sink)
        else:
            writer = writer.format("noop")
        self.query = writer.start()
        return self.query

    def counts(self) -> dict[str, tuple[float, ...]]:
        """``{component: (emitted, processed, busy seconds)}`` as accumulated (copies
        included; a spout's has its emitted count only)."""
        return dict(self.accumulator.value)

    def progress(self) -> list[dict[str, Any]]:
        return list(self.query.recentProgress) if self.query is not None else []

    def batch_in_flight(self) -> bool:
        """Whether a micro-batch may be running now, or be planned and not yet run:
        a trigger is under way (planning a batch or running one), or the offset log
        holds a batch with no commit (a query started from its checkpoint runs that
        one again first, whatever its spouts say).

        False means no batch runs now and the next one is planned by a trigger that
        asks the spouts first (``latestOffset``, which reads ``control``): a pause the
        caller saw before this call holds from here on. Spark commits a batch before
        its trigger ends, so a batch that ran is committed when no trigger is active."""
        if self.query is None:
            return False
        if self.query.status["isTriggerActive"]:
            return True
        return uncommitted_batch(self.run_dir.checkpoint)

    def failure(self) -> tuple[str, str] | None:
        """``(component, message)`` if the query failed, else None."""
        if self.query is None:
            return None
        exc = self.query.exception()
        if exc is None:
            return None
        return describe_failure(_error_text(exc), self.plan.nodes)


def uncommitted_batch(checkpoint: Path) -> bool:
    """Whether Spark's offset log in ``checkpoint`` names a later batch than its commit
    log: a batch was planned and has not committed."""
    return _last_batch(checkpoint / "offsets") > _last_batch(checkpoint / "commits")


def _last_batch(log_dir: Path) -> int:
    """The highest batch id of a Spark metadata log (files named by batch id, beside
    their hidden checksums), -1 when there is none."""
    try:
        names = [entry.name for entry in os.scandir(log_dir)]
    except FileNotFoundError:
        return -1
    return max((int(name) for name in names if name.isdigit()), default=-1)


def _error_text(exc: Any) -> str:
    # str() holds the description with the Python traceback of the worker (and the JVM
    # stack if enabled); getMessage() is empty for errors without an error class.
    return str(exc)
