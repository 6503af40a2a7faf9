"""User code against Arrow batches: what runs inside Spark's Python workers, as the
three task kinds (a bolt, a spout read, the merged stateful operator).

No PySpark here (the Spark glue in :mod:`.dataflow` and :mod:`.source` passes the task
index and batch id in), so all of it is tested on plain pyarrow batches.

Per-row Python work is the user's ``process()`` call and little else: input columns
become Python lists once per batch and named tuples through C-level ``map``
(:mod:`.decode`); returned tuples are gathered in one list per stream, split into
columns with ``itemgetter`` and converted with one ``pa.array`` per column at the end of
the batch (:mod:`.emitter`). Types are checked on that column (Arrow's inference, then
a comparison), and only a failed check walks the values to name the bad one
(:mod:`.columns`). The cyclic GC is off while a batch runs.
"""

from __future__ import annotations

import gc
import pickle
from contextlib import contextmanager
from dataclasses import dataclass, field
from time import perf_counter
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..topology.components import KeyState
from .columns import PICKLE_PROTOCOL, is_columns
from .decode import LazyTuples, TupleDecoder, first_values
from .emitter import Emitter
from .plan import BOLT_COLUMN, SLOT_COLUMN, Node, StatefulOp
from .rundir import RunSettings
from .sampling import TupleSampler
from .usercode import UserCodeError, new_instance, user_error

if TYPE_CHECKING:
    import pandas as pd

#: Rows per Arrow batch a spout read yields (Spark's own default for Arrow batches).
SPOUT_CHUNK = 10_000


@contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic GC while a batch runs: its many small tuples trigger a collection every
    700 allocations, which made the split of 100k sentences 2x slower (measured). One
    runs at the next allocation after, if due; user cycles are collected then."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


# -- bolts -------------------------------------------------------------------------------

def _sampler(topology: str, node: Node, task: int, batch_id: int | None,
             settings: RunSettings | None) -> TupleSampler | None:
    """The sampler of one instance's emitted tuples, if the topology's settings turn
    sampling on for its component (Storm's ``debug``)."""
    percent = settings.sample_percent(node.id) if settings is not None else 0.0
    return TupleSampler(topology, node.id, task, batch_id, percent) if percent > 0 else None


@dataclass
class TaskStats:
    """Tuples a component emitted and processed, and the seconds its task spent on
    them (decoding, user code, converting what it emitted), to add to the run's
    figures. The seconds are a timing: not compared."""

    emitted: int = 0
    processed: int = 0
    busy_s: float = field(default=0.0, compare=False)


