"""A :class:`~.plan.Plan` as Spark DataFrames: the one streaming query of a topology.

Groupings become exchanges in front of each bolt's ``mapInArrow`` (see
:func:`_exchange`); every StatefulBolt runs in one ``applyInPandasWithState``; the
head's exports and the stateful output are unioned into a single sink (a single
export that nothing reads goes to the ``noop`` sink as it is). What reads a stateful
bolt's output (the tail) runs per batch in ``foreachBatch`` (:class:`BatchSink`).

Stats: each Python task adds ``{component: (emitted, processed, busy seconds)}`` to
one Spark accumulator (verified to arrive from mapInArrow, applyInPandasWithState and
data source reads on Spark 4.3).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.accumulators import AccumulatorParam
from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupStateTimeout

from .claim import ClaimLost, Fence
from .decode import output_rows
from .plan import (BOLT_COLUMN, LEAF_COLUMN, SLOT_COLUMN, SPARK_TYPES, STREAM_COLUMN,
                   TASK_COLUMN, Node, Output, Plan, Slot, StatefulOp, routing_values)
from .settings import task_settings
from .source import source_class
from .tasks import REMOVE, StatefulTask, TaskStats, run_bolt

#: The sink's name for the merged stateful operator's rows.
STATEFUL = "<stateful>"
#: The state of a key: one pickled value.
STATE_SCHEMA = "s binary"


#: A component's stats in the accumulator: ``(emitted, processed, busy seconds)``;
#: spouts add the first only (a shorter tuple counts as zeros).
StatsTuple = tuple[float, ...]


class StatsParam(AccumulatorParam):
    """``{component: (emitted, processed, busy seconds)}``, summed element-wise."""

    def zero(self, value: dict[str, StatsTuple]) -> dict[str, StatsTuple]:
        return {}

    def addInPlace(self, a: dict[str, StatsTuple], b: dict[str, StatsTuple]
                   ) -> dict[str, StatsTuple]:
        for cid, added in b.items():
            old = a.get(cid, ())
            width = max(len(old), len(added))
            a[cid] = tuple((old[i] if i < len(old) else 0) +
                           (added[i] if i < len(added) else 0) for i in range(width))
        return a


def ddl(columns: list[tuple[str, str]]) -> str:
    """Spark DDL of ``(column, type name)`` pairs (``_stream``, ``_b``: ``int``)."""
    return ", ".join(f"`{name}` {SPARK_TYPES[ftype]}"
                     for name, ftype in columns)


def _batch_id() -> int | None:
    context = TaskContext.get()
    value = context.getLocalProperty("streaming.sql.batchId") if context else None
    return int(value) if value is not None else None


def _task_of(batch: pa.RecordBatch) -> int:
    return int(batch.column(TASK_COLUMN)[0].as_py())


def bolt_function(topology: str, node: Node, accumulator: Any, work_dir: str
                  ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The mapInArrow function of a stateless bolt (``work_dir``: the topology's, for
    its run-time settings)."""
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        def done(counts: TaskStats) -> None:
            accumulator.add({node.id: (counts.emitted, counts.processed, counts.busy_s)})
        return run_bolt(topology, node, batches, _task_of, _batch_id(), done,
                        lambda: task_settings(work_dir))
    return run


