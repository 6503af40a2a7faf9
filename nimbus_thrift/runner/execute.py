"""User code against Arrow batches: what runs inside Spark's Python workers.

No PySpark here (the Spark glue in :mod:`.dataflow` and :mod:`.source` passes the task
index and batch id in), so all of it is tested on plain pyarrow batches.

Per-row Python work is the user's ``process()`` call and little else: input columns
become Python lists once per batch and named tuples through C-level ``map``; returned
tuples are gathered in one list per stream, split into columns with ``itemgetter`` and
converted with one ``pa.array`` per column at the end of the batch. Types are checked
on that column (Arrow's inference, then a comparison), and only a failed check walks
the values to name the bad one. The cyclic GC is off while a batch runs.
"""

from __future__ import annotations

import gc
import importlib
import pickle
from collections import namedtuple
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..topology.components import Context, KeyState
from .plan import (BOLT_COLUMN, SLOT_COLUMN, STREAM_COLUMN, Column, Node, Output,
                   Slot, StatefulOp)

if TYPE_CHECKING:
    import pandas as pd

ARROW_TYPES: dict[str, pa.DataType] = {
    "str": pa.string(), "int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(),
    "bytes": pa.binary(), "object": pa.binary()}
PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,), "int": (int,), "float": (float, int), "bool": (bool,),
    "bytes": (bytes, bytearray, memoryview)}
#: Field types that pandas output takes from Arrow's buffer when there is no null.
NUMERIC = ("int", "float", "bool")
#: Columns up to this length are type-checked value by value (the stateful operator's
#: outputs per key are short; pa.array's inference costs 6 us even for one value).
SMALL_COLUMN = 8
#: Rows per Arrow batch a spout read yields (Spark's own default for Arrow batches).
SPOUT_CHUNK = 10_000
PICKLE_PROTOCOL = pickle.HIGHEST_PROTOCOL


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


class UserCodeError(Exception):
    """User code raised, or emitted something it did not declare.

    The message starts with the component (``bolt 'split' (wordcount.SplitBolt)
    raised ValueError: ...``): the driver finds it in Spark's error text by
    :data:`MARKER` and reports it as the failure.
    """

    #: How the driver recognises the message inside a Python traceback from Spark.
    MARKER = "UserCodeError: "

    def __init__(self, component: str, message: str):
        super().__init__(message)
        self.component = component


def user_error(node: Node, exc: BaseException, what: str = "") -> UserCodeError:
    where = f" in {what}" if what else ""
    return UserCodeError(node.id, f"{node.label} raised {type(exc).__name__}{where}: {exc}")


def load_class(node: Node) -> type:
    """Import ``module.Class`` of a component (nested classes allowed)."""
    parts = node.script.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:split]))
        except ModuleNotFoundError as exc:
            if exc.name and ".".join(parts[:split]).startswith(exc.name):
                continue
            raise user_error(node, exc, "import") from exc
        except Exception as exc:
            raise user_error(node, exc, "import") from exc
        try:
            for attr in parts[split:]:
                obj = getattr(obj, attr)
        except AttributeError:
            break
        if isinstance(obj, type):
            return obj
        break
    raise UserCodeError(node.id, f"{node.label}: cannot import {node.script!r} (is the "
                                 "code on the Python path of the driver and workers?)")


def new_instance(topology: str, node: Node, task: int, batch_id: int | None) -> Any:
    """An initialised instance of ``node``'s class for ``task``."""
    cls = load_class(node)
    try:
        instance = cls()
    except Exception as exc:
        raise user_error(node, exc, "__init__") from exc
    instance._emitted = []
    instance.context = Context(topology, node.id, task, node.parallelism, batch_id,
                               dict(node.conf))
    try:
        instance.initialize(dict(node.conf), instance.context)
    except Exception as exc:
        raise user_error(node, exc, "initialize()") from exc
    return instance


# -- input: columns to named tuples -------------------------------------------------------

def _unpickle(values: list[Any]) -> list[Any]:
    loads = pickle.loads
    return [None if v is None else loads(v) for v in values]