class BoltTask:
    """One bolt instance over the Arrow batches of one partition of one micro-batch.

    ``feed`` each input batch and send on the output batches it returns; ``finish``
    calls ``end_batch`` and returns what that emitted.
    """

    def __init__(self, topology: str, node: Node, task: int, batch_id: int | None,
                 settings: RunSettings | None = None):
        self.node = node
        self.batch_id = batch_id
        self.instance = new_instance(topology, node, task, batch_id)
        self.decoders = [TupleDecoder(slot) for slot in node.slots]
        self.emitter = Emitter(node)
        self.emitter.sampler = _sampler(topology, node, task, batch_id, settings)
        self.processed = 0
        self.busy_s = 0.0

    def _run(self, tuples: list[Any]) -> None:
        self.processed += len(tuples)
        rows = self.emitter.rows
        process = self.instance.process
        try:
            for result in map(process, tuples):
                if result is not None:
                    rows.extend(result)
        except UserCodeError:
            raise
        except Exception as exc:
            raise user_error(self.node, exc, "process()") from exc

    def feed(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        start = perf_counter()
        try:
            return self._feed(batch)
        finally:
            self.busy_s += perf_counter() - start

    def _feed(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        with _gc_paused():
            if len(self.decoders) == 1:
                self._run(self.decoders[0].from_arrow(batch))
            else:
                slots = batch.column(SLOT_COLUMN)
                for g, decoder in enumerate(self.decoders):
                    part = batch.filter(pc.equal(slots, g))
                    if part.num_rows:
                        self._run(decoder.from_arrow(part))
            pending = self.emitter.drain(self.instance)
            out = self.emitter.batches(pending)
            del pending     # freed while the GC is off: else it scans all the tuples
            return out

    def finish(self) -> list[pa.RecordBatch]:
        start = perf_counter()
        try:
            if self.batch_id is not None:
                try:
                    self.instance.end_batch(self.batch_id)
                except Exception as exc:
                    raise user_error(self.node, exc, "end_batch()") from exc
            return self.emitter.batches(self.emitter.drain(self.instance))
        finally:
            self.busy_s += perf_counter() - start

    @property
    def counts(self) -> TaskStats:
        return TaskStats(self.emitter.emitted, self.processed, self.busy_s)


def run_bolt(topology: str, node: Node, batches: Iterable[pa.RecordBatch],
             task_of: Callable[[pa.RecordBatch], int], batch_id: int | None,
             done: Callable[[TaskStats], None],
             settings: Callable[[], RunSettings | None] = lambda: None
             ) -> Iterator[pa.RecordBatch]:
    """A mapInArrow body: the bolt over one partition. The instance is made at the
    first non-empty batch (``task_of`` reads its task from it, ``settings`` gives the
    topology's run-time settings then); an empty partition makes none and calls no
    ``end_batch``. ``done`` gets the counts at the end."""
    task: BoltTask | None = None
    for batch in batches:
        if batch.num_rows == 0:
            continue
        if task is None:
            task = BoltTask(topology, node, task_of(batch), batch_id, settings())
        yield from task.feed(batch)
    if task is not None:
        yield from task.finish()
        done(task.counts)


# -- spouts ------------------------------------------------------------------------------

class SpoutTask:
    """One spout instance reading one task's offset range in an executor."""

    def __init__(self, topology: str, node: Node, task: int, batch_id: int | None,
                 settings: RunSettings | None = None):
        self.node = node
        self.instance = new_instance(topology, node, task, batch_id)
        self.emitter = Emitter(node)
        self.emitter.sampler = _sampler(topology, node, task, batch_id, settings)

    def read(self, start: int, end: int, chunk: int = SPOUT_CHUNK
             ) -> Iterator[pa.RecordBatch]:
        """Arrow batches of the tuples at offsets ``start`` to ``end - 1``."""
        with _gc_paused():
            yield from self._read(start, end, chunk)

    def _read(self, start: int, end: int, chunk: int) -> Iterator[pa.RecordBatch]:
        emitter, instance = self.emitter, self.instance
        try:
            produced = instance.read(start, end)
            if produced is None:
                produced = ()
            rows = emitter.rows
            for values in produced:
                rows.append(values)
                if len(rows) >= chunk or len(instance._emitted) >= chunk:
                    yield from emitter.batches(emitter.drain(instance))
                    rows = emitter.rows
        except UserCodeError:
            raise
        except Exception as exc:
            raise user_error(self.node, exc, "read()") from exc
        yield from emitter.batches(emitter.drain(instance))


# -- stateful bolts ------------------------------------------------------------------------

#: What :meth:`StatefulTask.group` returns as the new state to drop the key's state.
REMOVE = object()


# Theory of the output cuts (PySpark 4.3's applyInPandasWithState worker, read in
# pyspark/worker.py): the worker buffers the frames the function yields in one partition
# and, after each non-empty frame, sends the buffer as one Arrow batch once it holds more
# than ``spark.sql.execution.arrow.maxRecordsPerBatch`` rows (the *limit*). A batch also
# carries the states of the keys finished since the last one (a key's state is added
# after its function returns), padded with all-null rows to the data's row count, and
# pandas concatenates that padding with a Python-level test of each of its values (4
# per row) whenever a state is among them. A key's state therefore costs as many rows
# as the batch that carries it. One frame per key made that the next key's whole output
# (a common word: 50k rows), which cost 1.5 s of the 5.6 s of Python CPU of the word
# count benchmark's run (measured). So each key's output closes the pending batch, which
# carries the earlier keys' states, at limit + 1 rows (the least that closes one), and
# the rest follows in one piece: if over the limit it is sent at once, with no state
# (its own key's is not added yet). Only the cost moves: the rows and their order stay.

def output_cuts(pending: int, rows: int, limit: int) -> tuple[list[int], int]:
    """How to yield ``rows`` output rows: the piece sizes, and the rows the worker will
    then hold unsent (see the theory above).

    Args:
        pending: rows yielded in this partition that the worker has not sent yet.
        rows: the rows to yield now (> 0).
        limit: ``maxRecordsPerBatch``; <= 0 means no limit (one piece).
    """
    if limit <= 0 or pending + rows <= limit:
        return [rows], (pending + rows if limit > 0 else 0)
    first = limit + 1 - pending                     # closes the batch with the states
    sizes = [first]
    left = rows - first
    if left:
        sizes.append(left)
    return sizes, (left if left <= limit else 0)


class StatefulTask:
    """The merged stateful operator in one partition of one micro-batch: one instance
    per StatefulBolt (made at its first key), called once per key with that key's rows
    (:meth:`StatefulBolt.process_key`). ``end_batch`` is not called:
    applyInPandasWithState has no end-of-partition hook.
    """

    def __init__(self, topology: str, op: StatefulOp, nodes: dict[str, Node], task: int,
                 batch_id: int | None, settings: RunSettings | None = None,
                 batch_rows: int = 0):
        self.topology, self.op, self.task, self.batch_id = topology, op, task, batch_id
        #: ``maxRecordsPerBatch`` of the query, and the rows yielded and not yet sent by
        #: the worker (see :func:`output_cuts`).
        self.batch_rows = batch_rows
        self.pending_rows = 0
        self.nodes = [nodes[b] for b in op.bolts]
        self.instances: dict[int, Any] = {}
        self.emitters = [Emitter(n) for n in self.nodes]
        for node, emitter in zip(self.nodes, self.emitters):
            emitter.sampler = _sampler(topology, node, task, batch_id, settings)
        self.decoders = [TupleDecoder(slot) for slot in op.slots]
        self.slot_bolt = [op.bolts.index(slot.bolt) for slot in op.slots]
        self.processed = [0] * len(self.nodes)
        self.busy_s = [0.0] * len(self.nodes)
        #: The merged output's columns, to fill other bolts' ones with nulls.
        self.out_columns = [name for name, _ in op.output_columns(nodes)]

    def _instance(self, b: int) -> Any:
        if b not in self.instances:
            self.instances[b] = new_instance(self.topology, self.nodes[b], self.task,
                                             self.batch_id)
        return self.instances[b]

    def group(self, pdfs: Iterable["pd.DataFrame"], state: bytes | None
              ) -> tuple[Any, "pd.DataFrame | None"]:
        """Run one key's rows. ``state`` is the pickled value (None: a new key).

        Returns the new pickled state (or :data:`REMOVE`) and the output rows in the
        merged output layout (None when nothing was emitted).
        """
        start = perf_counter()
        with _gc_paused():
            frames = [pdf for pdf in pdfs if len(pdf)]
            if not frames:
                return (state if state is not None else REMOVE), None
            tuples: Sequence[Any]
            if not self.op.slot_column:
                first = 0
                whole = frames[0] if len(frames) == 1 else _concat(frames)
                tuples = LazyTuples(self.decoders[0], whole)
            else:
                # Rows of several inputs: grouped by input (Storm orders tuples of
                # different streams arbitrarily too).
                first = -1
                tuples = []
                for pdf in frames:
                    slots = pdf[SLOT_COLUMN]
                    for g in slots.unique().tolist():
                        first = g if first < 0 else first
                        tuples.extend(self.decoders[g].from_pandas(pdf[slots == g]))
            b = self.slot_bolt[first]
            node, emitter = self.nodes[b], self.emitters[b]
            instance = self._instance(b)
            slot = self.op.slots[first]
            key = first_values(frames[0], [slot.columns[k] for k in slot.key]) \
                if isinstance(tuples, LazyTuples) else tuple(tuples[0][k] for k in slot.key)
            self.processed[b] += len(tuples)
            try:
                value = instance.initial_state(key) if state is None else pickle.loads(state)
                key_state = KeyState(key, value)
                result = instance.process_key(tuples, key_state)
                returned = None
                if result is not None:
                    if is_columns(result):
                        returned = result
                    else:
                        emitter.rows.extend(result)
            except UserCodeError:
                raise
            except Exception as exc:
                raise user_error(node, exc, "process()") from exc
            if key_state.removed:
                new_state: Any = REMOVE
            else:
                try:
                    new_state = pickle.dumps(key_state.value, PICKLE_PROTOCOL)
                except Exception as exc:
                    raise UserCodeError(node.id, (
                        f"{node.label}: the state of key {key!r} cannot be pickled "
                        f"({type(exc).__name__}: {exc})")) from exc
            out = self._output(b, emitter.drain(instance, returned))
            del tuples, result, returned   # freed while the GC is off: else it scans them
            self.busy_s[b] += perf_counter() - start
            return new_state, out

    def _output(self, b: int, pending: dict[str, list[Any]]) -> "pd.DataFrame | None":
        count, columns = self.emitters[b].arrays(pending)
        if not count:
            return None
        import pandas as pd
        prefix = self.op.output_prefix(self.op.bolts[b])
        data = {}
        for name in self.out_columns:
            if name == BOLT_COLUMN:
                data[name] = np.full(count, b, np.int64)
            elif name.startswith(prefix) and name[len(prefix):] in columns:
                data[name] = columns[name[len(prefix):]]
            else:
                data[name] = np.full(count, None, object)
        return pd.DataFrame(data)

    def pieces(self, out: "pd.DataFrame") -> list["pd.DataFrame"]:
        """``out`` cut into the frames to yield (see :func:`output_cuts`)."""
        sizes, self.pending_rows = output_cuts(self.pending_rows, len(out), self.batch_rows)
        if len(sizes) == 1:
            return [out]
        result, start = [], 0
        for size in sizes:
            result.append(out.iloc[start:start + size])
            start += size
        return result

    def counts(self) -> dict[str, TaskStats]:
        return {node.id: TaskStats(e.emitted, p, busy)
                for node, e, p, busy in zip(self.nodes, self.emitters, self.processed,
                                            self.busy_s)}


def _concat(frames: list["pd.DataFrame"]) -> "pd.DataFrame":
    import pandas as pd
    return pd.concat(frames, ignore_index=True)
