"""The pure-Python TBinaryProtocol struct decoder: the reference the C fast path
(_wire.c) agrees with, and the one that says what is wrong with a frame.

Every length is checked against the bytes left in the frame before anything is made,
container counts against the smallest encoding of their elements, nesting against
:data:`MAX_DEPTH`, and every object made is charged against the frame's decoded-size
budget (:mod:`.decoded`). Errors are :class:`~.errors.DecodeError`, never IndexError.
:mod:`.binary` is the public face (``decode_struct``, ``struct_reader``).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from thriftpy2.thrift import TType

from . import decoded
from .decoded import Budget, string_cost
from ..errors import DecodeBudgetError, DecodeError

#: Nesting depth of structs and containers; Apache Thrift's default recursion limit.
MAX_DEPTH = 64

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_DOUBLE = struct.Struct(">d")
_MAP_HEAD = struct.Struct(">bbi")
_LIST_HEAD = struct.Struct(">bi")

_FIXED_SIZE = {
    TType.BOOL: 1, TType.BYTE: 1, TType.I16: 2, TType.I32: 4, TType.I64: 8,
    TType.DOUBLE: 8,
}
#: Smallest encoding of one value of each type, to bound container counts.
_MIN_SIZE = {**_FIXED_SIZE, TType.STRING: 4, TType.STRUCT: 1, TType.MAP: 6,
             TType.SET: 5, TType.LIST: 5}
_BINARY = 18  # thriftpy2's spec code for `binary` fields; on the wire it is STRING (11)


# A reader takes (buf, pos, end, depth, budget) and returns (value, new_pos). The
# buffer is a whole frame; `end` bounds it; `budget` is the frame's decoded.Budget.
# Readers raise DecodeError, never IndexError.
#
# What is charged where (decoded.py has the costs; _wire.c charges the same): a string
# or binary by its reader, a struct's own object by its reader, a container's object
# and slots by its reader before its loop, and a scalar (int, float, bool) by whoever
# holds it: the struct reader after reading the field, or the container with its slots.
Reader = Callable[[Any, int, int, int, Budget], tuple[Any, int]]

#: A scalar's cost by spec type; every other type costs 0 here (it charges itself).
SCALAR_COST = {TType.BOOL: decoded.COST_BOOL, TType.BYTE: decoded.COST_INT,
                TType.I16: decoded.COST_INT, TType.I32: decoded.COST_INT,
                TType.I64: decoded.COST_INT, TType.DOUBLE: decoded.COST_DOUBLE}


def _over_budget(budget: Budget) -> None:
    raise DecodeBudgetError(budget.limit)


def _need(pos: int, n: int, end: int, what: str) -> None:
    if n < 0 or pos + n > end:
        raise DecodeError(f"{what}: needs {n} bytes at offset {pos}, "
                          f"frame ends at {end}")


def _fixed_reader(fmt: struct.Struct, what: str) -> Reader:
    size = fmt.size
    unpack_from = fmt.unpack_from

    def read(buf: Any, pos: int, end: int, depth: int, budget: Budget) -> tuple[Any, int]:
        if pos + size > end:
            _need(pos, size, end, what)
        return unpack_from(buf, pos)[0], pos + size
    return read


_read_i8 = _fixed_reader(_I8, "byte")
_read_i16 = _fixed_reader(_I16, "i16")
_read_i32 = _fixed_reader(_I32, "i32")
_read_i64 = _fixed_reader(_I64, "i64")
_read_double = _fixed_reader(_DOUBLE, "double")


def _read_bool(buf: Any, pos: int, end: int, depth: int, budget: Budget) -> tuple[Any, int]:
    if pos + 1 > end:
        _need(pos, 1, end, "bool")
    return buf[pos] != 0, pos + 1


def _read_binary(buf: Any, pos: int, end: int, depth: int, budget: Budget
                 ) -> tuple[Any, int]:
    if pos + 4 > end:
        _need(pos, 4, end, "binary length")
    n = _I32.unpack_from(buf, pos)[0]
    pos += 4
    if n < 0 or pos + n > end:
        _need(pos, n, end, "binary")
    budget.left -= decoded.COST_BYTES + n
    if budget.left < 0:
        _over_budget(budget)
    return bytes(buf[pos:pos + n]), pos + n


def _read_string(buf: Any, pos: int, end: int, depth: int, budget: Budget
                 ) -> tuple[Any, int]:
    if pos + 4 > end:
        _need(pos, 4, end, "string length")
    n = _I32.unpack_from(buf, pos)[0]
    pos += 4
    if n < 0 or pos + n > end:
        _need(pos, n, end, "string")
    try:
        value = str(buf[pos:pos + n], "utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError(f"string at offset {pos} is not valid UTF-8 ({exc.reason} "
                          f"at byte {exc.start})") from None
    # Charged once made: its size depends on its characters, and is at most 4 times
    # the n bytes just checked against the frame.
    budget.left -= string_cost(value)
    if budget.left < 0:
        _over_budget(budget)
    return value, pos + n


def _check_depth(depth: int) -> None:
    if depth >= MAX_DEPTH:
        raise DecodeError(f"nesting deeper than {MAX_DEPTH} levels")


def _check_count(count: int, elem_types: tuple[int, ...], pos: int, end: int,
                 what: str) -> None:
    """A container's element count must fit the bytes left: checked before looping."""
    if count < 0:
        raise DecodeError(f"{what} declares a negative size {count}")
    per_item = sum(_MIN_SIZE.get(t, 1) for t in elem_types)
    if count * per_item > end - pos:
        raise DecodeError(f"{what} declares {count} elements; the "
                          f"{end - pos} bytes left in the frame hold at most "
                          f"{(end - pos) // per_item}")