def stateful_function(topology: str, op: StatefulOp, nodes: dict[str, Node],
                      accumulator: Any, work_dir: str, batch_rows: int = 0
                      ) -> Callable[..., Iterator[Any]]:
    """The applyInPandasWithState function of the merged stateful operator
    (``batch_rows``: the session's ``maxRecordsPerBatch``, see
    :func:`~.tasks.output_cuts`)."""
    # The operator's instances for the current task attempt: Spark calls the function
    # once per key and has no task start or end hook.
    tasks: dict[int, StatefulTask] = {}

    def run(key: tuple[Any, ...], pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
        context = TaskContext.get()
        attempt = context.taskAttemptId() if context else -1
        task = tasks.get(attempt)
        if task is None:
            tasks.clear()
            # The stateful output is the sink union's first child, so the partition
            # id of its rows is the state partition (see TASK_COLUMN).
            partition = context.partitionId() if context else 0
            task = StatefulTask(topology, op, nodes, partition % op.parallelism,
                                _batch_id(), task_settings(work_dir), batch_rows)
            tasks[attempt] = task
        before = task.counts()
        new_state, out = task.group(pdfs, state.get[0] if state.exists else None)
        if new_state is REMOVE:
            if state.exists:
                state.remove()
        else:
            state.update((new_state,))
        after = task.counts()
        accumulator.add({cid: (c.emitted - before[cid].emitted,
                               c.processed - before[cid].processed,
                               c.busy_s - before[cid].busy_s)
                         for cid, c in after.items()
                         if c.emitted != before[cid].emitted
                         or c.processed != before[cid].processed})
        if out is not None:
            yield from task.pieces(out)
    return run


def _sink_exports(plan: Plan) -> list[str]:
    return ([STATEFUL] if plan.stateful else []) + list(plan.exports)


class Builder:
    """Builds components' output DataFrames, each once, from given roots (the
    spouts' streams, or the tail's inputs sliced from the persisted batch)."""

    def __init__(self, plan: Plan, accumulator: Any, roots: dict[str, DataFrame],
                 work_dir: str, cached: bool = False, batch_rows: int = 0):
        self.plan = plan
        self.batch_rows = batch_rows
        self.accumulator = accumulator
        self.work_dir = work_dir
        #: Roots that are slices of a persisted batch: reading them twice costs nothing.
        self.cached = set(roots) if cached else set()
        self.frames: dict[str, DataFrame] = dict(roots)
        self.shared_frames: dict[str, DataFrame] = {}

    def output(self, cid: str) -> DataFrame:
        if cid not in self.frames:
            node = self.plan.nodes[cid]
            if node.kind != "bolt":
                raise KeyError(f"{cid!r} is no root of this phase")
            frame = _exchange(node, [self.slot_frame(s) for s in node.slots])
            self.frames[cid] = frame.mapInArrow(
                bolt_function(self.plan.topology, node, self.accumulator, self.work_dir),
                ddl(node.output.columns()))
        return self.frames[cid]

    def shared(self, cid: str) -> DataFrame:
        """``cid``'s output, through one round-robin exchange that all its uses share
        if it fans out (the plan module says why)."""
        if cid not in self.shared_frames:
            frame = self.output(cid)
            if self._fans_out(cid):
                frame = frame.repartition(self.plan.nodes[cid].parallelism)
            self.shared_frames[cid] = frame
        return self.shared_frames[cid]

    def _fans_out(self, cid: str) -> bool:
        return cid not in self.cached and self.plan.fans_out(cid)

    def use(self, cid: str, stream: int | None = None) -> DataFrame:
        """``cid``'s output for one use: all its columns, rows of stream index
        ``stream`` (all if None).

        Behind a shared exchange the whole filter is nondeterministic (guarded by
        ``spark_partition_id()``): Spark pushes every deterministic conjunct of a
        filter below an exchange, which would make the uses' exchanges differ (no
        reuse); and with no filter at all, two repartitions in a row collapse."""
        frame = self.shared(cid)
        selects = stream is not None and self.plan.nodes[cid].output.stream_column
        condition = F.col(STREAM_COLUMN).isin(stream) if selects else F.lit(True)
        if self._fans_out(cid):
            return frame.filter(F.when(F.spark_partition_id() >= 0, condition))
        return frame.filter(condition) if selects else frame

    def slot_frame(self, slot: Slot) -> DataFrame:
        """The upstream's rows of the slot's stream, all its columns renamed."""
        stream = self.plan.nodes[slot.source].output.stream(slot.stream)
        frame = self.use(slot.source, stream.index)
        return frame.select(*[F.col(src).alias(dst) for src, dst, _ in slot.carried])

    def stateful(self) -> DataFrame:
        """The merged applyInPandasWithState over every StatefulBolt's inputs."""
        op = self.plan.stateful
        assert op is not None
        parts = []
        for slot in op.slots:
            frame = self.slot_frame(slot)
            extra: list[SparkColumn] = []
            if op.bolt_column:
                extra.append(F.lit(op.bolts.index(slot.bolt)).cast("bigint")
                             .alias(BOLT_COLUMN))
            if op.slot_column:
                extra.append(F.lit(slot.index).cast("bigint").alias(SLOT_COLUMN))
                for j, k in enumerate(slot.key):
                    key = F.col(slot.columns[k].name)
                    if _mixed_key_types(op, j):
                        key = key.cast("string")
                    extra.append(key.alias(f"_k{j}"))
            parts.append(frame.select(*extra, *frame.columns) if extra else frame)
        merged = _union(parts)
        keys = ([BOLT_COLUMN] if op.bolt_column else []) + op.key_columns()
        return merged.groupBy(*keys).applyInPandasWithState(
            stateful_function(self.plan.topology, op, self.plan.nodes, self.accumulator,
                              self.work_dir, self.batch_rows),
            ddl(op.output_columns(self.plan.nodes)), STATE_SCHEMA, "Append",
            GroupStateTimeout.NoTimeout)


def _mixed_key_types(op: StatefulOp, j: int) -> bool:
    """Key field ``j`` has different Spark types in different inputs: then the key
    columns are compared as strings (an int 1 and a str "1" become one key)."""
    return len({SPARK_TYPES[s.columns[s.key[j]].type] for s in op.slots}) > 1


def _union(frames: list[DataFrame]) -> DataFrame:
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame, allowMissingColumns=True)
    return result


