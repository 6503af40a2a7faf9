"""How a run spec maps onto one Spark streaming query: columns, inputs, phases.

Pure data, no PySpark: :mod:`.dataflow` turns a :class:`Plan` into DataFrames and
:mod:`.tasks` runs user code against the column layouts described here.

::

    spouts ──> stateless bolts ──┬──> [one applyInPandasWithState] ──┐
      (head: streaming DataFrames)│    (every StatefulBolt, merged)   ├─> sink
                                  └──> head leaves / exports ─────────┘
                                                                       │
                                   tail: bolts downstream of a StatefulBolt,
                                   run in foreachBatch over the persisted batch

Why three phases (measured on Spark 4.3, see the runner tests):

- Spark accepts **one** applyInPandasWithState per query ("Multiple
  applyInPandasWithStates are not supported on a streaming DataFrames/Datasets"), so
  every StatefulBolt of a topology runs in one merged operator: their inputs are
  unioned with a ``_b`` (bolt) column in the grouping key. A StatefulBolt downstream of
  another cannot run (:class:`PlanError`).
- A DataFrame used twice in one query is computed twice, and a stateful operator may
  appear only once. So what consumes a stateful bolt's output (the *tail*) runs in
  ``foreachBatch`` over the batch, persisted once.
- A component whose output is used twice (:meth:`Plan.fans_out`) gets one
  round-robin exchange of its own that all its uses share, and Spark's exchange reuse
  computes it once. Without it the user code would run once per use, and a spout
  scanned twice fails the query at random: Spark 4.3 plans the scans in parallel
  threads over the one socket of the source's Python runner (EOFException or
  OutOfMemoryError in PythonStreamingSourceRunner.partitions, measured). Reuse needs
  identical exchanges, so every use reads all the columns (:class:`Slot`) and selects
  its stream behind a filter Spark cannot push below the exchange (see dataflow).

Column names are positional (``s0_1``: stream 0, field 1) because user field names
may clash case-insensitively or contain dots, which Spark column references resolve.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .spec import ComponentRun, RunSpec

#: Offsets per spout task per micro-batch when neither the topology's
#: ``topology.max.spout.pending`` nor the run's ``max_batch`` says (the lab's
#: throughput optimum at local[2] was 100k sentences per batch).
DEFAULT_MAX_BATCH = 100_000

#: Spark SQL type (DDL) of each field type; ``object`` is pickled into binary.
SPARK_TYPES = {"str": "string", "int": "bigint", "float": "double", "bool": "boolean",
               "bytes": "binary", "object": "binary"}

#: The column saying which stream a row of a multi-stream output belongs to.
STREAM_COLUMN = "_stream"
#: The column saying which input slot a row of a multi-input bolt came from.
SLOT_COLUMN = "_in"
#: The column saying which StatefulBolt of the merged stateful operator a row is for.
BOLT_COLUMN = "_b"
#: The task (partition of its stage) a row goes to: spark_partition_id() after the
#: exchange. TaskContext.partitionId() cannot be used: in the sink's stage it is the
#: index within the union of all leaves, not within the bolt's own partitions.
TASK_COLUMN = "_task"
#: The sink's column saying which export a row belongs to.
LEAF_COLUMN = "_leaf"


class PlanError(ValueError):
    """The topology cannot run as one Spark query; the message says why."""


@dataclass(frozen=True)
class Column:
    """One field of one stream, as a Spark column."""

    name: str            # Spark column name
    field: str           # the user's field name
    type: str            # str, int, float, bool, bytes, object


@dataclass(frozen=True)
class StreamOut:
    index: int
    name: str
    columns: tuple[Column, ...]

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(c.field for c in self.columns)


@dataclass(frozen=True)
class Output:
    """The columns of a component's output DataFrame.

    One stream: its fields. Several streams (or none with fields): a ``_stream`` column
    holding the stream index, then every stream's fields (null in other streams' rows).
    """

    streams: tuple[StreamOut, ...]
    stream_column: bool

    def columns(self) -> list[tuple[str, str]]:
        """``(column, type name)`` in order; ``_stream`` has type ``int``."""
        cols = [(STREAM_COLUMN, "int")] if self.stream_column else []
        for stream in self.streams:
            cols.extend((c.name, c.type) for c in stream.columns)
        return cols

    def stream(self, name: str) -> StreamOut:
        for stream in self.streams:
            if stream.name == name:
                return stream
        raise KeyError(name)


def output_of(comp: ComponentRun) -> Output:
    """The output layout of a component (streams sorted by name)."""
    streams = []
    for j, name in enumerate(sorted(comp.streams)):
        columns = tuple(Column(f"s{j}_{k}", field, ftype)
                        for k, (field, ftype) in enumerate(comp.streams[name]))
        streams.append(StreamOut(j, name, columns))
    with_fields = any(s.columns for s in streams)
    return Output(tuple(streams), stream_column=len(streams) > 1 or not with_fields)


@dataclass(frozen=True)
class Slot:
    """One input of a bolt: rows of ``source:stream`` in the bolt's input DataFrame.

    The input carries *all* the source's output columns (``i<index>_<column>``), not
    only the stream's: when the source fans out, every use must read the same columns,
    or Spark prunes each use's exchange differently and cannot reuse one for all.
    """

    index: int                     # the value of ``_in`` for its rows
    bolt: str                      # the consuming component
    source: str
    stream: str
    grouping: str                  # shuffle, fields, global, all, none, local_or_shuffle
    columns: tuple[Column, ...]    # the stream's fields, among ``carried``
    key: tuple[int, ...]           # positions of the grouping fields in ``columns``
    #: ``(source column, input column, type)`` of every column of the source.
    carried: tuple[tuple[str, str, str], ...] = ()

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(c.field for c in self.columns)


@dataclass(frozen=True)
class Node:
    """One component as the runner runs it."""

    id: str
    kind: str                      # spout, bolt or stateful
    script: str                    # module.Class
    parallelism: int
    conf: dict[str, Any]           # the topology's conf overridden by the component's
    output: Output
    slots: tuple[Slot, ...]        # inputs, in spec order (global slots for stateful)
    phase: str                     # head, stateful or tail

    @property
    def label(self) -> str:
        """``bolt 'split' (wordcount.SplitBolt)``: how errors name the component."""
        kind = "spout" if self.kind == "spout" else "bolt"
        return f"{kind} {self.id!r} ({self.script})"


@dataclass(frozen=True)
class StatefulOp:
    """The one applyInPandasWithState running every StatefulBolt of the topology."""

    bolts: tuple[str, ...]         # their ids; a row's ``_b`` indexes this
    slots: tuple[Slot, ...]        # every input of every one of them, indexed globally
    parallelism: int               # = spark.sql.shuffle.partitions at first start

    @property
    def bolt_column(self) -> bool:
        return len(self.bolts) > 1

    @property
    def slot_column(self) -> bool:
        return len(self.slots) > 1

    def key_columns(self) -> list[str]:
        """The grouping columns (besides ``_b``): the key fields themselves when there
        is a single input, else ``_k0..`` projected from each input's key fields."""
        if not self.slot_column:
            slot = self.slots[0]
            return [slot.columns[k].name for k in slot.key]
        return [f"_k{j}" for j in range(len(self.slots[0].key))]

    def output_prefix(self, bolt: str) -> str:
        """Prefix of a bolt's output columns in the merged output (``o1_s0_0``)."""
        return f"o{self.bolts.index(bolt)}_" if self.bolt_column else ""

    def output_columns(self, nodes: dict[str, "Node"]) -> list[tuple[str, str]]:
        """``(column, type)`` of the merged output: ``_b`` if several bolts, then each
        bolt's output columns, prefixed."""
        columns = [(BOLT_COLUMN, "int")] if self.bolt_column else []
        for bolt in self.bolts:
            prefix = self.output_prefix(bolt)
            columns.extend((prefix + name, ftype)
                           for name, ftype in nodes[bolt].output.columns())
        return columns