def skip(buf: Any, pos: int, end: int, ttype: int, depth: int = 0) -> int:
    """Skip one value of wire type ``ttype``; return the offset after it."""
    if ttype in _FIXED_SIZE:
        size = _FIXED_SIZE[ttype]
        _need(pos, size, end, "skipped value")
        return pos + size
    if ttype == TType.STRING:
        _need(pos, 4, end, "skipped string length")
        n: int = _I32.unpack_from(buf, pos)[0]
        _need(pos + 4, n, end, "skipped string")
        return pos + 4 + n
    _check_depth(depth)
    if ttype == TType.STRUCT:
        while True:
            _need(pos, 1, end, "field type")
            ftype = buf[pos]
            if ftype == TType.STOP:
                return pos + 1
            _need(pos, 3, end, "field header")
            pos = skip(buf, pos + 3, end, ftype, depth + 1)
    if ttype == TType.MAP:
        _need(pos, 6, end, "map header")
        ktype, vtype, count = _MAP_HEAD.unpack_from(buf, pos)
        pos += 6
        _check_count(count, (ktype, vtype), pos, end, "skipped map")
        for _ in range(count):
            pos = skip(buf, pos, end, ktype, depth + 1)
            pos = skip(buf, pos, end, vtype, depth + 1)
        return pos
    if ttype in (TType.LIST, TType.SET):
        _need(pos, 5, end, "list header")
        etype, count = _LIST_HEAD.unpack_from(buf, pos)
        pos += 5
        _check_count(count, (etype,), pos, end, "skipped list")
        for _ in range(count):
            pos = skip(buf, pos, end, etype, depth + 1)
        return pos
    raise DecodeError(f"unknown field type {ttype} at offset {pos}")


def _wire_type(spec_type: int) -> int:
    return TType.STRING if spec_type == _BINARY else spec_type


def _reader_for(ttype: int, spec: Any) -> Reader:
    """Build the reader for a spec entry (type code plus thriftpy2's nested spec)."""
    if ttype == TType.STRING:
        return _read_string
    if ttype == _BINARY:
        return _read_binary
    if ttype == TType.BOOL:
        return _read_bool
    if ttype == TType.BYTE:
        return _read_i8
    if ttype == TType.I16:
        return _read_i16
    if ttype == TType.I32:
        return _read_i32  # enums are plain ints in thriftpy2
    if ttype == TType.I64:
        return _read_i64
    if ttype == TType.DOUBLE:
        return _read_double
    if ttype == TType.STRUCT:
        return _struct_reader(spec)
    if ttype in (TType.LIST, TType.SET):
        return _list_reader(ttype, spec)
    if ttype == TType.MAP:
        return _map_reader(spec)
    raise TypeError(f"unsupported thrift type {ttype} in spec")


def _split_spec(spec: Any) -> tuple[int, Any]:
    if isinstance(spec, tuple):
        return spec[0], spec[1]
    return spec, None


def _list_reader(ttype: int, spec: Any) -> Reader:
    etype, espec = _split_spec(spec)
    wire = _wire_type(etype)
    elem: Reader | None = None
    make = set if ttype == TType.SET else list
    what = "set" if ttype == TType.SET else "list"
    base = decoded.COST_SET if ttype == TType.SET else decoded.COST_LIST
    per_item = (decoded.COST_SET_SLOT if ttype == TType.SET else decoded.COST_LIST_SLOT) \
        + SCALAR_COST.get(etype, 0)

    def read(buf: Any, pos: int, end: int, depth: int, budget: Budget) -> tuple[Any, int]:
        nonlocal elem
        if elem is None:
            elem = _reader_for(etype, espec)
        _check_depth(depth)
        _need(pos, 5, end, f"{what} header")
        got_type, count = _LIST_HEAD.unpack_from(buf, pos)
        pos += 5
        if count and got_type != wire:
            raise DecodeError(f"{what} holds type {got_type}, expected {wire}")
        _check_count(count, (wire,), pos, end, what)
        budget.left -= base + count * per_item
        if budget.left < 0:
            _over_budget(budget)
        out: list[Any] = []
        append = out.append
        for _ in range(count):
            value, pos = elem(buf, pos, end, depth + 1, budget)
            append(value)
        if make is list:
            return out, pos
        try:
            return set(out), pos
        except TypeError:  # e.g. set<list<i32>>: legal IDL, unhashable in Python
            raise DecodeError("set elements of this type are not hashable in Python") \
                from None
    return read


