"""Components, topologies and helpers shared by test_runner_execute.py and
test_runner_columns.py. The runner imports these components by their module path
(``runner_parts.<Class>``), which the error messages asserted there name."""

from __future__ import annotations

import pickle

import pandas as pd
import pyarrow as pa

from nimbus_thrift.runner.columns import ARROW_TYPES
from nimbus_thrift.runner.decode import output_rows
from nimbus_thrift.runner.local import spec_of
from nimbus_thrift.runner.plan import build_plan
from nimbus_thrift.topology import Bolt, Grouping, Spout, StatefulBolt, Stream, Topology


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


def state_frame(op, rows):
    """The pandas frame a stateful bolt's operator is given for ``rows``."""
    slot = op.slots[0]
    return pd.DataFrame({c.name: [row[k] for row in rows]
                         for k, c in enumerate(slot.columns)})
