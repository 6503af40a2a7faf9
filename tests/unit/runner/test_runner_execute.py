"""The runner without Spark: plans, and user code over plain pyarrow batches."""

from __future__ import annotations

import pickle
import threading
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from nimbus_thrift.runner.columns import ARROW_TYPES, to_array, to_numpy
from nimbus_thrift.runner.decode import TupleDecoder, output_rows
from nimbus_thrift.runner.emitter import Emitter
from nimbus_thrift.runner.figures import FigureTracker, describe_failure
from nimbus_thrift.runner.local import spec_of
from nimbus_thrift.runner.plan import (DEFAULT_MAX_BATCH, Column, PlanError, build_plan,
                                       routing_values, spark_hash_int)
from nimbus_thrift.runner.tasks import (REMOVE, BoltTask, Counts, SpoutTask, StatefulTask,
                                        run_bolt)
from nimbus_thrift.runner.usercode import UserCodeError, new_instance
from nimbus_thrift.topology import (Bolt, Grouping, Spout, StatefulBolt, Stream,
                                    Topology)
from nimbus_thrift.topology.components import EmittedColumns
from topologies import numbers, wordcount


# -- components used below (imported by the runner as test_runner_execute.<Class>) --------

class Numbers(Spout):
    outputs = {"n": int}

    def available(self):
        return 10

    def read(self, start, end):
        for i in range(start, end):
            if i % 3 == 0:
                self.emit((i, f"x{i}"), "tagged")
            yield (i,)


Numbers.outputs = [Stream("default", {"n": int}), Stream("tagged", {"n": int, "tag": str})]


class Parity(Bolt):
    """Returns (n, n*2) on the default stream and emits odd numbers on 'odd'."""

    outputs = [Stream("default", {"n": int, "double": float}),
               Stream("odd", {"n": int, "info": object})]

    def initialize(self, conf, context):
        self.seen = []
        self.ended = []

    def process(self, tup):
        self.seen.append((tup.component, tup.stream, tup.n))
        if tup.n % 2:
            self.emit((tup.n, {"n": tup.n}), "odd")
        return [(tup.n, tup.n * 2)]

    def end_batch(self, batch_id):
        self.ended.append(batch_id)
        self.emit((-1, None), "odd")


class Sink(Bolt):
    outputs = {"n": int, "info": object}

    def process(self, tup):
        return [(tup.n, tup.info)]


class Counter(StatefulBolt):
    """Counts n per key; emits (key, count); removes the key's state at n == 99."""

    outputs = {"key": int, "count": int}

    def initial_state(self, key):
        return 0

    def process(self, tup, state):
        if tup.n == 99:
            state.remove()
            return None
        state.value += 1
        return [(state.key[0], state.value)]


class Units(Topology):
    numbers = Numbers.spec(par=2)
    parity = Parity.spec(inputs={numbers: Grouping.shuffle}, par=2)
    sink = Sink.spec(inputs={parity["odd"]: Grouping.fields("n")}, par=1)


class Keyed(Spout):
    outputs = {"key": int, "n": int}


class Counting(Topology):
    source = Keyed.spec(par=1)
    counter = Counter.spec(inputs={source: Grouping.fields("key")}, par=2)


class Chained(Topology):
    source = Keyed.spec(par=1)
    first = Counter.spec(inputs={source: Grouping.fields("key")}, par=2)
    second = Counter.spec(inputs={first: Grouping.fields("key")}, par=2)


def plan_of(topology, conf=None, run=None):
    return build_plan(spec_of(topology, conf, run))


def slot_batch(slot, rows, task=0):
    """An input batch of ``slot``: its stream's fields, as the runner lays them out."""
    arrays = []
    for k, column in enumerate(slot.columns):
        values = [row[k] for row in rows]
        if column.type == "object":
            values = [pickle.dumps(v) for v in values]
        arrays.append(pa.array(values, ARROW_TYPES[column.type]))
    names = [c.name for c in slot.columns]
    arrays.append(pa.array([task] * len(rows), pa.int32()))
    return pa.RecordBatch.from_arrays(arrays, names=names + ["_task"])


def rows_of(node, batches):
    table = pa.Table.from_batches(batches) if batches else None
    if table is None:
        return {}
    return output_rows(node.output, {c: table.column(c).to_pylist()
                                     for c in table.column_names})