@dataclass(frozen=True)
class Plan:
    topology: str
    nodes: dict[str, Node]         # upstream before downstream
    stateful: StatefulOp | None
    #: Head components whose output goes to the sink: leaves, and what the tail reads.
    exports: tuple[str, ...]
    #: Components with no consumer (their emitted tuples are the run's output).
    leaves: tuple[str, ...]
    max_batch: int

    def consumers(self, cid: str) -> list[tuple[Node, Slot]]:
        """The bolts reading ``cid``'s output, with the slot they read it in."""
        return [(node, slot) for node in self.nodes.values() for slot in node.slots
                if slot.source == cid]

    def fans_out(self, cid: str) -> bool:
        """``cid``'s output is used more than once in its phase's plan (by several
        inputs, or by an input and the sink)."""
        node = self.nodes[cid]
        uses = sum(1 for consumer, _ in self.consumers(cid)
                   if consumer.phase in (node.phase, "stateful"))
        if cid in self.exports or (node.phase == "tail" and cid in self.leaves):
            uses += 1
        return uses > 1

    def phase(self, name: str) -> list[Node]:
        return [n for n in self.nodes.values() if n.phase == name]

    @property
    def has_tail(self) -> bool:
        return any(n.phase == "tail" for n in self.nodes.values())


def max_batch_of(spec: RunSpec) -> int:
    """Offsets per spout task per batch: ``topology.max.spout.pending``, else the run's
    ``max_batch``, else :data:`DEFAULT_MAX_BATCH`."""
    for value in (spec.conf.get("topology.max.spout.pending"), spec.run.get("max_batch")):
        if value is not None:
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise PlanError(f"max batch {value!r} must be a positive integer")
            return value
    return DEFAULT_MAX_BATCH