class TupleDecoder:
    """Turns the rows of one input slot into named tuples of its stream's fields,
    with ``component`` and ``stream`` as class attributes (unless a field has the
    name)."""

    def __init__(self, slot: Slot):
        cls = namedtuple("Tuple", slot.field_names, rename=True)  # type: ignore[misc]
        for attr, value in (("component", slot.source), ("stream", slot.stream)):
            if attr not in cls._fields:
                setattr(cls, attr, value)
        self.cls = cls
        self.make = partial(tuple.__new__, cls)
        self.columns = slot.columns

    def _rows(self, cols: list[list[Any]], count: int) -> list[Any]:
        if not cols:
            return [self.make(())] * count
        return list(map(self.make, zip(*cols)))

    def from_arrow(self, batch: pa.RecordBatch) -> list[Any]:
        cols = []
        for c in self.columns:
            values = batch.column(c.name).to_pylist()
            cols.append(_unpickle(values) if c.type == "object" else values)
        return self._rows(cols, batch.num_rows)

    def from_pandas(self, pdf: "pd.DataFrame") -> list[Any]:
        return self._rows(self._pandas_columns(pdf), len(pdf))

    def _pandas_columns(self, pdf: "pd.DataFrame") -> list[list[Any]]:
        cols = []
        for c in self.columns:
            series = pdf[c.name]
            values = series.tolist()
            if c.type == "object":
                values = _unpickle(values)
            elif c.type == "int" and series.dtype.kind == "f":
                # pandas has no null int64: a column with nulls arrives as float.
                values = [None if v != v else int(v) for v in values]
            elif c.type == "bytes" and values and not isinstance(values[0], bytes):
                values = [None if v is None else bytes(v) for v in values]
            cols.append(values)
        return cols


def first_values(pdf: "pd.DataFrame", columns: Sequence[Column]) -> tuple[Any, ...]:
    """The first row's values of ``columns``, as Python values (a key)."""
    values = []
    for c in columns:
        value = pdf[c.name].iat[0]
        if hasattr(value, "item"):                  # a numpy scalar
            value = value.item()
        if c.type == "object" and value is not None:
            value = pickle.loads(value)
        elif c.type == "int" and isinstance(value, float):
            value = None if value != value else int(value)
        elif c.type == "bytes" and value is not None:
            value = bytes(value)
        values.append(value)
    return tuple(values)


class LazyTuples(Sequence[Any]):
    """A key's tuples for :meth:`StatefulBolt.process_key`, made on first use: a bolt
    that only needs ``len(tuples)`` (a counter) pays for no tuple at all."""

    def __init__(self, decoder: TupleDecoder, pdf: "pd.DataFrame"):
        self._decoder = decoder
        self._pdf: "pd.DataFrame | None" = pdf
        self._count = len(pdf)
        self._rows: list[Any] | None = None

    def _materialise(self) -> list[Any]:
        if self._rows is None:
            assert self._pdf is not None
            self._rows = self._decoder.from_pandas(self._pdf)
            self._pdf = None
        return self._rows

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index: Any) -> Any:
        return self._materialise()[index]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._materialise())

    def __repr__(self) -> str:
        return f"<{self._count} tuples>"


# -- output: tuples to typed columns ----------------------------------------------------

def to_array(node: Node, stream: str, column: Column, values: Sequence[Any]) -> pa.Array:
    """One output column as Arrow, checked against its declared type.

    Raises:
        UserCodeError: a value of another type, naming component, stream and field.
    """
    if column.type == "object":                     # pickled by Emitter._values
        return pa.array(values, pa.binary())
    expected = ARROW_TYPES[column.type]
    if len(values) <= SMALL_COLUMN and _plain_values(column.type, values):
        return pa.array(values, expected)
    try:
        array = pa.array(values)
    except (pa.ArrowException, OverflowError, TypeError, ValueError):
        array = None
    if array is not None:
        if array.type == expected:
            return array
        if array.type == pa.null() or (column.type == "float" and array.type == pa.int64()):
            return array.cast(expected)
    raise UserCodeError(node.id, _type_message(node, stream, column, values))


def _plain_values(ftype: str, values: Sequence[Any]) -> bool:
    """Every value is None or of the field type (ints for floats too, bools never
    for numbers): the check of a short column, cheaper than Arrow's inference."""
    accepted = PYTHON_TYPES[ftype]
    for value in values:
        if value is None:
            continue
        kind = type(value)
        if kind not in accepted or (kind is int and not -2**63 <= value < 2**63):
            return False
    return True


def _type_message(node: Node, stream: str, column: Column, values: Sequence[Any]) -> str:
    accepted = PYTHON_TYPES[column.type]
    for value in values:
        bad = value is not None and (not isinstance(value, accepted) or
                                     (column.type in ("int", "float")
                                      and isinstance(value, bool)))
        if column.type == "int" and isinstance(value, int) and not isinstance(value, bool) \
                and not -2**63 <= value < 2**63:
            bad = True
        if bad:
            return (f"{node.label} emitted {value!r} ({type(value).__name__}) on stream "
                    f"{stream!r} as field {column.field!r}, which is declared "
                    f"{column.type}")
    return (f"{node.label} emitted values on stream {stream!r} that do not make an "
            f"Arrow column of type {column.type} for field {column.field!r}")


