"""User code against Arrow batches: what runs inside Spark's Python workers.

No PySpark here (the Spark glue in :mod:`.dataflow` and :mod:`.source` passes the task
index and batch id in), so all of it is tested on plain pyarrow batches.

Per-row Python work is the user's ``process()`` call and little else: input columns
become Python lists once per batch and named tuples through C-level ``map``; returned
tuples are gathered in one list per stream, split into columns with ``itemgetter`` and
converted with one ``pa.array`` per column at the end of the batch. Types are checked
on that column (Arrow's inference, then a comparison), and only a failed check walks
the values to name the bad one. The cyclic GC is off while a batch runs.

Columns a bolt emits whole (``emit_columns``, or columns returned by ``process_key``)
skip the tuples: their fields and lengths are checked when drained, and each column
goes through the same checks as a column split from tuples, where a numpy array of a
matching dtype is taken as it is (no per-value work at all).

What the emitter holds per stream, in emission order, is a list of *parts*: a list of
tuples, or a :class:`ColumnChunk`. A stream's parts are converted one by one and
concatenated: into one Arrow batch (stateless bolts, spouts), or into the stateful
operator's pandas output.
"""

from __future__ import annotations

import gc
import importlib
import pickle
import reprlib
import sys
from collections import namedtuple
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..topology.components import Context, KeyState
from .plan import (BOLT_COLUMN, SLOT_COLUMN, STREAM_COLUMN, Column, Node, Output,
                   Slot, StatefulOp, StreamOut)

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
#: numpy dtype kinds a field type takes whole: ints (signed or not; uint64 checked)
#: for int, ints too for float, no bools for numbers (as in tuples); str_ and bytes_.
NUMPY_KINDS = {"int": "iu", "float": "fiu", "bool": "b", "str": "U", "bytes": "S"}
#: What pandas' ``infer_dtype`` says of an object array of only str (or bytes) values.
INFERRED = {"str": "string", "bytes": "bytes"}
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


# -- output: tuples and columns to typed columns ----------------------------------------

def to_array(node: Node, stream: str, column: Column, values: Any) -> pa.Array:
    """One output column as Arrow, checked against its declared type.

    ``values`` is a list (of pickled values for an ``object`` field), a numpy array or
    a pyarrow Array (see :func:`column_values`).

    Raises:
        UserCodeError: a value of another type, naming component, stream and field.
    """
    if column.type == "object":                     # pickled by the Emitter
        return pa.array(values, pa.binary())
    expected = ARROW_TYPES[column.type]
    if isinstance(values, pa.Array):
        return _arrow_checked(node, stream, column, values)
    if isinstance(values, np.ndarray):
        if values.dtype.kind in NUMPY_KINDS[column.type]:
            return pa.array(_numpy_checked(node, stream, column, values), expected)
        if values.dtype.kind != "O":
            raise UserCodeError(node.id, _dtype_message(node, stream, column, values))
        # An object array: its values are checked like a list's.
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


def to_numpy(node: Node, stream: str, column: Column, values: Any) -> np.ndarray:
    """One output column as numpy, for a pandas DataFrame (the stateful operator's
    output), checked like :func:`to_array`.

    Numbers without nulls are typed arrays (a numpy array of the field's dtype is
    returned as it is); the rest are object arrays. Typed arrays, not lists: pandas
    infers the type of a list, which made a DataFrame of 12k rows 5x slower (3 ms);
    nor Arrow-backed columns, which Spark 4.3's serializer rejects (ChunkedArray).

    Raises:
        UserCodeError: as :func:`to_array`.
    """
    if isinstance(values, np.ndarray):
        kind = values.dtype.kind
        if column.type != "object" and kind in NUMPY_KINDS[column.type]:
            checked = _numpy_checked(node, stream, column, values)
            return checked.astype(object) if kind in "US" else checked
        if kind == "O" and _only(column.type, values):
            return values
    elif isinstance(values, list) and column.type in INFERRED:
        # Strings: a copy of the list's pointers and pandas' check of their types cost
        # a third of Arrow's inference plus the copy (0.7 against 1.5 ms for 40k).
        try:
            objects = np.array(values, object)
        except ValueError:                          # nested sequences of other lengths
            objects = None
        if objects is not None and objects.ndim == 1 and _only(column.type, objects):
            return objects
    array = to_array(node, stream, column, values)
    if column.type in NUMERIC and not array.null_count:
        return array.to_numpy(zero_copy_only=False)
    if isinstance(values, list):
        # Strings and nulls: the list's own objects, cheaper than Arrow's conversion.
        return np.array(values, object)
    if column.type in NUMERIC:                      # with nulls: Python numbers and None
        return np.array(array.to_pylist(), object)
    return array.to_numpy(zero_copy_only=False)     # str, bytes: objects, None for null


