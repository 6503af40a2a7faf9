"""The runner on a real Spark: in-process bounded runs with exact answers, and the
spark-submit driver (bounded to the end; unbounded paused, resumed and stopped)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from nimbus_thrift.runner.local import RunFailed, run_bounded, spec_of
from nimbus_thrift.runner.rundir import RunDir, RunState
from nimbus_thrift.topology import Bolt, Grouping, StatefulBolt, Topology
from support.spark import (TESTS_DIR, processes_in_group, spark,  # noqa: F401
                           spark_env, spark_submit_command)
from topologies import numbers, wordcount

pytestmark = pytest.mark.spark

#: Generous: a first micro-batch takes 5-30 s on a busy 2-core machine.
DEADLINE_S = 180.0


def test_wordcount_counts_exactly(spark, tmp_path):
    result = run_bounded(wordcount.WordCount, spark, tmp_path,
                         conf={"sentences": 1000, "topology.max.spout.pending": 300})
    assert result.batches == 2                    # 500 sentences per task, 300 per batch
    assert wordcount.final_counts(result.tuples("count")) == wordcount.expected_counts(1000)
    words = sum(wordcount.expected_counts(1000).values())
    figures = result.figures
    assert (figures["sentences"].emitted, figures["split"].processed) == (1000, 1000)
    assert (figures["split"].emitted, figures["count"].processed) == (words, words)
    assert figures["count"].emitted == words      # CountBolt emits per word


def test_stateful_output_in_many_arrow_batches_keeps_every_row_in_order(spark, tmp_path):
    # 7 rows per Arrow batch: every key's output is cut for PySpark's buffering
    # (tasks.output_cuts), several times per key.
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    spark.conf.set(key, "7")
    try:
        result = run_bounded(wordcount.WordCount, spark, tmp_path, conf={"sentences": 400})
    finally:
        spark.conf.unset(key)
    seen: dict[str, list[int]] = {}
    for word, count in result.tuples("count"):
        seen.setdefault(word, []).append(count)
    expected = wordcount.expected_counts(400)
    assert {w: counts for w, counts in seen.items()} == \
        {w: list(range(1, n + 1)) for w, n in expected.items()}


def test_an_uncollected_run_writes_its_one_leaf_to_the_noop_sink(spark, tmp_path):
    # One export and no tail: the stateful output goes to the noop sink as it is.
    result = run_bounded(wordcount.WordCount, spark, tmp_path, collect=False,
                         conf={"sentences": 1000, "topology.max.spout.pending": 300})
    words = sum(wordcount.expected_counts(1000).values())
    assert result.batches == 2 and result.tuples("count") == []
    assert (result.figures["count"].processed, result.figures["count"].emitted) == (words,
                                                                                    words)


class ColumnSplitBolt(Bolt):
    """Splits a sentence into a column of words (mapInArrow)."""

    outputs = {"word": str}

    def process(self, tup):
        self.emit_columns({"word": tup.sentence.split()})


class ColumnCountBolt(StatefulBolt):
    """The running counts of a key's words as a DataFrame (applyInPandasWithState)."""

    outputs = {"word": str, "count": int}

    def initial_state(self, key):
        return 0

    def process_key(self, tuples, state):
        first, n = state.value, len(tuples)
        state.value = first + n
        return pd.DataFrame({"word": [state.key[0]] * n,
                             "count": np.arange(first + 1, first + n + 1)})


class LatestCountBolt(Bolt):
    """The latest count of each word it saw in a batch, as columns at its end
    (foreachBatch, downstream of the stateful bolt)."""

    outputs = {"word": str, "count": int}

    def initialize(self, conf, context):
        self.latest = {}

    def process(self, tup):
        if tup.count > self.latest.get(tup.word, 0):
            self.latest[tup.word] = tup.count

    def end_batch(self, batch_id):
        self.emit_columns({"word": list(self.latest),
                           "count": np.fromiter(self.latest.values(), np.int64)})


class ColumnWordCount(Topology):
    sentences = wordcount.SentenceSpout.spec(par=2)
    split = ColumnSplitBolt.spec(inputs={sentences: Grouping.shuffle}, par=2)
    count = ColumnCountBolt.spec(inputs={split: Grouping.fields("word")}, par=2)
    latest = LatestCountBolt.spec(inputs={count: Grouping.fields("word")}, par=2)


