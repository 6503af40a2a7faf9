"""Fakes tier: the spout data source's offsets (runner/source.py) without a JVM.

Spark calls these methods; here they are called directly, with a spout whose available
count a test sets. What they decide is what a restarted query replays: a partition
that starts anywhere but at the previous end re-reads (or skips) tuples, which only the
Spark tier's crash test would otherwise notice.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from nimbus_thrift.runner.decode import output_rows
from nimbus_thrift.runner.local import spec_of
from nimbus_thrift.runner.plan import build_plan
from nimbus_thrift.runner.rundir import RunDir
from nimbus_thrift.runner.source import SpoutPartition, SpoutReader
from nimbus_thrift.topology import Spout, Topology

#: Per task: how many tuples the spout says it has, and the offsets it was acked.
AVAILABLE: dict[int, int | None] = {}
ACKED: list[tuple[int, int]] = []


class Counted(Spout):
    """Task t has AVAILABLE[t] tuples, each its own offset."""

    outputs = {"n": int}

    def initialize(self, conf: Any, context: Any) -> None:
        self.task = context.task

    def available(self) -> int | None:
        return AVAILABLE.get(self.task)

    def read(self, start: int, end: int) -> Any:
        for i in range(start, end):
            yield (i,)

    def ack(self, offset: int) -> None:
        ACKED.append((self.task, offset))


class OneSpout(Topology):
    numbers = Counted.spec(par=2)


@pytest.fixture(autouse=True)
def _fresh_spouts() -> None:
    AVAILABLE.clear()
    ACKED.clear()


def reader(tmp_path: Path, max_batch: int = 4, pausable: bool = True,
           fence: Any = None) -> SpoutReader:
    node = build_plan(spec_of(OneSpout)).nodes["numbers"]
    source = SimpleNamespace(node=node, topology="OneSpout", work_dir=str(tmp_path),
                             max_batch=max_batch, pausable=pausable, accumulator=None,
                             fence=fence)
    return SpoutReader(source)  # type: ignore[arg-type]


def test_initial_offsets_are_zero_for_every_task(tmp_path: Path) -> None:
    assert reader(tmp_path).initialOffset() == {"0": 0, "1": 0}


def test_partitions_start_where_the_previous_batch_ended(tmp_path: Path) -> None:
    parts = reader(tmp_path).partitions({"0": 5, "1": 2}, {"0": 9, "1": 2})
    assert [(p.task, p.start, p.end) for p in parts] == [(0, 5, 9)]   # task 1: nothing new


def test_a_partition_reads_exactly_its_offsets(tmp_path: Path) -> None:
    r = reader(tmp_path)
    table = pa.Table.from_batches(list(r.read(SpoutPartition(1, 5, 9))))
    rows = output_rows(r.node.output, {c: table.column(c).to_pylist()
                                       for c in table.column_names})
    assert rows["default"] == [(5,), (6,), (7,), (8,)]


def test_latest_offset_is_capped_per_task_and_never_goes_back(tmp_path: Path) -> None:
    AVAILABLE.update({0: 100, 1: 3})
    r = reader(tmp_path, max_batch=4)
    limit = r.getDefaultReadLimit()
    assert limit == ReadMaxRows(8) or getattr(limit, "max_rows", None) == 8
    assert r.latestOffset({"0": 10, "1": 7}, limit) == {"0": 14, "1": 7}
    assert r.latestOffset({"0": 10, "1": 1}, ReadAllAvailable()) == {"0": 100, "1": 3}


def test_a_paused_topology_plans_no_new_offsets(tmp_path: Path) -> None:
    AVAILABLE.update({0: 100, 1: 100})
    RunDir(tmp_path).set_control("paused")
    r = reader(tmp_path)
    assert r.latestOffset({"0": 10, "1": 20}, ReadAllAvailable()) == {"0": 10, "1": 20}
    RunDir(tmp_path).set_control("active")
    assert r.latestOffset({"0": 10, "1": 20}, ReadAllAvailable()) == {"0": 100, "1": 100}


def test_offsets_of_tasks_gone_after_a_rebalance_are_kept_but_not_read(tmp_path: Path) -> None:
    AVAILABLE.update({0: 6, 1: 6})
    r = reader(tmp_path)
    end = r.latestOffset({"0": 2, "1": 2, "2": 9}, ReadAllAvailable())
    assert end == {"0": 6, "1": 6, "2": 9}
    assert [p.task for p in r.partitions({"0": 2, "1": 2, "2": 1}, end)] == [0, 1]


def test_commit_acks_each_task_its_end_offset(tmp_path: Path) -> None:
    AVAILABLE.update({0: 1, 1: 1})
    reader(tmp_path).commit({"0": 7, "1": 3})
    assert sorted(ACKED) == [(0, 7), (1, 3)]