def _only(ftype: str, objects: np.ndarray) -> bool:
    """An object array holds only str (or only bytes) values: pandas' C-level type
    inference, 0.3 ms for 40k values. Anything else (None too) takes the full check."""
    if ftype not in INFERRED or not len(objects):
        return False
    from pandas.api.types import infer_dtype
    return bool(infer_dtype(objects, skipna=False) == INFERRED[ftype])


def _numpy_checked(node: Node, stream: str, column: Column, values: np.ndarray
                   ) -> np.ndarray:
    """A numpy array of an accepted dtype kind as the field's dtype: a cast of the
    whole array (none if it already is), never a walk over its values."""
    if column.type == "int":
        if values.dtype.kind == "u" and values.dtype.itemsize == 8 and len(values) \
                and values.max() >= 2**63:
            bad = int(values[values >= 2**63][0])
            raise UserCodeError(node.id, (
                f"{node.label} emitted {bad} ({values.dtype}) on stream {stream!r} as "
                f"field {column.field!r}, which is declared int (64-bit signed)"))
        return values.astype(np.int64, copy=False)
    if column.type == "float":
        return values.astype(np.float64, copy=False)
    return values                                   # bool, str_, bytes_


#: View types came in pyarrow 16; setup.cfg allows 15.
_is_string_view = getattr(pa.types, "is_string_view", lambda kind: False)
_is_binary_view = getattr(pa.types, "is_binary_view", lambda kind: False)


def _arrow_checked(node: Node, stream: str, column: Column, array: pa.Array) -> pa.Array:
    """A pyarrow Array as the field's Arrow type, if its type is one the field takes."""
    kind = array.type
    if pa.types.is_dictionary(kind):                # e.g. from a pandas Categorical
        array = array.dictionary_decode()
        kind = array.type
    ftype = column.type
    accepted = (pa.types.is_null(kind)
                or (ftype == "int" and pa.types.is_integer(kind))
                or (ftype == "float" and (pa.types.is_floating(kind)
                                          or pa.types.is_integer(kind)))
                or (ftype == "bool" and pa.types.is_boolean(kind))
                or (ftype == "str" and (pa.types.is_string(kind)
                                        or pa.types.is_large_string(kind)
                                        or _is_string_view(kind)))
                or (ftype == "bytes" and (pa.types.is_binary(kind)
                                          or pa.types.is_large_binary(kind)
                                          or pa.types.is_fixed_size_binary(kind)
                                          or _is_binary_view(kind))))
    if accepted:
        try:
            return array.cast(ARROW_TYPES[ftype])
        except (pa.ArrowException, OverflowError, ValueError):
            pass                                    # uint64 beyond int64: named below
    raise UserCodeError(node.id, (
        f"{node.label} emitted an Arrow column of type {kind} on stream {stream!r} as "
        f"field {column.field!r}, which is declared {ftype}"))


def _dtype_message(node: Node, stream: str, column: Column, values: np.ndarray) -> str:
    return (f"{node.label} emitted a numpy column of dtype {values.dtype} on stream "
            f"{stream!r} as field {column.field!r}, which is declared {column.type}")


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


# -- output: columns emitted whole --------------------------------------------------------

#: The column types :meth:`Component.emit_columns` takes, for error messages.
COLUMN_KINDS = "a list, numpy array, pyarrow Array or pandas Series"


@dataclass
class ColumnChunk:
    """Columns emitted at once on one stream: one per declared field, in order, each of
    ``count`` values (a list, numpy array or pyarrow Array; pickled values for an
    ``object`` field). Names and lengths are checked; types when converted."""

    count: int
    values: list[Any]


def _pandas_type(name: str) -> Any:
    """pandas' ``DataFrame`` or ``Series`` if pandas is loaded: what is not loaded
    cannot have made the user's value, and a stateless bolt need not import it."""
    pd = sys.modules.get("pandas")
    return getattr(pd, name, None) if pd is not None else None


def _is_frame(data: Any) -> bool:
    frame = _pandas_type("DataFrame")
    return frame is not None and isinstance(data, frame)


def is_columns(result: Any) -> bool:
    """``process_key`` returned columns (a mapping or a DataFrame), not tuples."""
    return type(result) is not list and (isinstance(result, Mapping) or _is_frame(result))


