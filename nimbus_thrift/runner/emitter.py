"""The emitter: what one component instance emits, gathered and turned into columns.

Returned tuples are gathered in one list per stream, split into columns with
``itemgetter`` and converted with one ``pa.array`` per column (see :mod:`.columns`) at
the end of the batch.

What the emitter holds per stream, in emission order, is a list of *parts*: a list of
tuples, or a :class:`~.columns.ColumnChunk`. A stream's parts are converted one by one
and concatenated: into one Arrow batch (stateless bolts, spouts), or into the stateful
operator's pandas output.

No PySpark here (see :mod:`.tasks`).
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any

import numpy as np
import pyarrow as pa

from .columns import ARROW_TYPES, ColumnChunk, column_chunk, pickled, to_array, to_numpy
from .plan import STREAM_COLUMN, Node, Output
from .sampling import TupleSampler
from .usercode import UserCodeError


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
        #: Logs a sample of the emitted tuples while the topology's ``debug`` says so.
        self.sampler: TupleSampler | None = None

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
        # A string is a sequence too: ["word"] instead of [("word",)] is a mistake.
        kinds = set(map(type, rows))
        if width == 1 and kinds <= _PLAIN_ROWS:
            # One field (a split's words): unpacking checks the width and takes the
            # values in one pass, half the time of len() then itemgetter (measured).
            try:
                values = [value for (value,) in rows]
            except ValueError:
                pass                                # a row of another width: named below
            else:
                column = decl.columns[0]
                if column.type == "object":
                    values = pickled(self.node, stream, column, values)
                return [values]
        try:
            widths = set(map(len, rows))
        except TypeError:
            widths = {-1}
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
        """Row count and one value sequence per field of a pending part (sampled for
        the log once checked, if sampling is on)."""
        if type(part) is ColumnChunk:
            if self.sampler is not None:
                self.sampler.columns(stream, part.count, part.values)
            return part.count, part.values
        values = self._values(stream, part) if part else []
        if self.sampler is not None:
            self.sampler.rows(stream, part)
        return len(part), values

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


#: Row types whose unpacking is exactly their length check (no str, bytes, dict, ...).
_PLAIN_ROWS = frozenset((tuple, list))


def _has_len(row: Any, width: int) -> bool:
    try:
        return len(row) == width
    except TypeError:
        return False
