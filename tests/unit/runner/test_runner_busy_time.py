"""The time a bolt's tasks spend on their tuples (the figure behind page info's execute
latency and capacity): measured by the tasks, summed by the accumulator, reported in
status.json, without Spark."""

from __future__ import annotations

import json

import pyarrow as pa

from nimbus_thrift.runner.dataflow import StatsParam
from nimbus_thrift.runner.local import spec_of
from nimbus_thrift.runner.plan import build_plan
from nimbus_thrift.runner.rundir import RunState
from nimbus_thrift.runner.stats import StatsTracker
from nimbus_thrift.runner.tasks import BoltTask, StatefulTask, TaskStats
from topologies.wordcount import WordCount


def test_a_bolt_task_times_its_batches_and_counts_compare_without_the_time() -> None:
    plan = build_plan(spec_of(WordCount, {"sentences": 3}))
    split = plan.nodes["split"]
    task = BoltTask("WordCount", split, 0, 1)
    column = split.slots[0].columns[0].name
    task.feed(pa.RecordBatch.from_pydict({column: ["a b c"] * 1000, "_task": [0] * 1000}))
    task.finish()
    counts = task.counts
    assert counts.busy_s > 0
    assert counts == TaskStats(emitted=3000, processed=1000)   # the time is not compared


def test_the_stateful_operator_times_each_bolt_it_runs() -> None:
    import pandas as pd
    plan = build_plan(spec_of(WordCount, {"sentences": 3}))
    op = plan.stateful
    assert op is not None
    task = StatefulTask("WordCount", op, plan.nodes, 0, 1)
    column = op.slots[0].columns[0].name
    task.group([pd.DataFrame({column: ["the"] * 50})], None)
    assert task.counts()["count"].busy_s > 0


def test_the_accumulator_sums_figures_of_any_width() -> None:
    param = StatsParam()
    total = param.zero({})
    param.addInPlace(total, {"sentences": (10,), "split": (10, 5, 0.25)})
    param.addInPlace(total, {"sentences": (5,), "split": (1, 1, 0.5)})
    assert total == {"sentences": (15,), "split": (11, 6, 0.75)}


def test_status_reports_busy_milliseconds_and_reads_older_and_newer_files() -> None:
    plan = build_plan(spec_of(WordCount, {"sentences": 3}))
    figures = StatsTracker(plan).update({"sentences": (4,), "split": (12, 4, 0.002)}, [],
                                        now=1.0)
    assert figures["split"].busy_ms == 2.0 and figures["sentences"].busy_ms == 0.0
    state = RunState(state="running", pid=1, updated_at=0.0, started_at=0.0,
                     components=figures)
    raw = json.loads(state.to_json())
    raw["components"]["split"]["a_newer_field"] = 1
    del raw["components"]["sentences"]["busy_ms"]           # an older runner's file
    back = RunState.from_json(json.dumps(raw))
    assert back.components["split"].busy_ms == 2.0
    assert back.components["sentences"].busy_ms == 0.0