def column_values(node: Node, stream: str, column: Column, value: Any) -> Any:
    """One emitted column as a list, 1-d numpy array or pyarrow Array (pickled values
    for an ``object`` field).

    Raises:
        UserCodeError: not a column (a scalar, a string, a mapping), or not 1-d.
    """
    where = f"as field {column.field!r} on stream {stream!r}"
    series = _pandas_type("Series")
    if series is not None and isinstance(value, series):
        if isinstance(value.dtype, np.dtype):
            value = value.to_numpy()
        else:                   # an extension dtype (string, Int64, category): via Arrow
            try:
                value = pa.array(value, from_pandas=True)
            except (pa.ArrowException, TypeError, ValueError) as exc:
                raise UserCodeError(node.id, (
                    f"{node.label} emitted a pandas Series of dtype {value.dtype} {where}, "
                    f"which Arrow cannot convert ({exc})")) from exc
    if isinstance(value, pa.ChunkedArray):
        value = value.combine_chunks()
    if isinstance(value, np.ndarray):
        if value.ndim != 1:
            raise UserCodeError(node.id, (
                f"{node.label} emitted a {value.ndim}-dimensional numpy array {where}; "
                "a column is one-dimensional"))
    elif not isinstance(value, (list, pa.Array)):
        if isinstance(value, (str, bytes, bytearray, memoryview, Mapping)) or \
                not hasattr(value, "__iter__"):
            raise UserCodeError(node.id, (
                f"{node.label} emitted {reprlib.repr(value)} ({type(value).__name__}) "
                f"{where}; a column is {COLUMN_KINDS}"))
        value = list(value)                         # a tuple, range, deque, generator
    if column.type == "object":                     # Python values, not numpy scalars
        return pickled(node, stream, column, value.to_pylist() if isinstance(value, pa.Array)
                       else value.tolist() if isinstance(value, np.ndarray) else value)
    return value


def pickled(node: Node, stream: str, column: Column, values: list[Any]) -> list[Any]:
    """The values of an ``object`` field, pickled (None stays null).

    Raises:
        UserCodeError: a value cannot be pickled, naming it, the stream and the field.
    """
    dumps = pickle.dumps
    try:
        return [None if v is None else dumps(v, PICKLE_PROTOCOL) for v in values]
    except Exception:
        pass                                        # find the value, off the fast path
    for value in values:
        try:
            dumps(value, PICKLE_PROTOCOL)
        except Exception as exc:
            raise UserCodeError(node.id, (
                f"{node.label} emitted {reprlib.repr(value)} ({type(value).__name__}) on "
                f"stream {stream!r} as field {column.field!r}, which cannot be pickled "
                f"({type(exc).__name__}: {exc})")) from exc
    raise AssertionError("unreachable: pickling failed, then every value pickled")