# -- plan ----------------------------------------------------------------------------------

def test_wordcount_plan_phases_columns_and_keys():
    plan = plan_of(wordcount.WordCount)
    assert [n.phase for n in plan.nodes.values()] == ["head", "head", "stateful"]
    split = plan.nodes["split"]
    assert split.slots[0].columns[0].name == "i0_s0_0"
    assert split.slots[0].columns[0].field == "sentence"
    assert split.output.columns() == [("s0_0", "str")]
    assert plan.stateful is not None
    assert plan.stateful.bolts == ("count",)
    assert plan.stateful.key_columns() == ["i0_s0_0"]
    assert plan.stateful.parallelism == 2
    assert plan.exports == () and plan.leaves == ("count",)
    assert not plan.has_tail
    assert not any(plan.fans_out(cid) for cid in plan.nodes)


def test_streams_plan_merges_stateful_bolts_and_puts_their_consumers_in_the_tail():
    plan = plan_of(numbers.Streams)
    op = plan.stateful
    assert op is not None and op.bolts == ("even_count", "sums")
    assert op.bolt_column and op.slot_column
    assert [s.stream for s in op.slots] == ["even", "even", "odd"]
    assert op.key_columns() == ["_k0"]
    assert plan.nodes["doubled"].phase == "tail"
    assert plan.exports == ("digits", "evens")
    assert plan.fans_out("classify") and not plan.fans_out("numbers")
    # The multi-stream output has a _stream column; every input carries all of it.
    classify = plan.nodes["classify"].output
    assert classify.stream_column
    slot = plan.nodes["digits"].slots[0]
    assert [c for _, c, _ in slot.carried] == [
        "i0__stream", "i0_s0_0", "i0_s0_1", "i0_s1_0", "i0_s1_1", "i0_s1_2"]
    assert [c.name for c in slot.columns] == ["i0_s1_0", "i0_s1_1", "i0_s1_2"]


def test_chained_stateful_bolts_are_refused():
    with pytest.raises(PlanError, match="'second' is downstream of another stateful"):
        plan_of(Chained)


def test_max_batch_prefers_the_topology_conf_then_the_run():
    assert plan_of(Counting).max_batch == DEFAULT_MAX_BATCH
    assert plan_of(Counting, run={"max_batch": 7}).max_batch == 7
    assert plan_of(Counting, {"topology.max.spout.pending": 5},
                   {"max_batch": 7}).max_batch == 5


def test_spark_hash_and_routing_values():
    # Values of SELECT hash(CAST(x AS INT)) on Spark 4.3.
    assert [spark_hash_int(v) for v in (0, 1, -1, 42, 2147483647)] == [
        933211791, -559580957, -1604776387, 29417773, 133916647]
    for n in (1, 2, 3, 8, 13):
        values = routing_values(n)
        assert [spark_hash_int(v) % n for v in values] == list(range(n))


# -- bolts ---------------------------------------------------------------------------------

def test_tuples_are_named_and_say_where_they_come_from():
    plan = plan_of(Units)
    decoder = TupleDecoder(plan.nodes["parity"].slots[0])
    (tup,) = decoder.from_arrow(slot_batch(plan.nodes["parity"].slots[0], [(7,)]))
    assert tup.n == 7 and tup[0] == 7
    assert (tup.component, tup.stream) == ("numbers", "default")


def test_a_field_named_stream_wins_over_the_attribute():
    slot = plan_of(Units).nodes["parity"].slots[0]
    renamed = type(slot)(slot.index, slot.bolt, slot.source, slot.stream, slot.grouping,
                         (Column("i0_s0_0", "stream", "int"),), ())
    (tup,) = TupleDecoder(renamed).from_arrow(
        pa.RecordBatch.from_arrays([pa.array([3])], names=["i0_s0_0"]))
    assert tup.stream == 3 and tup.component == "numbers"


