"""The runner without Spark: columns that user code emits or returns (pandas frames,
dicts of lists, numpy and pyarrow arrays, series), made into the same tuples as
emitted tuples, and the errors that name what is wrong with them."""

from __future__ import annotations

import pickle
import threading
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from nimbus_thrift.runner.columns import to_array, to_numpy
from nimbus_thrift.runner.emitter import Emitter
from nimbus_thrift.runner.tasks import BoltTask, SpoutTask, StatefulTask, TaskStats
from nimbus_thrift.runner.usercode import UserCodeError
from nimbus_thrift.topology import Bolt, Grouping, StatefulBolt, Stream, Topology
from nimbus_thrift.topology.components import EmittedColumns
from runner_parts import Keyed, Numbers, Units, plan_of, rows_of, slot_batch, state_frame

# Components defined here are imported by the runner as test_runner_columns.<Class>.


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


LABEL = "bolt 'columns' (test_runner_columns._ColumnEmitter) "


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
        "bolt 'parity' (runner_parts.Parity) emitted 'n' on stream 'default'; its "
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
    state, out = task.group([state_frame(op, [(4, 10), (4, 11), (4, 12)])], pickle.dumps(2))
    assert pickle.loads(state) == 5
    rows = list(out.itertuples(index=False, name=None))
    # _stream, then the default stream's (key, count) and totals' (key, total): the
    # returned columns first, then what process_key emitted.
    assert [r[0] for r in rows] == [0, 0, 0, 1]
    assert [r[1:3] for r in rows[:3]] == [(4, 3), (4, 4), (4, 5)]
    assert rows[3][3:] == (4, 5.0)
    assert task.counts() == {"counter": TaskStats(emitted=4, processed=3)}


def test_returned_columns_are_checked_like_emitted_ones():
    plan = plan_of(ColumnCounting, {"columns": "none"})
    nodes = dict(plan.nodes)
    node = nodes["counter"]
    task = StatefulTask("ColumnCounting", plan.stateful, nodes, 0, 0)
    task._instance(0).process_key = lambda tuples, state: {"key": [1], "cnt": [1]}
    with pytest.raises(UserCodeError) as caught:
        task.group([state_frame(plan.stateful, [(4, 10)])], None)
    assert str(caught.value) == (
        f"{node.label} returned columns on stream 'default' without field 'count' (its "
        "fields: key, count)")
