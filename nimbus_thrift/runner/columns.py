"""Emitted values as typed output columns: Arrow and numpy conversion and type checks.

Types are checked on a whole column (Arrow's inference, then a comparison), and only a
failed check walks the values to name the bad one.

Columns a bolt emits whole (``emit_columns``, or columns returned by ``process_key``)
skip the tuples: their fields and lengths are checked when drained, and each column
goes through the same checks as a column split from tuples, where a numpy array of a
matching dtype is taken as it is (no per-value work at all).

No PySpark here (see :mod:`.tasks`).
"""

from __future__ import annotations

import pickle
import reprlib
import sys
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import pyarrow as pa

from .plan import Column, Node, StreamOut
from .usercode import UserCodeError

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
#: For ``object`` fields (here) and keyed state (:mod:`.tasks`).
PICKLE_PROTOCOL = pickle.HIGHEST_PROTOCOL


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