def test_bolt_returns_emits_on_named_streams_and_ends_the_batch():
    plan = plan_of(Units)
    node = plan.nodes["parity"]
    task = BoltTask("Units", node, task=1, batch_id=5)
    out = task.feed(slot_batch(node.slots[0], [(1,), (2,), (3,)], task=1))
    rows = rows_of(node, out)
    assert rows["default"] == [(1, 2.0), (2, 4.0), (3, 6.0)]
    assert rows["odd"] == [(1, {"n": 1}), (3, {"n": 3})]
    # One batch per stream, each with the full layout: _stream, then every column.
    assert [b.column("_stream").to_pylist() for b in out] == [[0, 0, 0], [1, 1]]
    assert out[0].column("s1_1").null_count == 3
    assert task.instance.seen[0] == ("numbers", "default", 1)
    assert task.instance.context.task == 1 and task.instance.context.batch_id == 5
    assert rows_of(node, task.finish()) == {"odd": [(-1, None)]}
    assert task.instance.ended == [5]
    assert (task.counts.processed, task.counts.emitted) == (3, 6)


def test_object_fields_are_pickled_between_bolts():
    plan = plan_of(Units)
    parity, sink = plan.nodes["parity"], plan.nodes["sink"]
    out = BoltTask("Units", parity, 0, 0).feed(slot_batch(parity.slots[0], [(5,)]))
    odd = [b for b in out if b.column("_stream")[0].as_py() == 1][0]
    assert pickle.loads(odd.column("s1_1")[0].as_py()) == {"n": 5}
    # The sink's input is the odd stream, renamed for its slot.
    slot = sink.slots[0]
    batch = pa.RecordBatch.from_arrays(
        [odd.column(src) for src, _, _ in slot.carried] + [pa.array([0] * odd.num_rows)],
        names=[dst for _, dst, _ in slot.carried] + ["_task"])
    assert rows_of(sink, BoltTask("Units", sink, 0, 0).feed(batch)) == {
        "default": [(5, {"n": 5})]}


def test_run_bolt_makes_no_instance_for_an_empty_partition():
    node = plan_of(Units).nodes["parity"]
    counts = []
    empty = slot_batch(node.slots[0], [])
    assert list(run_bolt("Units", node, [empty], lambda b: 0, 1, counts.append)) == []
    assert counts == []
    out = list(run_bolt("Units", node, [slot_batch(node.slots[0], [(1,)], task=1)],
                        lambda b: b.column("_task")[0].as_py(), 1, counts.append))
    assert rows_of(node, out)["odd"] == [(1, {"n": 1}), (-1, None)]
    assert counts == [Counts(emitted=3, processed=1)]


class _Emitting(Bolt):
    outputs = {"word": str, "count": int}

    def process(self, tup):
        return self.bad


@pytest.mark.parametrize("bad, message", [
    ([("a", "3")], "emitted '3' (str) on stream 'default' as field 'count', "
                   "which is declared int"),
    ([("a", 1.5)], "emitted 1.5 (float) on stream 'default' as field 'count'"),
    ([("a", True)], "emitted True (bool) on stream 'default' as field 'count'"),
    ([(3, 1)], "emitted 3 (int) on stream 'default' as field 'word', which is declared str"),
    ([("a", 2**70)], "emitted 1180591620717411303424 (int)"),
    ([("a",)], "emitted ('a',) on stream 'default'; its tuples are sequences of 2 values "
               "(word, count)"),
    (["ab"], "emitted 'ab' on stream 'default'"),
    ([5], "emitted 5 on stream 'default'"),
])
def test_output_type_errors_name_component_stream_and_field(bad, message):
    class Top(Topology):
        numbers = Numbers.spec()
        emitting = _Emitting.spec(inputs=[numbers])
    node = build_plan(spec_of(Top)).nodes["emitting"]
    task = BoltTask("Top", node, 0, 0)
    task.instance.bad = bad
    with pytest.raises(UserCodeError) as caught:
        task.feed(slot_batch(node.slots[0], [(1,)]))
    assert str(caught.value).startswith(
        "bolt 'emitting' (test_runner_execute._Emitting) ")
    assert message in str(caught.value)
    assert caught.value.component == "emitting"


def test_ints_are_accepted_as_floats_and_none_as_null():
    node = plan_of(Units).nodes["parity"]
    emitter = Emitter(node)
    (batch,) = emitter.batches({"default": [[(1, 2), (None, None)]]})
    assert batch.column("s0_1").type == pa.float64()
    assert batch.column("s0_1").to_pylist() == [2.0, None]