class Emitter:
    """Gathers what one component instance emits and turns it into output columns."""

    def __init__(self, node: Node):
        self.node = node
        self.output: Output = node.output
        self.by_name = {s.name: s for s in self.output.streams}
        self.default = self.by_name.get("default")
        self.names = [name for name, _ in self.output.columns()]
        #: Tuples returned by process() (the default stream).
        self.rows: list[Any] = []
        self.emitted = 0

    def drain(self, instance: Any) -> dict[str, list[Any]]:
        """All pending tuples by stream: the returned ones and those of ``emit()``."""
        pending: dict[str, list[Any]] = {}
        if self.rows:
            if self.default is None:
                raise UserCodeError(self.node.id, (
                    f"{self.node.label} returned tuples but declares no default stream "
                    f"(its streams: {', '.join(self.by_name)}); use "
                    "self.emit(values, stream)"))
            pending["default"] = self.rows
            self.rows = []
        if instance._emitted:
            for stream, values in instance._emitted:
                if stream not in self.by_name:
                    raise UserCodeError(self.node.id, (
                        f"{self.node.label} emitted on stream {stream!r}, which it does "
                        f"not declare (its streams: {', '.join(self.by_name)})"))
                pending.setdefault(stream, []).append(values)
            instance._emitted = []
        return pending

    def _values(self, stream: str, rows: list[Any]) -> list[list[Any]]:
        """The rows of ``stream`` as one list per field (objects pickled), checked for
        width. Column by column with itemgetter: ``zip(*rows)`` is ten times slower."""
        decl = self.by_name[stream]
        width = len(decl.columns)
        try:
            widths = set(map(len, rows))
        except TypeError:
            widths = {-1}
        # A string is a sequence too: ["word"] instead of [("word",)] is a mistake.
        kinds = set(map(type, rows))
        if widths != {width} or str in kinds or bytes in kinds:
            bad = next(r for r in rows
                       if isinstance(r, (str, bytes)) or not _has_len(r, width))
            raise UserCodeError(self.node.id, (
                f"{self.node.label} emitted {bad!r} on stream {stream!r}; its tuples "
                f"are sequences of {width} values ({', '.join(decl.field_names)})"))
        columns = []
        for k, column in enumerate(decl.columns):
            values = list(map(itemgetter(k), rows))
            if column.type == "object":
                dumps = pickle.dumps
                values = [None if v is None else dumps(v, PICKLE_PROTOCOL) for v in values]
            columns.append(values)
        return columns

    def batches(self, pending: dict[str, list[Any]]) -> list[pa.RecordBatch]:
        """Arrow batches in the output layout, one per stream with tuples."""
        result = []
        for stream, rows in pending.items():
            count = len(rows)
            if not count:
                continue
            self.emitted += count
            own = [to_array(self.node, stream, c, values) for c, values in
                   zip(self.by_name[stream].columns, self._values(stream, rows))]
            arrays: list[pa.Array] = []
            if self.output.stream_column:
                arrays.append(pa.repeat(pa.scalar(self.by_name[stream].index, pa.int64()),
                                        count))
            for decl in self.output.streams:
                if decl.name == stream:
                    arrays.extend(own)
                else:
                    arrays.extend(pa.nulls(count, ARROW_TYPES[c.type]) for c in decl.columns)
            result.append(pa.RecordBatch.from_arrays(arrays, names=self.names))
        return result

    def arrays(self, pending: dict[str, list[Any]]) -> tuple[int, dict[str, np.ndarray]]:
        """Row count and numpy columns of the pending tuples, for a pandas DataFrame
        (the stateful operator's output), checked like :meth:`batches`. Typed numpy
        arrays, not lists: pandas infers the type of a list, which made a DataFrame of
        12k rows 5x slower (3 ms); nor Arrow-backed columns, which Spark 4.3's
        serializer rejects (ChunkedArray)."""
        parts: dict[str, list[np.ndarray]] = {name: [] for name in self.names}
        total = 0
        for stream, rows in pending.items():
            count = len(rows)
            if not count:
                continue
            decl = self.by_name[stream]
            own = {}
            for c, values in zip(decl.columns, self._values(stream, rows)):
                array = to_array(self.node, stream, c, values)
                # Numbers without nulls: the Arrow buffer as is; the rest as objects
                # (for strings a copy of the list's pointers is cheaper than Arrow's
                # conversion back to Python strings).
                own[c.name] = array.to_numpy(zero_copy_only=False) \
                    if c.type in NUMERIC and not array.null_count \
                    else np.array(values, object)
            for name in self.names:
                if name == STREAM_COLUMN:
                    parts[name].append(np.full(count, decl.index, np.int64))
                else:
                    parts[name].append(own[name] if name in own
                                       else np.full(count, None, object))
            total += count
        self.emitted += total
        if not total:
            return 0, {}
        return total, {name: arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
                       for name, arrays in parts.items()}