def column_chunk(node: Node, decl: StreamOut, data: Any, how: str = "emitted"
                 ) -> ColumnChunk:
    """The columns ``data`` (a DataFrame or mapping) for stream ``decl``, checked for
    their names (exactly the declared fields) and lengths (all equal).

    Raises:
        UserCodeError: naming the component, the stream and the field at fault.
    """
    stream = decl.name
    fields = ", ".join(decl.field_names)
    given: Mapping[Any, Any]
    count: int | None = None
    if _is_frame(data):
        names = list(data.columns)
        if len(set(names)) != len(names):
            twice = next(n for n in names if names.count(n) > 1)
            raise UserCodeError(node.id, (
                f"{node.label} {how} a DataFrame on stream {stream!r} with column "
                f"{twice!r} twice (its fields: {fields})"))
        given = {name: data[name] for name in names}
        count = len(data)
    elif isinstance(data, Mapping):
        given = data
    else:
        raise UserCodeError(node.id, (
            f"{node.label} {how} {reprlib.repr(data)} ({type(data).__name__}) as columns "
            f"on stream {stream!r}; columns are a pandas DataFrame or a mapping of field "
            f"name to {COLUMN_KINDS}"))
    for c in decl.columns:
        if c.field not in given:
            raise UserCodeError(node.id, (
                f"{node.label} {how} columns on stream {stream!r} without field "
                f"{c.field!r} (its fields: {fields})"))
    if len(given) != len(decl.columns):
        extra = next(k for k in given if k not in decl.field_names)
        raise UserCodeError(node.id, (
            f"{node.label} {how} columns on stream {stream!r} with field {extra!r}, "
            f"which it does not declare (its fields: {fields})"))
    values = [column_values(node, stream, c, given[c.field]) for c in decl.columns]
    lengths = [len(v) for v in values]
    if count is None:
        count = lengths[0] if lengths else 0
    for c, length in zip(decl.columns, lengths):
        if length != count:
            first = decl.columns[0]
            raise UserCodeError(node.id, (
                f"{node.label} {how} columns of different lengths on stream {stream!r}: "
                f"{first.field!r} has {count} values, {c.field!r} has {length}"))
    return ColumnChunk(count, values)


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

    def drain(self, instance: Any, returned: Any = None) -> dict[str, list[Any]]:
        """All pending parts by stream (see the module docstring): the returned tuples,
        then ``returned`` columns (of ``process_key``), then those of ``emit()`` and
        ``emit_columns()`` in order."""
        pending: dict[str, list[Any]] = {}
        if self.rows or returned is not None:
            if self.default is None:
                what = "tuples" if self.rows else "columns"
                call = "emit(values, stream)" if self.rows else "emit_columns(columns, stream)"
                raise UserCodeError(self.node.id, (
                    f"{self.node.label} returned {what} but declares no default stream "
                    f"(its streams: {', '.join(self.by_name)}); use self.{call}"))
            parts = pending["default"] = []
            if self.rows:
                parts.append(self.rows)
                self.rows = []
            if returned is not None:
                parts.append(column_chunk(self.node, self.default, returned, "returned"))
        emitted = instance._emitted
        if emitted:
            instance._emitted = []
            #: Per stream, its last part if a list of tuples: the next tuple joins it.
            tail: dict[str, list[Any]] = {}
            for stream, values in emitted:
                rows = tail.get(stream)
                if rows is not None and type(values) is tuple:
                    rows.append(values)
                    continue
                decl = self.by_name.get(stream)
                if decl is None:
                    raise UserCodeError(self.node.id, (
                        f"{self.node.label} emitted on stream {stream!r}, which it does "
                        f"not declare (its streams: {', '.join(self.by_name)})"))
                parts = pending.setdefault(stream, [])
                if type(values) is tuple:
                    tail[stream] = rows = [values]
                    parts.append(rows)
                else:                               # an EmittedColumns
                    parts.append(column_chunk(self.node, decl, values.data))
                    tail.pop(stream, None)
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
            hint = ("; to return or emit columns, use a mapping of field to column "
                    "from process_key or self.emit_columns()"
                    if isinstance(bad, str) and bad in decl.field_names else "")
            raise UserCodeError(self.node.id, (
                f"{self.node.label} emitted {bad!r} on stream {stream!r}; its tuples "
                f"are sequences of {width} values ({', '.join(decl.field_names)}){hint}"))
        columns = []
        for k, column in enumerate(decl.columns):
            values = list(map(itemgetter(k), rows))
            if column.type == "object":
                values = pickled(self.node, stream, column, values)
            columns.append(values)
        return columns

    def _part(self, stream: str, part: Any) -> tuple[int, list[Any]]:
        """Row count and one value sequence per field of a pending part."""
        if type(part) is ColumnChunk:
            return part.count, part.values
        return len(part), (self._values(stream, part) if part else [])

    def batches(self, pending: dict[str, list[Any]]) -> list[pa.RecordBatch]:
        """Arrow batches in the output layout, one per stream with tuples (its parts
        concatenated: many small batches cost Spark more than one concatenation)."""
        result = []
        for stream, parts in pending.items():
            decl = self.by_name[stream]
            pieces: list[list[pa.Array]] = [[] for _ in decl.columns]
            count = 0
            for part in parts:
                rows, values = self._part(stream, part)
                if not rows:
                    continue
                count += rows
                for piece, c, v in zip(pieces, decl.columns, values):
                    piece.append(to_array(self.node, stream, c, v))
            if not count:
                continue
            self.emitted += count
            own = [piece[0] if len(piece) == 1 else pa.concat_arrays(piece)
                   for piece in pieces]
            arrays: list[pa.Array] = []
            if self.output.stream_column:
                arrays.append(pa.repeat(pa.scalar(decl.index, pa.int64()), count))
            for other in self.output.streams:
                if other.name == stream:
                    arrays.extend(own)
                else:
                    arrays.extend(pa.nulls(count, ARROW_TYPES[c.type]) for c in other.columns)
            result.append(pa.RecordBatch.from_arrays(arrays, names=self.names))
        return result

    def arrays(self, pending: dict[str, list[Any]]) -> tuple[int, dict[str, np.ndarray]]:
        """Row count and numpy columns of the pending parts, for a pandas DataFrame
        (the stateful operator's output), checked like :meth:`batches`
        (see :func:`to_numpy`)."""
        parts: dict[str, list[np.ndarray]] = {name: [] for name in self.names}
        total = 0
        for stream, chunks in pending.items():
            decl = self.by_name[stream]
            for chunk in chunks:
                count, values = self._part(stream, chunk)
                if not count:
                    continue
                own = {c.name: to_numpy(self.node, stream, c, v)
                       for c, v in zip(decl.columns, values)}
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