def test_undeclared_streams_and_exceptions_name_the_component():
    node = plan_of(Units).nodes["parity"]
    task = BoltTask("Units", node, 0, 0)
    task.instance.emit((1,), "nowhere")
    with pytest.raises(UserCodeError, match="emitted on stream 'nowhere', which it "
                                            "does not declare"):
        task.feed(slot_batch(node.slots[0], [(2,)]))
    task = BoltTask("Units", node, 0, 0)
    with pytest.raises(UserCodeError, match=r"^bolt 'parity' \(test_runner_execute"
                                            r"\.Parity\) raised TypeError in process"):
        task.feed(pa.RecordBatch.from_arrays([pa.array([None], pa.int64())],
                                             names=["i0_s0_0"]))


def test_a_missing_class_is_a_clear_error():
    node = plan_of(Units).nodes["parity"]
    missing = type(node)(node.id, node.kind, "test_runner_execute.Nope", node.parallelism,
                         node.conf, node.output, node.slots, node.phase)
    with pytest.raises(UserCodeError, match="cannot import 'test_runner_execute.Nope'"):
        new_instance("Units", missing, 0, None)


# -- spouts --------------------------------------------------------------------------------

def test_spout_read_yields_chunks_of_every_stream():
    node = plan_of(Units).nodes["numbers"]
    task = SpoutTask("Units", node, task=0, batch_id=3)
    batches = list(task.read(0, 10, chunk=4))
    rows = rows_of(node, batches)
    assert rows["default"] == [(i,) for i in range(10)]
    assert rows["tagged"] == [(0, "x0"), (3, "x3"), (6, "x6"), (9, "x9")]
    assert max(b.num_rows for b in batches) <= 4
    assert task.emitter.emitted == 14


# -- stateful bolts ------------------------------------------------------------------------

def _frame(op, rows):
    slot = op.slots[0]
    return pd.DataFrame({c.name: [row[k] for row in rows]
                         for k, c in enumerate(slot.columns)})


def test_stateful_group_updates_pickled_state_per_key():
    plan = plan_of(Counting)
    op = plan.stateful
    task = StatefulTask("Counting", op, plan.nodes, task=1, batch_id=0)
    state, out = task.group([_frame(op, [(4, 10), (4, 11)])], None)
    assert pickle.loads(state) == 2
    assert list(out.itertuples(index=False, name=None)) == [(4, 1), (4, 2)]
    state, out = task.group([_frame(op, [(4, 12)])], state)
    assert pickle.loads(state) == 3 and out.values.tolist() == [[4, 3]]
    assert task.instances[0].context.task == 1
    assert task.counts() == {"counter": Counts(emitted=3, processed=3)}


def test_stateful_remove_drops_the_state_and_a_later_tuple_starts_afresh():
    plan = plan_of(Counting)
    op = plan.stateful
    task = StatefulTask("Counting", op, plan.nodes, 0, 0)
    state, _ = task.group([_frame(op, [(1, 5), (1, 99)])], None)
    assert state is REMOVE
    state, out = task.group([_frame(op, [(1, 5), (1, 99), (1, 6)])], pickle.dumps(7))
    assert pickle.loads(state) == 1
    assert out.values.tolist() == [[1, 8], [1, 1]]


class _FastCounter(StatefulBolt):
    outputs = {"key": int, "count": int}

    def initial_state(self, key):
        return 0

    def process_key(self, tuples, state):
        state.value += len(tuples)
        self.seen = repr(tuples)
        return [(state.key[0], state.value)]


def test_process_key_sees_all_tuples_of_a_key_without_making_them():
    plan = plan_of(Counting)
    nodes = dict(plan.nodes)
    node = nodes["counter"]
    nodes["counter"] = type(node)(node.id, node.kind, "test_runner_execute._FastCounter",
                                  node.parallelism, node.conf, node.output, node.slots,
                                  node.phase)
    task = StatefulTask("Counting", plan.stateful, nodes, 0, 0)
    state, out = task.group([_frame(plan.stateful, [(3, i) for i in range(5)])], None)
    assert pickle.loads(state) == 5 and out.values.tolist() == [[3, 5]]
    assert task.instances[0].seen == "<5 tuples>"      # never materialised


