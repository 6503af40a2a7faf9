"""The runner without Spark: plans, and user code over plain pyarrow batches (tuples,
bolts, spouts, stateful bolts, stats, failures). Columns emitted by user code are
test_runner_columns.py's."""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest

from nimbus_thrift.runner.decode import TupleDecoder
from nimbus_thrift.runner.emitter import Emitter
from nimbus_thrift.runner.failures import describe_failure
from nimbus_thrift.runner.local import spec_of
from nimbus_thrift.runner.plan import (DEFAULT_MAX_BATCH, Column, PlanError, build_plan,
                                       routing_values, spark_hash_int)
from nimbus_thrift.runner.stats import StatsTracker
from nimbus_thrift.runner.tasks import (REMOVE, BoltTask, SpoutTask, StatefulTask, TaskStats,
                                        run_bolt)
from nimbus_thrift.runner.usercode import UserCodeError, new_instance
from nimbus_thrift.topology import Bolt, StatefulBolt, Topology
from runner_parts import (Chained, Counting, Numbers, Units, plan_of, rows_of, slot_batch,
                          state_frame)
from topologies import numbers, wordcount

# Components defined here are imported by the runner as test_runner_execute.<Class>.


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
    assert counts == [TaskStats(emitted=3, processed=1)]


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
    with pytest.raises(UserCodeError, match=r"^bolt 'parity' \(runner_parts"
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


def test_stateful_group_updates_pickled_state_per_key():
    plan = plan_of(Counting)
    op = plan.stateful
    task = StatefulTask("Counting", op, plan.nodes, task=1, batch_id=0)
    state, out = task.group([state_frame(op, [(4, 10), (4, 11)])], None)
    assert pickle.loads(state) == 2
    assert list(out.itertuples(index=False, name=None)) == [(4, 1), (4, 2)]
    state, out = task.group([state_frame(op, [(4, 12)])], state)
    assert pickle.loads(state) == 3 and out.values.tolist() == [[4, 3]]
    assert task.instances[0].context.task == 1
    assert task.counts() == {"counter": TaskStats(emitted=3, processed=3)}


def test_stateful_remove_drops_the_state_and_a_later_tuple_starts_afresh():
    plan = plan_of(Counting)
    op = plan.stateful
    task = StatefulTask("Counting", op, plan.nodes, 0, 0)
    state, _ = task.group([state_frame(op, [(1, 5), (1, 99)])], None)
    assert state is REMOVE
    state, out = task.group([state_frame(op, [(1, 5), (1, 99), (1, 6)])], pickle.dumps(7))
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
    state, out = task.group([state_frame(plan.stateful, [(3, i) for i in range(5)])], None)
    assert pickle.loads(state) == 5 and out.values.tolist() == [[3, 5]]
    assert task.instances[0].seen == "<5 tuples>"      # never materialised


def test_figures_rates_over_the_window_and_latency_from_progress():
    plan = plan_of(wordcount.WordCount)
    tracker = StatsTracker(plan, window_s=10)
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