def build_plan(spec: RunSpec) -> Plan:
    """Lay out ``spec`` as one query.

    Raises:
        PlanError: a StatefulBolt downstream of another, a StatefulBolt input without
            fields grouping or with a key of another width, an unknown grouping.
    """
    order = spec.order()
    comps = spec.components
    stateful_ids = [cid for cid in order if comps[cid].stateful]
    downstream = _downstream_of(spec, stateful_ids)
    for cid in stateful_ids:
        if cid in downstream:
            raise PlanError(
                f"stateful bolt {cid!r} is downstream of another stateful bolt; a topology "
                "runs as one Spark query, which holds a single applyInPandasWithState "
                "(Spark refuses several), so StatefulBolts cannot be chained")
    outputs = {cid: output_of(comps[cid]) for cid in order}

    stateful_slots: list[Slot] = []
    nodes: dict[str, Node] = {}
    for cid in order:
        comp = comps[cid]
        conf = {**spec.conf, **comp.conf}
        if comp.kind == "spout":
            nodes[cid] = Node(cid, "spout", comp.script, comp.parallelism, conf,
                              outputs[cid], (), "head")
            continue
        kind = "stateful" if comp.stateful else "bolt"
        first = len(stateful_slots) if comp.stateful else 0
        slots = tuple(_slot(first + i, cid, inp, outputs[inp.component], comp)
                      for i, inp in enumerate(comp.inputs))
        if comp.stateful:
            widths = {len(s.key) for s in slots}
            if stateful_slots and widths != {len(stateful_slots[0].key)} or len(widths) > 1:
                raise PlanError(f"stateful bolt {cid!r}: all inputs of the stateful bolts "
                                "must group by the same number of fields (one key)")
            stateful_slots.extend(slots)
        phase = "stateful" if comp.stateful else ("tail" if cid in downstream else "head")
        nodes[cid] = Node(cid, kind, comp.script, comp.parallelism, conf, outputs[cid],
                          slots, phase)

    stateful = None
    if stateful_ids:
        pars = {comps[c].parallelism for c in stateful_ids}
        if len(pars) > 1:
            raise PlanError(f"stateful bolts {', '.join(map(repr, stateful_ids))} must have "
                            "the same parallelism: Spark keeps keyed state in one partition "
                            "count per query")
        stateful = StatefulOp(tuple(stateful_ids), tuple(stateful_slots), pars.pop())

    consumed = {s.source for n in nodes.values() for s in n.slots}
    leaves = tuple(cid for cid in order if cid not in consumed)
    read_by_tail = {s.source for n in nodes.values() if n.phase == "tail" for s in n.slots}
    exports = tuple(cid for cid in order if nodes[cid].phase == "head"
                    and (cid in leaves or cid in read_by_tail))
    return Plan(spec.name, nodes, stateful, exports, leaves, max_batch_of(spec))