def _exchange(node: Node, frames: list[DataFrame]) -> DataFrame:
    """The bolt's input: its slots' rows spread over its tasks by their groupings,
    with ``_task`` (and ``_in`` for several inputs).

    One input: shuffle/none -> ``repartition(n)`` (round robin); fields ->
    ``repartition(n, key)``; global -> ``repartition(1)``; local_or_shuffle -> no
    exchange, ``coalesce(n)`` (fewer tasks when the upstream has fewer partitions);
    all -> one copy per task, hash-partitioned on a value that lands on that task.

    Several inputs need one exchange for all: each row gets its task ``_p`` from its
    own input's grouping (fields: ``pmod(hash(key), n)``; global: 0; all: one copy per
    task; shuffle, none and local_or_shuffle: the hash of the whole tuple, so equal
    tuples meet on one task, and local_or_shuffle is approximated by shuffle), then
    all go to partition ``_p`` exactly.
    """
    n = node.parallelism
    if len(frames) == 1:
        slot, frame = node.slots[0], frames[0]
        if slot.grouping in ("shuffle", "none"):
            frame = frame.repartition(n)
        elif slot.grouping == "fields":
            frame = frame.repartition(n, *[slot.columns[k].name for k in slot.key])
        elif slot.grouping == "global":
            frame = frame.repartition(1)
        elif slot.grouping == "local_or_shuffle":
            frame = frame.coalesce(n)
        else:                                               # all
            frame = _to_tasks(frame.withColumn("_p", F.explode(F.sequence(
                F.lit(0), F.lit(n - 1)))), n)
        return frame.withColumn(TASK_COLUMN, F.spark_partition_id())
    parts = []
    for slot, frame in zip(node.slots, frames):
        if slot.grouping == "fields":
            target = F.pmod(F.hash(*[F.col(slot.columns[k].name) for k in slot.key]),
                            F.lit(n))
        elif slot.grouping == "global":
            target = F.lit(0)
        elif slot.grouping == "all":
            target = F.explode(F.sequence(F.lit(0), F.lit(n - 1)))
        else:
            # Deterministic (a retried task routes rows as before, and exchange reuse
            # needs deterministic plans): by the hash of the whole tuple.
            target = F.pmod(F.hash(F.lit(slot.index), *[F.col(c) for c in frame.columns]),
                            F.lit(n))
        if slot.grouping != "all":       # sequence() gives ints, and Spark refuses a
            target = target.cast("int")  # generator nested in a cast
        parts.append(frame.select(F.lit(slot.index).cast("bigint").alias(SLOT_COLUMN),
                                  target.alias("_p"), *frame.columns))
    return _to_tasks(_union(parts), n).withColumn(TASK_COLUMN, F.spark_partition_id())