def _has_len(row: Any, width: int) -> bool:
    try:
        return len(row) == width
    except TypeError:
        return False


# -- bolts -------------------------------------------------------------------------------

@dataclass
class Counts:
    """Tuples a component emitted and processed, to add to the run's figures."""

    emitted: int = 0
    processed: int = 0


class BoltTask:
    """One bolt instance over the Arrow batches of one partition of one micro-batch.

    ``feed`` each input batch and send on the output batches it returns; ``finish``
    calls ``end_batch`` and returns what that emitted.
    """

    def __init__(self, topology: str, node: Node, task: int, batch_id: int | None):
        self.node = node
        self.batch_id = batch_id
        self.instance = new_instance(topology, node, task, batch_id)
        self.decoders = [TupleDecoder(slot) for slot in node.slots]
        self.emitter = Emitter(node)
        self.processed = 0

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
        if self.batch_id is not None:
            try:
                self.instance.end_batch(self.batch_id)
            except Exception as exc:
                raise user_error(self.node, exc, "end_batch()") from exc
        return self.emitter.batches(self.emitter.drain(self.instance))

    @property
    def counts(self) -> Counts:
        return Counts(self.emitter.emitted, self.processed)


def run_bolt(topology: str, node: Node, batches: Iterable[pa.RecordBatch],
             task_of: Callable[[pa.RecordBatch], int], batch_id: int | None,
             done: Callable[[Counts], None]) -> Iterator[pa.RecordBatch]:
    """A mapInArrow body: the bolt over one partition. The instance is made at the
    first non-empty batch (``task_of`` reads its task from it); an empty partition
    makes none and calls no ``end_batch``. ``done`` gets the counts at the end."""
    task: BoltTask | None = None
    for batch in batches:
        if batch.num_rows == 0:
            continue
        if task is None:
            task = BoltTask(topology, node, task_of(batch), batch_id)
        yield from task.feed(batch)
    if task is not None:
        yield from task.finish()
        done(task.counts)


# -- spouts ------------------------------------------------------------------------------

class SpoutTask:
    """One spout instance reading one task's offset range in an executor."""

    def __init__(self, topology: str, node: Node, task: int, batch_id: int | None):
        self.node = node
        self.instance = new_instance(topology, node, task, batch_id)
        self.emitter = Emitter(node)

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


class StatefulTask:
    """The merged stateful operator in one partition of one micro-batch: one instance
    per StatefulBolt (made at its first key), called once per key with that key's rows
    (:meth:`StatefulBolt.process_key`). ``end_batch`` is not called:
    applyInPandasWithState has no end-of-partition hook.
    """

    def __init__(self, topology: str, op: StatefulOp, nodes: dict[str, Node], task: int,
                 batch_id: int | None):
        self.topology, self.op, self.task, self.batch_id = topology, op, task, batch_id
        self.nodes = [nodes[b] for b in op.bolts]
        self.instances: dict[int, Any] = {}
        self.emitters = [Emitter(n) for n in self.nodes]
        self.decoders = [TupleDecoder(slot) for slot in op.slots]
        self.slot_bolt = [op.bolts.index(slot.bolt) for slot in op.slots]
        self.processed = [0] * len(self.nodes)
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
                if result is not None:
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
            out = self._output(b, emitter.drain(instance))
            del tuples, result   # freed while the GC is off: else it scans them all
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

    def counts(self) -> dict[str, Counts]:
        return {node.id: Counts(e.emitted, p)
                for node, e, p in zip(self.nodes, self.emitters, self.processed)}


def _concat(frames: list["pd.DataFrame"]) -> "pd.DataFrame":
    import pandas as pd
    return pd.concat(frames, ignore_index=True)


def output_rows(output: Output, columns: dict[str, list[Any]]) -> dict[str, list[tuple]]:
    """Python tuples by stream from output columns (collected leaf outputs)."""
    count = len(next(iter(columns.values()))) if columns else 0
    result: dict[str, list[tuple]] = {}
    streams = columns.get(STREAM_COLUMN) if output.stream_column else None
    for decl in output.streams:
        cols = []
        for c in decl.columns:
            values = columns[c.name]
            cols.append(_unpickle(values) if c.type == "object" else values)
        rows = list(zip(*cols)) if cols else [()] * count
        if streams is not None:
            rows = [r for r, s in zip(rows, streams) if s == decl.index]
        if rows:
            result[decl.name] = rows
    return result