def _slot(index: int, bolt: str, inp: Any, upstream: Output, comp: ComponentRun) -> Slot:
    where = f"bolt {bolt!r} input {inp.component}:{inp.stream}"
    try:
        stream = upstream.stream(inp.stream)
    except KeyError:
        raise PlanError(f"{where}: {inp.component!r} declares no stream "
                        f"{inp.stream!r}") from None
    if inp.grouping not in ("shuffle", "fields", "global", "all", "none",
                            "local_or_shuffle"):
        raise PlanError(f"{where}: grouping {inp.grouping!r} is not supported")
    if comp.stateful and inp.grouping != "fields":
        raise PlanError(f"{where}: a stateful bolt keys its state by a fields grouping; "
                        f"this input uses {inp.grouping} grouping")
    names = stream.field_names
    key = []
    for name in inp.fields:
        if name not in names:
            raise PlanError(f"{where}: groups by {name!r}, which the stream does not "
                            f"declare (its fields: {', '.join(names) or 'none'})")
        key.append(names.index(name))
    columns = tuple(Column(f"i{index}_{c.name}", c.field, c.type) for c in stream.columns)
    carried = tuple((name, f"i{index}_{name}", ftype) for name, ftype in upstream.columns())
    return Slot(index, bolt, inp.component, inp.stream, inp.grouping, columns, tuple(key),
                carried)


def _downstream_of(spec: RunSpec, roots: list[str]) -> set[str]:
    """Components reachable from ``roots`` (not counting the roots themselves unless a
    path leads back to one)."""
    consumers: dict[str, set[str]] = {}
    for cid, comp in spec.components.items():
        for inp in comp.inputs:
            consumers.setdefault(inp.component, set()).add(cid)
    seen: set[str] = set()
    todo = [c for r in roots for c in consumers.get(r, ())]
    while todo:
        cid = todo.pop()
        if cid not in seen:
            seen.add(cid)
            todo.extend(consumers.get(cid, ()))
    return seen


# -- task routing -----------------------------------------------------------------------
#
# Spark's HashPartitioning sends a row to pmod(murmur3(key, seed 42), n). To route a row
# to task i exactly (all grouping, several inputs), the runner puts a value v_i whose
# hash lands in partition i in the partitioning column; repartitionByRange would do the
# same with a sampling job in every micro-batch.

def _rotl32(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & 0xFFFFFFFF


def spark_hash_int(value: int, seed: int = 42) -> int:
    """Spark's ``hash()`` of an IntegerType value (Murmur3_x86_32.hashInt), signed."""
    k1 = (value & 0xFFFFFFFF) * 0xCC9E2D51 & 0xFFFFFFFF
    k1 = _rotl32(k1, 15) * 0x1B873593 & 0xFFFFFFFF
    h1 = (seed & 0xFFFFFFFF) ^ k1
    h1 = (_rotl32(h1, 13) * 5 + 0xE6546B64) & 0xFFFFFFFF
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & 0xFFFFFFFF
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & 0xFFFFFFFF
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 >= 1 << 31 else h1


def routing_values(n: int) -> list[int]:
    """``v[i]``: an int whose Spark hash partition among ``n`` is ``i``."""
    found: dict[int, int] = {}
    candidate = 0
    while len(found) < n:
        found.setdefault(spark_hash_int(candidate) % n, candidate)
        candidate += 1
    return [found[i] for i in range(n)]