def _to_tasks(frame: DataFrame, n: int) -> DataFrame:
    """Send each row to partition ``_p`` exactly (and drop ``_p``)."""
    values = F.array(*[F.lit(v) for v in routing_values(n)])
    routed = frame.withColumn("_pv", F.element_at(values, F.col("_p") + 1))
    return routed.repartition(n, "_pv").drop("_p", "_pv")


def export_columns(plan: Plan, name: str) -> list[tuple[str, str]]:
    if name == STATEFUL:
        assert plan.stateful is not None
        return plan.stateful.output_columns(plan.nodes)
    return plan.nodes[name].output.columns()


def sink_frame(plan: Plan, frames: dict[str, DataFrame]) -> DataFrame:
    """The union of the exports, stateful first, each row tagged ``_leaf`` (its
    index), with all their columns (as ``l<index>_<column>``): the noop sink would
    not need them, but an export that fans out must read the columns its other uses
    read (see :meth:`Builder.use`)."""
    parts = []
    for index, name in enumerate(_sink_exports(plan)):
        parts.append(frames[name].select(
            F.lit(index).cast("int").alias(LEAF_COLUMN),
            *[F.col(c).alias(f"l{index}_{c}") for c, _ in export_columns(plan, name)]))
    return _union(parts)


def export_slice(plan: Plan, batch: DataFrame, name: str) -> DataFrame:
    """An export's rows of the sink batch, with their own column names."""
    index = _sink_exports(plan).index(name)
    return batch.filter(F.col(LEAF_COLUMN) == index).select(
        *[F.col(f"l{index}_{c}").alias(c) for c, _ in export_columns(plan, name)])


def stateful_outputs(plan: Plan, merged: DataFrame) -> dict[str, DataFrame]:
    """Each StatefulBolt's output DataFrame from the merged operator's."""
    op = plan.stateful
    assert op is not None
    result = {}
    for b, bolt in enumerate(op.bolts):
        frame = merged.filter(F.col(BOLT_COLUMN) == b) if op.bolt_column else merged
        prefix = op.output_prefix(bolt)
        result[bolt] = frame.select(*[F.col(prefix + c).alias(c) for c, _ in
                                      plan.nodes[bolt].output.columns()])
    return result


@dataclass
class Collected:
    """Leaf outputs gathered by the sink: batch id -> component -> stream -> tuples
    (a replayed batch replaces its earlier rows)."""

    batches: dict[int, dict[str, dict[str, list[tuple]]]] = field(default_factory=dict)

    def tuples(self) -> dict[str, dict[str, list[tuple]]]:
        result: dict[str, dict[str, list[tuple]]] = {}
        for batch_id in sorted(self.batches):
            for cid, streams in self.batches[batch_id].items():
                for stream, rows in streams.items():
                    result.setdefault(cid, {}).setdefault(stream, []).extend(rows)
        return result


def decode_exports(plan: Plan, table: pa.Table) -> dict[str, dict[str, list[tuple]]]:
    """The leaves' tuples among the sink's rows (a ``full`` sink frame as Arrow)."""
    leaf_of = table.column(LEAF_COLUMN)
    found: dict[str, dict[str, list[tuple]]] = {}
    for index, name in enumerate(_sink_exports(plan)):
        rows = table.filter(pc.equal(leaf_of, index))
        if name != STATEFUL:
            if name in plan.leaves:
                found[name] = _decode(plan.nodes[name].output, rows, f"l{index}_")
            continue
        op = plan.stateful
        assert op is not None
        for b, bolt in enumerate(op.bolts):
            if bolt not in plan.leaves:
                continue
            mine = rows
            if op.bolt_column:
                mine = rows.filter(pc.equal(rows.column(f"l{index}_{BOLT_COLUMN}"), b))
            found[bolt] = _decode(plan.nodes[bolt].output, mine,
                                  f"l{index}_{op.output_prefix(bolt)}")
    return found


def _decode(output: Output, table: pa.Table, prefix: str) -> dict[str, list[tuple]]:
    if not table.num_rows:
        return {}
    return output_rows(output, {c: table.column(prefix + c).to_pylist()
                                for c, _ in output.columns()})