def _map_reader(spec: Any) -> Reader:
    ktype, kspec = _split_spec(spec[0])
    vtype, vspec = _split_spec(spec[1])
    kwire, vwire = _wire_type(ktype), _wire_type(vtype)
    readers: list[Reader] = []
    per_item = decoded.COST_MAP_ENTRY + SCALAR_COST.get(ktype, 0) + SCALAR_COST.get(vtype, 0)

    def read(buf: Any, pos: int, end: int, depth: int, budget: Budget) -> tuple[Any, int]:
        if not readers:
            readers.extend((_reader_for(ktype, kspec), _reader_for(vtype, vspec)))
        kread, vread = readers
        _check_depth(depth)
        _need(pos, 6, end, "map header")
        got_k, got_v, count = _MAP_HEAD.unpack_from(buf, pos)
        pos += 6
        if count and (got_k != kwire or got_v != vwire):
            raise DecodeError(f"map holds types ({got_k}, {got_v}), "
                              f"expected ({kwire}, {vwire})")
        _check_count(count, (kwire, vwire), pos, end, "map")
        budget.left -= decoded.COST_MAP + count * per_item
        if budget.left < 0:
            _over_budget(budget)
        out = {}
        for _ in range(count):
            key, pos = kread(buf, pos, end, depth + 1, budget)
            value, pos = vread(buf, pos, end, depth + 1, budget)
            try:
                out[key] = value
            except TypeError:  # e.g. a list as a key: unhashable in Python
                raise DecodeError(f"map key of type {ktype} is not hashable") from None
        return out, pos
    return read


_STRUCT_READERS: dict[type, Reader] = {}


def _struct_reader(cls: type) -> Reader:
    """The cached reader for a thriftpy2 struct class (built lazily: specs can recurse)."""
    try:
        return _STRUCT_READERS[cls]
    except KeyError:
        pass
    fields: dict[tuple[int, int], tuple[str, Reader, int]] = {}
    pending: list[tuple[int, int, str, Any]] = []
    # attr-defined: thrift_spec is set on the classes thriftpy2 generates.
    for fid, entry in cls.thrift_spec.items():  # type: ignore[attr-defined]
        ttype, name = entry[0], entry[1]
        spec = entry[2] if len(entry) > 3 else None
        pending.append((fid, ttype, name, spec))
    cost = struct_cost(cls)

    def read(buf: Any, pos: int, end: int, depth: int, budget: Budget) -> tuple[Any, int]:
        if pending:
            for fid, ttype, name, spec in pending:
                fields[(fid, _wire_type(ttype))] = (name, _reader_for(ttype, spec),
                                                    SCALAR_COST.get(ttype, 0))
            pending.clear()
        if depth >= MAX_DEPTH:
            _check_depth(depth)
        budget.left -= cost
        if budget.left < 0:
            _over_budget(budget)
        obj = cls()
        get = fields.get
        while True:
            if pos >= end:
                raise DecodeError(f"{cls.__name__}: struct not terminated before the "
                                  f"end of the frame")
            ftype = buf[pos]
            if ftype == 0:
                return obj, pos + 1
            if pos + 3 > end:
                _need(pos, 3, end, "field header")
            fid = _I16.unpack_from(buf, pos + 1)[0]
            pos += 3
            hit = get((fid, ftype))
            if hit is None:  # unknown id or unexpected type: skip, as Java and thriftpy2 do
                pos = skip(buf, pos, end, ftype, depth + 1)
                continue
            try:
                value, pos = hit[1](buf, pos, end, depth + 1, budget)
            except DecodeBudgetError:
                raise                   # about the whole frame, not this field
            except DecodeError as exc:
                raise DecodeError(f"{cls.__name__}.{hit[0]}: {exc}") from None
            budget.left -= hit[2]
            if budget.left < 0:
                _over_budget(budget)
            setattr(obj, hit[0], value)

    _STRUCT_READERS[cls] = read
    return read


def struct_cost(cls: type) -> int:
    """What one decoded instance of thriftpy2 class ``cls`` is charged (its own object;
    its field values are charged as they are read)."""
    # attr-defined: thrift_spec is set on the classes thriftpy2 generates.
    fields = len(cls.thrift_spec)  # type: ignore[attr-defined]
    return decoded.COST_STRUCT + decoded.COST_STRUCT_FIELD * fields