# -- columns -----------------------------------------------------------------------------

class _ColumnEmitter(Bolt):
    """Per tuple: a tuple on 'odd', then ``self.columns`` on ``self.stream``, then
    another tuple on 'odd'; ``self.at_end`` (columns) on the default stream at the end."""

    outputs = [Stream("default", {"word": str, "count": int}),
               Stream("odd", {"n": int, "info": object})]

    def initialize(self, conf, context):
        self.columns, self.stream, self.at_end = None, "default", None

    def process(self, tup):
        self.emit((tup.n, "before"), "odd")
        self.emit_columns(self.columns, self.stream)
        self.emit((tup.n, "after"), "odd")

    def end_batch(self, batch_id):
        if self.at_end is not None:
            self.emit_columns(self.at_end)


class ColumnsOut(Topology):
    numbers = Numbers.spec()
    columns = _ColumnEmitter.spec(inputs=[numbers])


def _columns_task(columns, stream="default"):
    node = plan_of(ColumnsOut).nodes["columns"]
    task = BoltTask("ColumnsOut", node, 0, 7)
    task.instance.columns, task.instance.stream = columns, stream
    return node, task


#: The same two tuples, ("a", 1) and ("b", 2), as every kind of column user code may
#: emit: (id, columns).
SAME_COLUMNS = [
    ("frame", lambda: pd.DataFrame({"count": [1, 2], "word": ["a", "b"]},
                                   index=[10, 20])),
    ("lists", lambda: {"word": ["a", "b"], "count": [1, 2]}),
    ("numpy", lambda: {"word": np.array(["a", "b"]), "count": np.array([1, 2], np.uint8)}),
    ("numpy objects", lambda: {"word": np.array(["a", "b"], object),
                               "count": np.arange(1, 3)}),
    ("arrow", lambda: {"word": pa.array(["a", "b"], pa.large_string()),
                       "count": pa.chunked_array([[1], [2]], pa.int32())}),
    ("series", lambda: {"word": pd.Series(["a", "b"], dtype="string"),
                        "count": pd.Series([1, 2], dtype="Int64")}),
    ("category", lambda: {"word": pd.Series(["a", "b"], dtype="category"),
                          "count": pd.Series([1, 2])}),
    ("iterables", lambda: {"word": ("a", "b"), "count": range(1, 3)}),
]


@pytest.mark.parametrize("make", [m for _, m in SAME_COLUMNS],
                         ids=[i for i, _ in SAME_COLUMNS])
def test_columns_of_every_kind_make_the_same_tuples_in_both_outputs(make):
    node = plan_of(ColumnsOut).nodes["columns"]
    emitter = Emitter(node)
    # Arrow batches (stateless bolts, spouts): typed as declared.
    instance = SimpleNamespace(_emitted=[("default", EmittedColumns(make()))])
    (batch,) = emitter.batches(emitter.drain(instance))
    assert rows_of(node, [batch]) == {"default": [("a", 1), ("b", 2)]}
    assert (batch.column("s0_0").type, batch.column("s0_1").type) == (pa.string(),
                                                                      pa.int64())
    # numpy columns (the stateful operator's pandas output): ints as int64.
    instance = SimpleNamespace(_emitted=[("default", EmittedColumns(make()))])
    count, arrays = emitter.arrays(emitter.drain(instance))
    assert count == 2 and arrays["s0_0"].tolist() == ["a", "b"]
    assert arrays["s0_1"].dtype == np.int64 and arrays["s0_1"].tolist() == [1, 2]
    assert arrays["_stream"].tolist() == [0, 0] and arrays["s1_1"].tolist() == [None, None]
    assert emitter.emitted == 4                       # rows, not columns or calls


def test_a_numpy_column_of_the_field_dtype_is_taken_as_it_is():
    node = plan_of(ColumnsOut).nodes["columns"]
    count = node.output.stream("default").columns[1]
    values = np.arange(5)
    assert to_numpy(node, "default", count, values) is values
    small = to_numpy(node, "default", count, np.arange(5, dtype=np.int16))
    assert small.dtype == np.int64 and small.tolist() == [0, 1, 2, 3, 4]
    parity = plan_of(Units).nodes["parity"]
    double = parity.output.stream("default").columns[1]
    floats = to_numpy(parity, "default", double, np.array([1, 2], np.int32))
    assert floats.dtype == np.float64 and floats.tolist() == [1.0, 2.0]
    assert to_array(parity, "default", double, np.arange(2)).type == pa.float64()