def test_columns_from_every_kind_of_bolt_count_exactly(spark, tmp_path):
    result = run_bounded(ColumnWordCount, spark, tmp_path,
                         conf={"sentences": 1000, "topology.max.spout.pending": 300})
    assert result.batches == 2
    expected = wordcount.expected_counts(1000)
    latest = result.tuples("latest")
    assert wordcount.final_counts(latest) == expected
    # One row per word and batch it occurs in; every word is in both batches.
    assert len(latest) == 2 * len(expected)
    words = sum(expected.values())
    figures = result.figures
    assert (figures["split"].processed, figures["split"].emitted) == (1000, words)
    assert (figures["count"].processed, figures["count"].emitted) == (words, words)
    assert (figures["latest"].processed, figures["latest"].emitted) == (words, len(latest))


def test_a_second_run_continues_from_the_checkpoint(spark, tmp_path):
    first = run_bounded(wordcount.WordCount, spark, tmp_path, conf={"sentences": 600})
    assert wordcount.final_counts(first.tuples("count")) == wordcount.expected_counts(600)
    # The spout now has more: the second run reads only the new sentences, and the
    # counts carry on from the state in the checkpoint.
    second = run_bounded(wordcount.WordCount, spark, tmp_path, conf={"sentences": 1000})
    assert second.figures["sentences"].emitted == 400
    assert wordcount.final_counts(second.tuples("count")) == wordcount.expected_counts(1000)


def test_groupings_route_to_the_right_tasks(spark, tmp_path):
    result = run_bounded(numbers.Groupings, spark, tmp_path, conf={"numbers": 200})
    everything = set(range(200))
    to_all = result.tuples("to_all")
    assert sorted((n, t) for n, _, t in to_all) == [(n, t) for n in range(200)
                                                    for t in range(3)]
    to_one = result.tuples("to_one")
    assert {t for _, _, t in to_one} == {0} and sorted(n for n, _, _ in to_one) == \
        sorted(everything)
    by_key = result.tuples("by_key")
    tasks_of_key: dict[int, set[int]] = {}
    for _, key, task in by_key:
        tasks_of_key.setdefault(key, set()).add(task)
    assert all(len(tasks) == 1 for tasks in tasks_of_key.values())
    assert len({t for tasks in tasks_of_key.values() for t in tasks}) > 1
    assert sorted(n for n, _, _ in by_key) == sorted(everything)
    assert result.figures["local"].processed == 200   # not a leaf: read by mixed
    # Two inputs, one exchange: fields on one, all on the other.
    mixed = result.tuples("mixed")
    from_numbers = [(n, key, task) for source, n, key, task in mixed if source == "numbers"]
    assert sorted(n for n, _, _ in from_numbers) == sorted(everything)
    assert all(len({t for _, k, t in from_numbers if k == key}) == 1 for key in range(7))
    from_local = sorted((n, task) for source, n, _, task in mixed if source == "local")
    assert from_local == [(n, t) for n in range(200) for t in range(2)]
    # The spout feeds four bolts through one shared exchange: read once.
    assert result.figures["numbers"].emitted == 200
    assert result.figures["to_all"].processed == 600


def test_named_streams_objects_merged_stateful_bolts_and_the_tail(spark, tmp_path):
    total = 300
    result = run_bounded(numbers.Streams, spark, tmp_path, conf={"numbers": total})
    evens = [n for n in range(total) if n % 2 == 0]
    odds = [n for n in range(total) if n % 2]
    assert sorted(result.tuples("evens")) == [(n, "classify", "even") for n in evens]
    assert sorted(result.tuples("digits")) == [(n, sum(map(int, str(n)))) for n in odds]
    assert dict(result.tuples("even_count")) == dict(Counter(n % 3 for n in evens))
    sums = Counter()
    for n in range(total):
        sums[n % 3] += n
    doubled: dict[int, int] = {}
    for bucket, twice in result.tuples("doubled"):
        doubled[bucket] = max(doubled.get(bucket, 0), twice)
    assert doubled == {bucket: 2 * s for bucket, s in sums.items()}
    figures = result.figures
    assert figures["numbers"].emitted == total
    assert figures["classify"].processed == total     # computed once for five uses
    assert figures["sums"].processed == total and figures["doubled"].processed == total


def test_a_failing_bolt_fails_the_run_naming_it(spark, tmp_path):
    with pytest.raises(RunFailed) as caught:
        run_bounded(numbers.Failing, spark, tmp_path, conf={"numbers": 100})
    assert caught.value.component == "fails"
    assert str(caught.value) == ("bolt 'fails' (topologies.numbers.FailingBolt) raised "
                                 "ValueError in process(): no answers here")


