"""Input rows as user tuples: Arrow batches and pandas frames to named tuples, and the
collected output columns back to Python tuples.

Input columns become Python lists once per batch and named tuples through C-level
``map``. No PySpark here (see :mod:`.tasks`).
"""

from __future__ import annotations

import pickle
from collections import namedtuple
from functools import partial
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import pyarrow as pa

from .plan import STREAM_COLUMN, Column, Output, Slot

if TYPE_CHECKING:
    import pandas as pd


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