def test_emit_columns_on_a_named_stream_keeps_the_order_of_emits():
    node, task = _columns_task({"n": np.array([7, 8]), "info": [{"a": 1}, None]}, "odd")
    task.instance.at_end = pd.DataFrame({"word": ["x", "y"], "count": [3, 4]})
    out = task.feed(slot_batch(node.slots[0], [(1,)]))
    assert rows_of(node, out) == {"odd": [(1, "before"), (7, {"a": 1}), (8, None),
                                          (1, "after")]}
    assert len(out) == 1                              # the stream's parts in one batch
    # An object field pickles Python values, not numpy scalars.
    assert type(rows_of(node, out)["odd"][1][0]) is int
    assert rows_of(node, task.finish()) == {"default": [("x", 3), ("y", 4)]}
    assert (task.counts.processed, task.counts.emitted) == (1, 6)


def test_columns_with_nulls_and_no_rows():
    node, task = _columns_task({"word": ["a", None], "count": [None, 2]})
    assert rows_of(node, task.feed(slot_batch(node.slots[0], [(1,)])))["default"] == [
        ("a", None), (None, 2)]
    emitter = Emitter(node)
    instance = SimpleNamespace(_emitted=[("default", EmittedColumns(
        {"word": ["a", None], "count": pa.array([None, 2])}))])
    _, arrays = emitter.arrays(emitter.drain(instance))
    assert arrays["s0_0"].tolist() == ["a", None] and arrays["s0_1"].tolist() == [None, 2]
    node, task = _columns_task({"word": [], "count": np.array([], np.int64)})
    assert task.feed(slot_batch(node.slots[0], [(1,)]))[1:] == []  # only 'odd' tuples
    assert task.counts.emitted == 2


LABEL = "bolt 'columns' (test_runner_execute._ColumnEmitter) "


@pytest.mark.parametrize("columns, message", [
    ({"word": ["a"]},
     "emitted columns on stream 'default' without field 'count' (its fields: word, count)"),
    ({"word": ["a"], "count": [1], "extra": [2]},
     "emitted columns on stream 'default' with field 'extra', which it does not declare "
     "(its fields: word, count)"),
    (pd.DataFrame({"word": ["a"], "counts": [1]}),
     "emitted columns on stream 'default' without field 'count' (its fields: word, count)"),
    (pd.DataFrame([["a", 1, 2]], columns=["word", "count", "count"]),
     "emitted a DataFrame on stream 'default' with column 'count' twice (its fields: "
     "word, count)"),
    ({"word": ["a", "b"], "count": [1]},
     "emitted columns of different lengths on stream 'default': 'word' has 2 values, "
     "'count' has 1"),
    ({"word": ["a"], "count": np.arange(3)},
     "emitted columns of different lengths on stream 'default': 'word' has 1 values, "
     "'count' has 3"),
    ({"word": ["a"], "count": ["1"]},
     "emitted '1' (str) on stream 'default' as field 'count', which is declared int"),
    ({"word": ["a"] * 20, "count": [1] * 19 + [True]},
     "emitted True (bool) on stream 'default' as field 'count', which is declared int"),
    ({"word": np.array(["a", 3], object), "count": [1, 2]},
     "emitted 3 (int) on stream 'default' as field 'word', which is declared str"),
    ({"word": ["a"], "count": np.array([1.5])},
     "emitted a numpy column of dtype float64 on stream 'default' as field 'count', "
     "which is declared int"),
    ({"word": ["a"], "count": np.array([True])},
     "emitted a numpy column of dtype bool on stream 'default' as field 'count', which "
     "is declared int"),
    ({"word": np.array([1]), "count": [1]},
     "emitted a numpy column of dtype int64 on stream 'default' as field 'word', which "
     "is declared str"),
    ({"word": ["a"], "count": np.array([2**63], np.uint64)},
     "emitted 9223372036854775808 (uint64) on stream 'default' as field 'count', which "
     "is declared int (64-bit signed)"),
    ({"word": ["a"], "count": pa.array([1.5])},
     "emitted an Arrow column of type double on stream 'default' as field 'count', "
     "which is declared int"),
    ({"word": pa.array([b"a"]), "count": [1]},
     "emitted an Arrow column of type binary on stream 'default' as field 'word', "
     "which is declared str"),
    ({"word": "a", "count": 1},
     "emitted 'a' (str) as field 'word' on stream 'default'; a column is a list, numpy "
     "array, pyarrow Array or pandas Series"),
    ({"word": ["a"], "count": np.ones((1, 1), np.int64)},
     "emitted a 2-dimensional numpy array as field 'count' on stream 'default'; a column "
     "is one-dimensional"),
    ([("a", 1)],
     "emitted [('a', 1)] (list) as columns on stream 'default'; columns are a pandas "
     "DataFrame or a mapping of field name to a list, numpy array, pyarrow Array or "
     "pandas Series"),
])
@pytest.mark.parametrize("output", ["arrow", "numpy"])
def test_column_errors_name_component_stream_and_field(columns, message, output):
    node = plan_of(ColumnsOut).nodes["columns"]
    emitter = Emitter(node)
    instance = SimpleNamespace(_emitted=[("default", EmittedColumns(columns))])
    with pytest.raises(UserCodeError) as caught:
        pending = emitter.drain(instance)
        emitter.batches(pending) if output == "arrow" else emitter.arrays(pending)
    assert str(caught.value) == LABEL + message
    assert caught.value.component == "columns"
    assert emitter.emitted == 0