class BatchSink:
    """The foreachBatch function: runs the tail over the batch (persisted: it is read
    more than once, and its plan holds the stateful operator, which must run once)
    and collects the leaves' tuples if asked. With a ``fence`` (:mod:`.claim`) it
    runs nothing, and the batch is not committed, once another driver holds the claim."""

    def __init__(self, plan: Plan, accumulator: Any, collected: "Collected | None",
                 work_dir: str, fence: Fence | None = None):
        self.plan = plan
        self.accumulator = accumulator
        self.collected = collected
        self.work_dir = work_dir
        self.fence = fence

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        if self.fence is not None and not self.fence.holds():
            raise ClaimLost(self.fence.path)
        plan = self.plan
        if not plan.has_tail:
            assert self.collected is not None
            self.collected.batches[batch_id] = decode_exports(plan, batch.toArrow())
            return
        batch = batch.persist()
        try:
            roots: dict[str, DataFrame] = {}
            for name in _sink_exports(plan):
                part = export_slice(plan, batch, name)
                if name == STATEFUL:
                    roots.update(stateful_outputs(plan, part))
                else:
                    roots[name] = part
            builder = Builder(plan, self.accumulator, roots, self.work_dir, cached=True)
            tail = [cid for cid in plan.leaves if plan.nodes[cid].phase == "tail"]
            if self.collected is None:
                # One job: the whole batch (head leaves, stateful) and the tail leaves.
                frames = [batch.select(F.col(LEAF_COLUMN))]
                frames += [builder.use(cid).select(F.lit(-1).alias(LEAF_COLUMN))
                           for cid in tail]
                _union(frames).write.format("noop").mode("overwrite").save()
                return
            found = decode_exports(plan, batch.toArrow())
            for cid in tail:
                found[cid] = _decode(plan.nodes[cid].output,
                                     builder.use(cid).toArrow(), "")
            self.collected.batches[batch_id] = found
        finally:
            batch.unpersist()


#: The session setting that bounds the rows of the Arrow batches Python workers exchange.
ARROW_BATCH_ROWS = "spark.sql.execution.arrow.maxRecordsPerBatch"


def arrow_batch_rows(spark: SparkSession) -> int:
    """The session's ``maxRecordsPerBatch`` (Spark's default 10000 if unset)."""
    return int(spark.conf.get(ARROW_BATCH_ROWS, "10000") or 10000)


def build_query(spark: SparkSession, plan: Plan, work_dir: Path, accumulator: Any,
                bounded: bool, collect: Collected | None, fence: Fence | None = None
                ) -> tuple[DataFrame, BatchSink | None]:
    """The streaming DataFrame of the sink, and the foreachBatch function to write it
    with (None: nothing to do per batch but run it, the ``noop`` sink). ``fence``: a
    cluster-mode driver's (:mod:`.claim`), asked by the spouts and the sink."""
    roots: dict[str, DataFrame] = {}
    for index, node in enumerate(plan.phase("head")):
        if node.kind != "spout":
            continue
        cls = source_class(node, index, plan.topology, work_dir, plan.max_batch,
                           pausable=not bounded, accumulator=accumulator,
                           schema_ddl=ddl(node.output.columns()), fence=fence)
        spark.dataSource.register(cls)
        roots[node.id] = spark.readStream.format(cls.format_name).load()
    builder = Builder(plan, accumulator, roots, str(work_dir),
                      batch_rows=arrow_batch_rows(spark))
    frames = {cid: builder.use(cid) for cid in plan.exports}
    if plan.stateful is not None:
        frames[STATEFUL] = builder.stateful()
    if collect is None and not plan.has_tail:
        if len(frames) == 1:
            # Nothing reads the rows: the one export goes to the noop sink as it is. The
            # sink frame's projection (``_leaf``, renamed columns) copied every row into
            # a new one in the JVM: 0.7 s of CPU per 2.5M word counts (20 % of the JVM's
            # time in the word count benchmark, measured).
            return next(iter(frames.values())), None
        return sink_frame(plan, frames), None
    sink = sink_frame(plan, frames)
    return sink, BatchSink(plan, accumulator, collect, str(work_dir), fence)