# -- the spark-submit driver -------------------------------------------------------------------

def _work_dir(tmp_path: Path, topology, conf, run) -> RunDir:
    run_dir = RunDir(tmp_path / "work")
    shutil.copytree(TESTS_DIR / "topologies", run_dir.code / "topologies")
    spec_of(topology, conf, run).write(run_dir.spec)
    return run_dir


def _launch(run_dir: RunDir) -> subprocess.Popen:
    run_dir.logs.mkdir(parents=True, exist_ok=True)
    with open(run_dir.logs / "driver.log", "wb") as log:
        return subprocess.Popen(spark_submit_command(run_dir.root), env=spark_env(run_dir.code),
                                stdout=log, stderr=subprocess.STDOUT, cwd=run_dir.root,
                                start_new_session=True)


def _wait_status(run_dir: RunDir, proc: subprocess.Popen, done, what: str,
                 deadline_s: float = DEADLINE_S) -> RunState:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        status = run_dir.read_status()
        if status is not None and done(status):
            return status
        if proc.poll() is not None and not (status and done(status)):
            break
        time.sleep(0.1)                       # polling a file, with a deadline
    log = (run_dir.logs / "driver.log").read_text(errors="replace")[-3000:]
    raise AssertionError(f"no status {what} (last: {run_dir.read_status()}, "
                         f"exit {proc.poll()}):\n{log}")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_driver_runs_a_bounded_topology_to_the_end(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    run_dir = _work_dir(tmp_path, wordcount.WordCountToFiles,
                        {"sentences": 2000, "out_dir": str(out),
                         "topology.max.spout.pending": 500}, {"bounded": True})
    proc = _launch(run_dir)
    try:
        assert proc.wait(timeout=DEADLINE_S) == 0, \
            (run_dir.logs / "driver.log").read_text(errors="replace")[-3000:]
    finally:
        _stop(proc)
    status = run_dir.read_status()
    assert status is not None and status.state == "finished", status
    assert status.batch_id == 1 and status.error == ""
    rows = [row for path in out.glob("*.json") for row in json.loads(path.read_text())]
    assert wordcount.final_counts(rows) == wordcount.expected_counts(2000)
    figures = status.components
    words = sum(wordcount.expected_counts(2000).values())
    assert figures["sentences"].emitted == 2000 and figures["split"].processed == 2000
    assert figures["split"].emitted == words and figures["count"].processed == words
    assert figures["sink"].processed == len(rows) == figures["count"].emitted


def test_driver_reports_the_failing_component_and_exits_1(tmp_path):
    run_dir = _work_dir(tmp_path, numbers.Failing, {"numbers": 100}, {"bounded": True})
    proc = _launch(run_dir)
    try:
        assert proc.wait(timeout=DEADLINE_S) == 1
    finally:
        _stop(proc)
    status = run_dir.read_status()
    assert status is not None and status.state == "failed", status
    assert status.error_component == "fails"
    assert status.error == ("bolt 'fails' (topologies.numbers.FailingBolt) raised "
                            "ValueError in process(): no answers here")


def test_driver_pauses_resumes_and_stops_on_the_control_file(tmp_path):
    run_dir = _work_dir(tmp_path, numbers.Ticks, {"tick_rate": 50}, {"trigger_ms": 500})
    proc = _launch(run_dir)
    try:
        running = _wait_status(run_dir, proc, lambda s: s.state == "running" and
                               s.batch_id >= 0, "running")
        assert running.pid != proc.pid and running.app_id.startswith("local-")
        run_dir.set_control("paused")
        paused = _wait_status(run_dir, proc, lambda s: s.state == "paused", "paused")
        # At most the batch in flight ends; then no batch while paused.
        settled = _wait_status(run_dir, proc,
                               lambda s: s.updated_at > paused.updated_at + 3, "3 s on")
        assert settled.state == "paused" and settled.batch_id <= paused.batch_id + 1
        run_dir.set_control("active")
        _wait_status(run_dir, proc, lambda s: s.state == "running" and
                     s.batch_id > settled.batch_id, "running again")
        run_dir.set_control("stop")
        assert proc.wait(timeout=DEADLINE_S) == 0
    finally:
        _stop(proc)
    status = run_dir.read_status()
    assert status is not None and status.state == "stopped", status
    assert status.components["squares"].processed > 0
    deadline = time.monotonic() + 30
    while processes_in_group(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_in_group(proc.pid) == []