class _Unpicklable:
    def __reduce__(self):
        raise TypeError("not this one")

    def __repr__(self):
        return "<unpicklable>"


def test_object_fields_must_pickle_in_columns_and_tuples():
    node, task = _columns_task({"n": [1, 2], "info": [None, _Unpicklable()]}, "odd")
    with pytest.raises(UserCodeError) as caught:
        task.feed(slot_batch(node.slots[0], [(1,)]))
    assert str(caught.value) == (
        LABEL + "emitted <unpicklable> (_Unpicklable) on stream 'odd' as field 'info', "
        "which cannot be pickled (TypeError: not this one)")
    # A tuple's object value: the same error (it was a bare TypeError).
    node, task = _columns_task({"word": [], "count": []})
    task.instance.emit((3, threading.Lock()), "odd")
    with pytest.raises(UserCodeError, match=r"\(lock\) on stream 'odd' as field "
                                            r"'info', which cannot be pickled"):
        task.feed(slot_batch(node.slots[0], [(1,)]))


def test_emit_columns_on_an_undeclared_stream_and_returned_dicts_in_process():
    node, task = _columns_task({"word": ["a"], "count": [1]}, "nowhere")
    with pytest.raises(UserCodeError) as caught:
        task.feed(slot_batch(node.slots[0], [(1,)]))
    assert str(caught.value) == (LABEL + "emitted on stream 'nowhere', which it does not "
                                 "declare (its streams: default, odd)")
    # process() returns tuples: a dict there is iterated (its keys), and the error says
    # how to emit columns instead.
    parity = plan_of(Units).nodes["parity"]
    emitter = Emitter(parity)
    emitter.rows.extend({"n": [1], "double": [2.0]})
    with pytest.raises(UserCodeError) as caught:
        emitter.batches(emitter.drain(SimpleNamespace(_emitted=[])))
    assert str(caught.value) == (
        "bolt 'parity' (test_runner_execute.Parity) emitted 'n' on stream 'default'; its "
        "tuples are sequences of 2 values (n, double); to return or emit columns, use a "
        "mapping of field to column from process_key or self.emit_columns()")


def test_a_spout_may_emit_columns():
    node = plan_of(Units).nodes["numbers"]
    task = SpoutTask("Units", node, 0, 0)
    task.instance.emit_columns({"n": np.arange(3), "tag": ["p", "q", "r"]}, "tagged")
    rows = rows_of(node, list(task.read(0, 1)))
    assert rows["tagged"] == [(0, "p"), (1, "q"), (2, "r"), (0, "x0")]   # in order
    assert task.emitter.emitted == 5


