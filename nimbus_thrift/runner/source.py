"""Spouts as Python streaming data sources (``pyspark.sql.datasource``).

One source per spout, one partition per spout task with new offsets. Offsets are JSON
``{"<task>": end}``. Three processes see a source (measured on Spark 4.3):

- the driver's *source runner* (one long-lived Python process per source) calls
  ``initialOffset``, ``latestOffset`` and ``commit``: the spout instances that answer
  ``available()`` and take ``ack()`` live there, one per task, made on first use;
- a *planner* creates the reader once more and pickles it into the read function, so
  the reader holds no spout instance in its pickled state;
- executors call ``read`` on that unpickled reader, which makes a fresh spout for the
  task and batch.

The pause switch is the work directory's ``control`` file, read in ``latestOffset``:
while it says ``paused`` the offsets stay put and Spark plans no batch. So it is for a
cluster-mode driver that no longer holds ``driver.claim`` (:mod:`.claim`, asked only
when there are new offsets to offer: once per batch); its ``commit`` acks nothing.

The first batch of a new query waits a little for the spouts to have data (see
:data:`FIRST_BATCH_WAIT_S`): Spark runs batch 0 even with nothing in it, and batch 0 is
the slow one.
"""

from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path
from typing import Any, Iterator

from pyspark import TaskContext
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (ReadAllAvailable, ReadLimit, ReadMaxRows,
                                              SupportsTriggerAvailableNow)
from pyspark.sql.types import StructType

from .claim import Fence
from .plan import Node
from .rundir import RunDir
from .settings import follow_logs, task_settings
from .tasks import SpoutTask
from .usercode import UserCodeError, new_instance, user_error


#: A new query's first ``latestOffset`` polls the spouts for up to this long while none
#: has data. Spark runs batch 0 even when it is empty, and batch 0 is the slowest batch
#: (Python workers start, state stores open: 3-7 s on 2 vCPUs), so an empty one puts
#: the first output a whole batch later. Spouts created in that call (the word count's,
#: paced by the clock) have data within milliseconds; one with nothing to read costs
#: this once per query start.
FIRST_BATCH_WAIT_S = 1.0
#: ... polling this often.
FIRST_BATCH_POLL_S = 0.01


class SpoutPartition(InputPartition):
    def __init__(self, task: int, start: int, end: int):
        super().__init__((task, start, end))
        self.task, self.start, self.end = task, start, end


class SpoutReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets and reads of one spout. Settings come from the source class
    (:func:`source_class`)."""

    def __init__(self, source: "SpoutSource"):
        self.node: Node = source.node
        self.topology: str = source.topology
        self.work_dir: str = source.work_dir
        self.max_batch: int = source.max_batch
        self.pausable: bool = source.pausable
        self.accumulator: Any = source.accumulator
        self.fence: Fence | None = source.fence
        self._spouts: dict[int, Any] | None = None     # driver side only, not pickled
        self._target: dict[str, int] | None = None     # availableNow: the end to reach
        self._waited = False            # the first batch's wait for data is done

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_spouts"] = None
        return state

    def _instances(self) -> dict[int, Any]:
        if self._spouts is None:
            if self.fence is not None:
                # A fenced driver's (cluster mode, or client mode in HA mode): this
                # process is its JVM's child, whose output a worker keeps in cluster
                # mode; the spouts' logging goes where the driver's does (in client
                # mode the same logs/ the JVM's output reaches anyway).
                try:
                    follow_logs(Path(self.work_dir) / "logs")
                except OSError:
                    pass                # it stays in the worker's files
            # The source runner imports the spout's module from the work directory's
            # code: a cold driver's environment has it on PYTHONPATH, a standby's names
            # it through a link made at the hand-off (see .standby), which this
            # process may have looked up before the link existed.
            code = str(Path(self.work_dir) / "code")
            if code not in sys.path and Path(code).is_dir():
                sys.path.insert(0, code)
                importlib.invalidate_caches()
            self._spouts = {t: new_instance(self.topology, self.node, t, None)
                            for t in range(self.node.parallelism)}
        return self._spouts

    def _available(self) -> dict[str, int | None]:
        result: dict[str, int | None] = {}
        for task, spout in self._instances().items():
            try:
                result[str(task)] = spout.available()
            except Exception as exc:
                raise user_error(self.node, exc, "available()") from exc
        return result

    def initialOffset(self) -> dict:
        return {str(t): 0 for t in range(self.node.parallelism)}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_batch * self.node.parallelism)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {t: v for t, v in self._available().items() if v is not None}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        end = self._latest(start, limit)
        if end != start and self.fence is not None and not self.fence.holds():
            return start            # another driver runs the topology: no batch here
        return end

    def _latest(self, start: dict, limit: ReadLimit) -> dict:
        # Tasks missing from ``start`` are new (the spout was rebalanced up): from 0.
        # Tasks no longer there keep their offsets, to be read if they come back.
        end = {t: start.get(t, 0) for t in self.initialOffset()}
        end.update({t: v for t, v in start.items() if t not in end})
        # The spouts' available() and ack() run in this process: their loggers follow
        # the topology's levels too.
        task_settings(self.work_dir)
        if self.pausable and RunDir(Path(self.work_dir)).control_state() == "paused":
            return end
        cap = None if isinstance(limit, ReadAllAvailable) else self.max_batch
        # Only before the first batch of a query (its start is the initial offset) and
        # only once: a query restarted from its checkpoint runs no empty batch 0.
        wait = not self._waited and self._target is None and start == self.initialOffset()
        self._waited = True
        deadline = time.monotonic() + FIRST_BATCH_WAIT_S
        while True:
            for task, available in self._available().items():
                if available is None:
                    continue
                if self._target is not None:
                    available = min(available, self._target.get(task, 0))
                if cap is not None:
                    available = min(available, end[task] + cap)
                end[task] = max(end[task], available)     # never backwards
            if not wait or end != start or time.monotonic() >= deadline:
                return end
            time.sleep(FIRST_BATCH_POLL_S)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return [SpoutPartition(int(t), start.get(t, 0), e) for t, e in sorted(end.items())
                if e > start.get(t, 0) and int(t) < self.node.parallelism]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, SpoutPartition)
        context = TaskContext.get()
        batch = context.getLocalProperty("streaming.sql.batchId") if context else None
        task = SpoutTask(self.topology, self.node, partition.task,
                         int(batch) if batch is not None else None,
                         task_settings(self.work_dir))
        yield from task.read(partition.start, partition.end)
        if self.accumulator is not None:
            self.accumulator.add({self.node.id: (task.emitter.emitted, 0)})

    def commit(self, end: dict) -> None:
        if self.fence is not None and not self.fence.holds():
            return                  # the driver that holds the claim acks
        for task, spout in self._instances().items():
            if str(task) in end:
                try:
                    spout.ack(end[str(task)])
                except Exception as exc:
                    raise user_error(self.node, exc, "ack()") from exc


class SpoutSource(DataSource):
    """Base of the per-spout source classes made by :func:`source_class`."""

    node: Node
    topology: str
    work_dir: str
    max_batch: int
    pausable: bool
    accumulator: Any
    schema_ddl: str
    format_name: str
    fence: Fence | None

    @classmethod
    def name(cls) -> str:
        return cls.format_name

    def schema(self) -> StructType | str:
        return self.schema_ddl

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return SpoutReader(self)


def source_class(node: Node, index: int, topology: str, work_dir: Path, max_batch: int,
                 pausable: bool, accumulator: Any, schema_ddl: str,
                 fence: Fence | None = None) -> type[SpoutSource]:
    """A data source class for one spout, registered as ``nimbus_spout_<index>``.

    The settings are class attributes: a class made here is not importable by name,
    so cloudpickle ships it (and them) by value to the Python processes Spark starts.
    """
    attrs = {"node": node, "topology": topology, "work_dir": str(work_dir),
             "max_batch": max_batch, "pausable": pausable, "accumulator": accumulator,
             "schema_ddl": schema_ddl, "format_name": f"nimbus_spout_{index}",
             "fence": fence}
    return type(f"SpoutSource{index}", (SpoutSource,), attrs)


__all__ = ["SpoutPartition", "SpoutReader", "SpoutSource", "UserCodeError", "source_class"]
