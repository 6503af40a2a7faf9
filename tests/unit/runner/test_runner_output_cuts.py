"""The stateful operator's output cut for PySpark's applyInPandasWithState worker
(tasks.output_cuts, StatefulTask.pieces), and the emitter's one-field rows."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

import pandas as pd
import pytest

from nimbus_thrift.runner.emitter import Emitter
from nimbus_thrift.runner.local import spec_of
from nimbus_thrift.runner.plan import build_plan
from nimbus_thrift.runner.tasks import StatefulTask, output_cuts
from nimbus_thrift.runner.usercode import UserCodeError
from nimbus_thrift.topology import Bolt, Grouping, Spout, StatefulBolt, Topology


@pytest.mark.parametrize("pending, rows, limit, sizes, left", [
    (0, 5, 10, [5], 5),                 # fits: stays pending with the earlier rows
    (4, 6, 10, [6], 10),                # exactly the limit: not sent yet
    (4, 7, 10, [7], 0),                 # one over: closes the batch, nothing left
    (4, 9, 10, [7, 2], 2),              # closes at limit + 1, the rest pending
    (3, 50, 10, [8, 42], 0),            # the rest over the limit: sent at once
    (10, 11, 10, [1, 10], 10),          # a full buffer closes with one more row
    (0, 50, 0, [50], 0),                # no limit (Spark: <= 0): one piece
    (0, 50, -1, [50], 0),
])
def test_output_cuts(pending, rows, limit, sizes, left):
    assert output_cuts(pending, rows, limit) == (sizes, left)


class _Worker:
    """PySpark 4.3's applyInPandasWithState output buffering (pyspark/worker.py), as
    the cuts assume it: after each non-empty frame, send once over ``limit`` rows; a
    key's state joins the buffer after its frames; the rest is sent at the end."""

    def __init__(self, limit):
        self.limit, self.rows, self.states, self.sent = limit, [], 0, []

    def frame(self, frame):
        if len(frame):
            self.rows.append(frame)
            if sum(map(len, self.rows)) > self.limit:
                self._send()

    def key_done(self):
        self.states += 1

    def _send(self):
        self.sent.append((sum(map(len, self.rows)), self.states,
                          pd.concat(self.rows, ignore_index=True) if self.rows else None))
        self.rows, self.states = [], 0

    def end(self):
        if self.rows or self.states:
            self._send()


def _out(key, n):
    return pd.DataFrame({"word": [key] * n, "count": range(1, n + 1)})


@pytest.mark.parametrize("limit", [1, 7, 100])
def test_a_state_is_sent_with_the_least_rows_and_every_row_in_order(limit):
    sizes = [3, 250, 1, 1, 120, 7, 300, 2]
    task = SimpleNamespace(pending_rows=0, batch_rows=limit)
    worker = _Worker(limit)
    for k, n in enumerate(sizes):
        for piece in StatefulTask.pieces(task, _out(f"w{k}", n)):   # type: ignore[arg-type]
            worker.frame(piece)
        worker.key_done()
    worker.end()
    # Every key's state was sent, each in a batch of limit + 1 rows unless it is the
    # last batch (a batch without a state may be bigger: it costs no padding test).
    assert sum(states for _, states, _ in worker.sent) == len(sizes)
    for rows, states, _ in worker.sent[:-1]:
        if states:
            assert rows == limit + 1
    sent = pd.concat([frame for _, _, frame in worker.sent if frame is not None],
                     ignore_index=True)
    expected = pd.concat([_out(f"w{k}", n) for k, n in enumerate(sizes)],
                         ignore_index=True)
    pd.testing.assert_frame_equal(sent, expected)


def test_without_the_cuts_a_state_would_be_sent_with_a_whole_key():
    # What the cuts avoid (the worker model above, one frame per key).
    worker = _Worker(10)
    for k, n in enumerate([50, 50, 50]):
        worker.frame(_out(f"w{k}", n))
        worker.key_done()
    worker.end()
    assert [(rows, states) for rows, states, _ in worker.sent] == [(50, 0), (50, 1),
                                                                    (50, 1), (0, 1)]


class Words(Spout):
    outputs = {"word": str}


class Count(StatefulBolt):
    outputs = {"word": str, "count": int}

    def initial_state(self, key):
        return 0

    def process_key(self, tuples, state):
        first, n = state.value, len(tuples)
        state.value = first + n
        return {"word": [state.key[0]] * n, "count": list(range(first + 1, first + n + 1))}


class Counting(Topology):
    words = Words.spec()
    count = Count.spec(inputs={words: Grouping.fields("word")}, par=2)


def test_stateful_task_cuts_its_output_and_tracks_what_is_unsent():
    plan = build_plan(spec_of(Counting))
    op = plan.stateful
    task = StatefulTask("Counting", op, plan.nodes, 0, 0, batch_rows=10)
    column = op.slots[0].columns[0].name
    state, out = task.group([pd.DataFrame({column: ["a"] * 4})], None)
    assert [len(p) for p in task.pieces(out)] == [4] and task.pending_rows == 4
    state, out = task.group([pd.DataFrame({column: ["b"] * 30})], None)
    pieces = task.pieces(out)
    assert [len(p) for p in pieces] == [7, 23] and task.pending_rows == 0
    assert pd.concat(pieces).values.tolist() == [["b", i] for i in range(1, 31)]
    assert pickle.loads(state) == 30
    # No limit known (0): whole frames, as before the cuts.
    whole = StatefulTask("Counting", op, plan.nodes, 0, 0)
    _, out = whole.group([pd.DataFrame({column: ["c"] * 30})], None)
    assert [len(p) for p in whole.pieces(out)] == [30]


# -- the emitter's rows of one field ------------------------------------------------------

class Split(Bolt):
    outputs = {"word": str}


class Objects(Bolt):
    outputs = {"value": object}


class OneField(Topology):
    words = Words.spec()
    split = Split.spec(inputs=[words])
    objects = Objects.spec(inputs=[words])


def _emit(cid, rows):
    node = build_plan(spec_of(OneField)).nodes[cid]
    emitter = Emitter(node)
    emitter.rows.extend(rows)
    return emitter.batches(emitter.drain(SimpleNamespace(_emitted=[])))


def test_one_field_rows_as_tuples_or_lists_make_one_column():
    (batch,) = _emit("split", [("a",), ["bb"], ("a",), (None,)])
    assert batch.column(0).to_pylist() == ["a", "bb", "a", None]
    (batch,) = _emit("objects", [({"n": 1},), ([2, 3],)])
    assert [pickle.loads(v) for v in batch.column(0).to_pylist()] == [{"n": 1}, [2, 3]]


@pytest.mark.parametrize("rows, bad", [
    ([("a",), "b"], "'b'"),                         # a string, even of one character
    ([("a",), ("b", "c")], "('b', 'c')"),           # two values for one field
    ([("a",), ()], "()"),
    ([("a",), b"x"], "b'x'"),
    ([("a",), 5], "5"),
])
def test_one_field_rows_of_another_shape_are_refused_naming_the_row(rows, bad):
    with pytest.raises(UserCodeError) as info:
        _emit("split", rows)
    assert str(info.value).startswith(f"bolt 'split' (test_runner_output_cuts.Split) "
                                      f"emitted {bad} on stream 'default'")
    assert "sequences of 1 values (word)" in str(info.value)


def test_a_one_field_value_of_another_type_is_refused_naming_it():
    with pytest.raises(UserCodeError, match=r"emitted 3 \(int\) on stream 'default' as "
                                            r"field 'word', which is declared str"):
        _emit("split", [("a",), (3,)])