class _ColumnCounter(StatefulBolt):
    """Returns a key's running counts as the columns named by the conf's 'columns'
    (and emits the key's total on 'totals' as columns)."""

    outputs = [Stream("default", {"key": int, "count": int}),
               Stream("totals", {"key": int, "total": float})]

    def initialize(self, conf, context):
        self.kind = conf["columns"]

    def initial_state(self, key):
        return 0

    def process_key(self, tuples, state):
        first, n = state.value, len(tuples)
        state.value = first + n
        self.emit_columns({"key": [state.key[0]], "total": np.array([state.value])},
                          "totals")
        keys, counts = [state.key[0]] * n, np.arange(first + 1, first + n + 1)
        if self.kind == "frame":
            return pd.DataFrame({"count": counts, "key": keys})
        if self.kind == "lists":
            return {"key": keys, "count": counts.tolist()}
        if self.kind == "arrow":
            return {"key": pa.array(keys, pa.int8()), "count": pa.array(counts)}
        if self.kind == "none":
            return None
        return {"key": np.array(keys), "count": counts}


class ColumnCounting(Topology):
    source = Keyed.spec(par=1)
    counter = _ColumnCounter.spec(inputs={source: Grouping.fields("key")}, par=2)


@pytest.mark.parametrize("kind", ["frame", "lists", "arrow", "numpy"])
def test_process_key_returns_columns(kind):
    plan = plan_of(ColumnCounting, {"columns": kind})
    op = plan.stateful
    task = StatefulTask("ColumnCounting", op, plan.nodes, 0, 0)
    state, out = task.group([_frame(op, [(4, 10), (4, 11), (4, 12)])], pickle.dumps(2))
    assert pickle.loads(state) == 5
    rows = list(out.itertuples(index=False, name=None))
    # _stream, then the default stream's (key, count) and totals' (key, total): the
    # returned columns first, then what process_key emitted.
    assert [r[0] for r in rows] == [0, 0, 0, 1]
    assert [r[1:3] for r in rows[:3]] == [(4, 3), (4, 4), (4, 5)]
    assert rows[3][3:] == (4, 5.0)
    assert task.counts() == {"counter": Counts(emitted=4, processed=3)}


def test_returned_columns_are_checked_like_emitted_ones():
    plan = plan_of(ColumnCounting, {"columns": "none"})
    nodes = dict(plan.nodes)
    node = nodes["counter"]
    task = StatefulTask("ColumnCounting", plan.stateful, nodes, 0, 0)
    task._instance(0).process_key = lambda tuples, state: {"key": [1], "cnt": [1]}
    with pytest.raises(UserCodeError) as caught:
        task.group([_frame(plan.stateful, [(4, 10)])], None)
    assert str(caught.value) == (
        f"{node.label} returned columns on stream 'default' without field 'count' (its "
        "fields: key, count)")


# -- figures -------------------------------------------------------------------------------

def test_figures_rates_over_the_window_and_latency_from_progress():
    plan = plan_of(wordcount.WordCount)
    tracker = FigureTracker(plan, window_s=10)
    progress = [{"durationMs": {"triggerExecution": 1000}},
                {"durationMs": {"triggerExecution": 3000}}]
    tracker.update({"sentences": (0, 0)}, [], now=0.0)
    figures = tracker.update({"sentences": (100, 0), "split": (640, 100)}, progress,
                             now=2.0)
    assert figures["sentences"].emitted == 100 and figures["sentences"].rate == 50.0
    assert figures["split"].processed == 100 and figures["split"].rate == 50.0
    assert figures["count"].emitted == 0
    assert figures["split"].latency_ms == 2000.0


def test_failures_name_the_component_from_spark_text():
    text = ("An exception was raised...\nTraceback (most recent call last):\n"
            "  File ...\nnimbus_thrift.runner.usercode.UserCodeError: bolt 'split' "
            "(wordcount.SplitBolt) raised ValueError in process(): boom\n\n=== Streaming ===")
    assert describe_failure(text, ["split", "sentences"]) == (
        "split", "bolt 'split' (wordcount.SplitBolt) raised ValueError in process(): boom")
    assert describe_failure("[STREAM_FAILED] something\nValueError: deep", []) == (
        "", "ValueError: deep")
    assert describe_failure("[STREAM_FAILED] something broke\nat x", []) == (
        "", "[STREAM_FAILED] something broke")
