"""TCompactProtocol, without sockets: message headers, a bounds-checked struct decoder
and an encoder for replies (doc/specs/thrift-compact-protocol.md in Apache Thrift).

Message header::

    [0x82][version 1 | type << 5][varint seqid][varint name length][name bytes]

Values: integers are zigzag varints (i16, i32, i64; a byte is one raw byte), a double
is 8 bytes little-endian, a string or binary a varint length then its bytes. A field
header is one byte ``(id delta << 4) | compact type`` when the id is 1..15 above the
previous field's, else the type byte then the id as a zigzag varint; a bool field
carries its value in the type (1 true, 2 false). A list or set header is one byte
``(size << 4) | type`` below 15 elements, else ``0xF0 | type`` then a varint size; a map
is a varint size then, when not empty, one byte ``(key type << 4) | value type``.

The decoder keeps the binary decoder's rules (:mod:`.pydecode`): every length and
count is checked against the bytes left before anything is made (each element takes at
least one byte, a double eight), a varint longer than its type allows is refused,
nesting is capped at :data:`~.pydecode.MAX_DEPTH`, and every object made is charged
against the request's decoded-size budget at the same points and by the same amounts
(:mod:`.decoded`). Errors are :class:`~.errors.DecodeError`.

Structs are decoded (_compact.c) and replies encoded (_compactencode.c) in C when it is
built, with the plans binary.py makes for the binary codec; on anything C does not take
exactly as this module would, it returns None and this module does the work (and raises
the errors).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from thriftpy2.thrift import TApplicationException, TType

from . import binary, decoded
from .binary import CALL, EXCEPTION, ONEWAY, REPLY, MessageHeader, StructReader
from .decoded import Budget, string_cost
from ..errors import BadVersionError, DecodeBudgetError, DecodeError
from .pydecode import _BINARY, MAX_DEPTH, SCALAR_COST, _split_spec, struct_cost

__all__ = ["PROTOCOL_ID", "read_message_header", "struct_reader", "decode_struct",
           "encode_message", "encode_application_exception", "skip", "CALL", "REPLY",
           "EXCEPTION", "ONEWAY"]

#: The first byte of every compact message.
PROTOCOL_ID = 0x82
VERSION = 1
VERSION_MASK = 0x1F
TYPE_SHIFT = 5

# Compact wire types.
C_STOP, C_TRUE, C_FALSE, C_BYTE, C_I16, C_I32, C_I64, C_DOUBLE, C_BINARY, C_LIST, \
    C_SET, C_MAP, C_STRUCT = range(13)

#: Thrift type -> compact type (bool fields use C_TRUE/C_FALSE instead).
TO_COMPACT = {TType.BOOL: C_TRUE, TType.BYTE: C_BYTE, TType.I16: C_I16, TType.I32: C_I32,
              TType.I64: C_I64, TType.DOUBLE: C_DOUBLE, TType.STRING: C_BINARY,
              _BINARY: C_BINARY, TType.LIST: C_LIST, TType.SET: C_SET, TType.MAP: C_MAP,
              TType.STRUCT: C_STRUCT}
#: Compact type -> Thrift wire type.
FROM_COMPACT = {C_TRUE: TType.BOOL, C_FALSE: TType.BOOL, C_BYTE: TType.BYTE,
                C_I16: TType.I16, C_I32: TType.I32, C_I64: TType.I64,
                C_DOUBLE: TType.DOUBLE, C_BINARY: TType.STRING, C_LIST: TType.LIST,
                C_SET: TType.SET, C_MAP: TType.MAP, C_STRUCT: TType.STRUCT}

#: Smallest encoding of one value of each compact type, to bound container counts.
MIN_SIZE = {C_DOUBLE: 8}

#: Bytes a varint of each width may take (ceil(bits / 7)).
VARINT_BYTES_32 = 5
VARINT_BYTES_64 = 10

_DOUBLE = struct.Struct("<d")

try:  # The C fast paths (_compact.c); this module keeps every error.
    from . import _compact
except ImportError:  # pragma: no cover - exercised only without the C extension
    _compact = None  # type: ignore[assignment]  # None: the C module is not built

Reader = Callable[[Any, int, int, int, Budget], tuple[Any, int]]

_BITS = {TType.I16: 16, TType.I32: 32, TType.I64: 64}


# --------------------------------------------------------------------------- varints


def read_varint(buf: Any, pos: int, end: int, max_bytes: int = VARINT_BYTES_64
                ) -> tuple[int, int]:
    """An unsigned LEB128 varint at ``pos``: (value, offset after it).

    Raises:
        DecodeError: truncated before its last byte, or longer than ``max_bytes``.
    """
    result = 0
    shift = 0
    start = pos
    while True:
        if pos >= end:
            raise DecodeError(f"varint at offset {start} truncated: frame ends at {end}")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if pos - start >= max_bytes:
            raise DecodeError(f"varint at offset {start} longer than {max_bytes} bytes")


def zigzag_decode(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


def zigzag_encode(n: int, bits: int) -> int:
    """Zigzag of ``n``, which must fit a signed ``bits``-bit integer (ValueError)."""
    if not -(1 << (bits - 1)) <= n < (1 << (bits - 1)):
        raise ValueError(f"{n} does not fit an i{bits}")
    return ((n << 1) ^ (n >> (bits - 1))) & ((1 << bits) - 1)


def varint(n: int) -> bytes:
    """The unsigned LEB128 encoding of ``n`` (>= 0)."""
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _read_zigzag(buf: Any, pos: int, end: int, bits: int) -> tuple[int, int]:
    raw, pos = read_varint(buf, pos, end, VARINT_BYTES_32 if bits <= 32 else VARINT_BYTES_64)
    if raw >> bits:
        raise DecodeError(f"varint {raw} too large for an i{bits}")
    return zigzag_decode(raw), pos


# --------------------------------------------------------------------------- header


def read_message_header(buf: bytes | bytearray | memoryview, strict_read: bool = False
                        ) -> MessageHeader:
    """Read a compact message header at the start of ``buf``.

    Raises:
        BadVersionError: not a compact header, or not version 1.
        DecodeError: truncated, or the name is not UTF-8.
    """
    end = len(buf)
    if end < 2:
        raise DecodeError(f"message header truncated: message has {end} bytes")
    if buf[0] != PROTOCOL_ID:
        raise BadVersionError(buf[0] << 24 | buf[1] << 16,
                              "not a TCompactProtocol message (first byte is not 0x82)")
    if buf[1] & VERSION_MASK != VERSION:
        raise BadVersionError(buf[0] << 24 | buf[1] << 16,
                              f"TCompactProtocol version {buf[1] & VERSION_MASK}, not 1")
    mtype = buf[1] >> TYPE_SHIFT
    seqid, pos = read_varint(buf, 2, end, VARINT_BYTES_32)
    if seqid >> 32:
        raise DecodeError(f"sequence id {seqid} does not fit 32 bits")
    if seqid >= 1 << 31:
        seqid -= 1 << 32                    # written as the i32's unsigned bits
    size, pos = read_varint(buf, pos, end, VARINT_BYTES_32)
    if pos + size > end:
        raise DecodeError(f"message name length {size} does not fit the {end}-byte "
                          f"message")
    try:
        name = str(buf[pos:pos + size], "utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError(f"message name is not UTF-8: {exc}") from None
    return MessageHeader(name, mtype, seqid, pos + size)


# --------------------------------------------------------------------------- decoding


def _over_budget(budget: Budget) -> None:
    raise DecodeBudgetError(budget.limit)


def _check_depth(depth: int) -> None:
    if depth >= MAX_DEPTH:
        raise DecodeError(f"nesting deeper than {MAX_DEPTH} levels")


def _check_count(count: int, per_item: int, pos: int, end: int, what: str) -> None:
    if count * per_item > end - pos:
        raise DecodeError(f"{what} declares {count} elements; the {end - pos} bytes "
                          f"left hold at most {(end - pos) // per_item}")


def _read_list_head(buf: Any, pos: int, end: int, what: str) -> tuple[int, int, int]:
    """(compact element type, count, offset after the header)."""
    if pos >= end:
        raise DecodeError(f"{what} header truncated at offset {pos}")
    head = buf[pos]
    pos += 1
    count = head >> 4
    if count == 15:
        count, pos = read_varint(buf, pos, end, VARINT_BYTES_32)
    return head & 0x0F, count, pos


def _read_map_head(buf: Any, pos: int, end: int) -> tuple[int, int, int, int]:
    """(compact key type, compact value type, count, offset after the header)."""
    count, pos = read_varint(buf, pos, end, VARINT_BYTES_32)
    if count == 0:
        return 0, 0, 0, pos
    if pos >= end:
        raise DecodeError(f"map header truncated at offset {pos}")
    types = buf[pos]
    return types >> 4, types & 0x0F, count, pos + 1


def skip(buf: Any, pos: int, end: int, ctype: int, depth: int = 0) -> int:
    """Skip one value of compact type ``ctype``; return the offset after it."""
    if ctype in (C_TRUE, C_FALSE):
        return pos              # a bool field's value is in its type (in a container:
        # the caller skips the byte, see _skip_element)
    if ctype == C_BYTE:
        if pos >= end:
            raise DecodeError(f"skipped byte truncated at offset {pos}")
        return pos + 1
    if ctype in (C_I16, C_I32, C_I64):
        return read_varint(buf, pos, end)[1]
    if ctype == C_DOUBLE:
        if pos + 8 > end:
            raise DecodeError(f"skipped double truncated at offset {pos}")
        return pos + 8
    if ctype == C_BINARY:
        size, pos = read_varint(buf, pos, end, VARINT_BYTES_32)
        if pos + size > end:
            raise DecodeError(f"skipped string of {size} bytes at offset {pos} does not "
                              f"fit: frame ends at {end}")
        return pos + size
    _check_depth(depth)
    if ctype == C_STRUCT:
        while True:
            if pos >= end:
                raise DecodeError("skipped struct not terminated before the end")
            head = buf[pos]
            pos += 1
            if head == C_STOP:
                return pos
            if head >> 4 == 0:
                pos = _read_zigzag(buf, pos, end, 16)[1]
            pos = skip(buf, pos, end, head & 0x0F, depth + 1)
    if ctype in (C_LIST, C_SET):
        etype, count, pos = _read_list_head(buf, pos, end, "skipped list")
        _check_count(count, MIN_SIZE.get(etype, 1), pos, end, "skipped list")
        for _ in range(count):
            pos = _skip_element(buf, pos, end, etype, depth + 1)
        return pos
    if ctype == C_MAP:
        ktype, vtype, count, pos = _read_map_head(buf, pos, end)
        _check_count(count, MIN_SIZE.get(ktype, 1) + MIN_SIZE.get(vtype, 1), pos, end,
                     "skipped map")
        for _ in range(count):
            pos = _skip_element(buf, pos, end, ktype, depth + 1)
            pos = _skip_element(buf, pos, end, vtype, depth + 1)
        return pos
    raise DecodeError(f"unknown compact type {ctype} at offset {pos}")


def _skip_element(buf: Any, pos: int, end: int, ctype: int, depth: int) -> int:
    if ctype in (C_TRUE, C_FALSE):          # a bool in a container is one byte
        if pos >= end:
            raise DecodeError(f"skipped bool truncated at offset {pos}")
        return pos + 1
    return skip(buf, pos, end, ctype, depth)


def _read_bool(buf: Any, pos: int, end: int, depth: int, budget: Budget) -> tuple[Any, int]:
    # In a container (a field's bool never reaches here: it is in the field header).
    if pos >= end:
        raise DecodeError(f"bool truncated at offset {pos}")
    return buf[pos] == C_TRUE, pos + 1


def _read_byte(buf: Any, pos: int, end: int, depth: int, budget: Budget) -> tuple[Any, int]:
    if pos >= end:
        raise DecodeError(f"byte truncated at offset {pos}")
    value = buf[pos]
    return value - 256 if value > 127 else value, pos + 1


def _int_reader(bits: int) -> Reader:
    def read(buf: Any, pos: int, end: int, depth: int, budget: Budget) -> tuple[Any, int]:
        return _read_zigzag(buf, pos, end, bits)
    return read


def _read_double(buf: Any, pos: int, end: int, depth: int, budget: Budget
                 ) -> tuple[Any, int]:
    if pos + 8 > end:
        raise DecodeError(f"double: needs 8 bytes at offset {pos}, frame ends at {end}")
    return _DOUBLE.unpack_from(buf, pos)[0], pos + 8


def _read_sized(buf: Any, pos: int, end: int, what: str) -> tuple[int, int]:
    size, pos = read_varint(buf, pos, end, VARINT_BYTES_32)
    if pos + size > end:
        raise DecodeError(f"{what}: needs {size} bytes at offset {pos}, frame ends at {end}")
    return size, pos


def _read_binary(buf: Any, pos: int, end: int, depth: int, budget: Budget
                 ) -> tuple[Any, int]:
    size, pos = _read_sized(buf, pos, end, "binary")
    budget.left -= decoded.COST_BYTES + size
    if budget.left < 0:
        _over_budget(budget)
    return bytes(buf[pos:pos + size]), pos + size


def _read_string(buf: Any, pos: int, end: int, depth: int, budget: Budget
                 ) -> tuple[Any, int]:
    size, pos = _read_sized(buf, pos, end, "string")
    try:
        value = str(buf[pos:pos + size], "utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError(f"string at offset {pos} is not valid UTF-8 ({exc.reason} "
                          f"at byte {exc.start})") from None
    budget.left -= string_cost(value)
    if budget.left < 0:
        _over_budget(budget)
    return value, pos + size


def _reader_for(ttype: int, spec: Any) -> Reader:
    if ttype == TType.STRING:
        return _read_string
    if ttype == _BINARY:
        return _read_binary
    if ttype == TType.BOOL:
        return _read_bool
    if ttype == TType.BYTE:
        return _read_byte
    if ttype in (TType.I16, TType.I32, TType.I64):
        return _int_reader({TType.I16: 16, TType.I32: 32, TType.I64: 64}[ttype])
    if ttype == TType.DOUBLE:
        return _read_double
    if ttype == TType.STRUCT:
        return _struct_reader(spec)
    if ttype in (TType.LIST, TType.SET):
        return _list_reader(ttype, spec)
    if ttype == TType.MAP:
        return _map_reader(spec)
    raise TypeError(f"unsupported thrift type {ttype} in spec")


def _element_matches(got: int, ttype: int) -> bool:
    if ttype == TType.BOOL:
        # In containers Java and C++ write 1/2; some old writers 0/1 (read as Java does).
        return got in (C_TRUE, C_FALSE)
    return got == TO_COMPACT[ttype]


def _list_reader(ttype: int, spec: Any) -> Reader:
    etype, espec = _split_spec(spec)
    elem: Reader | None = None
    is_set = ttype == TType.SET
    what = "set" if is_set else "list"
    base = decoded.COST_SET if is_set else decoded.COST_LIST
    per_item = (decoded.COST_SET_SLOT if is_set else decoded.COST_LIST_SLOT) \
        + SCALAR_COST.get(etype, 0)
    min_size = MIN_SIZE.get(TO_COMPACT[etype], 1)

    def read(buf: Any, pos: int, end: int, depth: int, budget: Budget) -> tuple[Any, int]:
        nonlocal elem
        if elem is None:
            elem = _reader_for(etype, espec)
        _check_depth(depth)
        got, count, pos = _read_list_head(buf, pos, end, what)
        if count and not _element_matches(got, etype):
            raise DecodeError(f"{what} holds compact type {got}, expected "
                              f"{TO_COMPACT[etype]}")
        _check_count(count, min_size, pos, end, what)
        budget.left -= base + count * per_item
        if budget.left < 0:
            _over_budget(budget)
        out: list[Any] = []
        append = out.append
        for _ in range(count):
            value, pos = elem(buf, pos, end, depth + 1, budget)
            append(value)
        if not is_set:
            return out, pos
        try:
            return set(out), pos
        except TypeError:
            raise DecodeError("set elements of this type are not hashable in Python") \
                from None
    return read


def _map_reader(spec: Any) -> Reader:
    ktype, kspec = _split_spec(spec[0])
    vtype, vspec = _split_spec(spec[1])
    readers: list[Reader] = []
    per_item = decoded.COST_MAP_ENTRY + SCALAR_COST.get(ktype, 0) + SCALAR_COST.get(vtype, 0)
    min_size = MIN_SIZE.get(TO_COMPACT[ktype], 1) + MIN_SIZE.get(TO_COMPACT[vtype], 1)

    def read(buf: Any, pos: int, end: int, depth: int, budget: Budget) -> tuple[Any, int]:
        if not readers:
            readers.extend((_reader_for(ktype, kspec), _reader_for(vtype, vspec)))
        kread, vread = readers
        _check_depth(depth)
        got_k, got_v, count, pos = _read_map_head(buf, pos, end)
        if count and not (_element_matches(got_k, ktype) and _element_matches(got_v, vtype)):
            raise DecodeError(f"map holds compact types ({got_k}, {got_v}), expected "
                              f"({TO_COMPACT[ktype]}, {TO_COMPACT[vtype]})")
        _check_count(count, min_size, pos, end, "map")
        budget.left -= decoded.COST_MAP + count * per_item
        if budget.left < 0:
            _over_budget(budget)
        out = {}
        for _ in range(count):
            key, pos = kread(buf, pos, end, depth + 1, budget)
            value, pos = vread(buf, pos, end, depth + 1, budget)
            try:
                out[key] = value
            except TypeError:
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
    #: (field id, compact type) -> (attribute, reader, scalar cost); a bool field is
    #: listed under both of its types, with no reader (its value is in the type).
    fields: dict[tuple[int, int], tuple[str, Reader | None, int]] = {}
    pending: list[tuple[int, int, str, Any]] = []
    # attr-defined: thrift_spec is set on the classes thriftpy2 generates.
    for fid, entry in cls.thrift_spec.items():  # type: ignore[attr-defined]
        pending.append((fid, entry[0], entry[1], entry[2] if len(entry) > 3 else None))
    cost = struct_cost(cls)

    def read(buf: Any, pos: int, end: int, depth: int, budget: Budget) -> tuple[Any, int]:
        if pending:
            for fid, ttype, name, spec in pending:
                scalar = SCALAR_COST.get(ttype, 0)
                if ttype == TType.BOOL:
                    fields[(fid, C_TRUE)] = fields[(fid, C_FALSE)] = (name, None, scalar)
                else:
                    fields[(fid, TO_COMPACT[ttype])] = (name, _reader_for(ttype, spec), scalar)
            pending.clear()
        _check_depth(depth)
        budget.left -= cost
        if budget.left < 0:
            _over_budget(budget)
        obj = cls()
        get = fields.get
        last = 0
        while True:
            if pos >= end:
                raise DecodeError(f"{cls.__name__}: struct not terminated before the "
                                  f"end of the frame")
            head = buf[pos]
            pos += 1
            if head == C_STOP:
                return obj, pos
            ctype = head & 0x0F
            delta = head >> 4
            if delta:
                fid = last + delta
            else:
                fid, pos = _read_zigzag(buf, pos, end, 16)
            last = fid
            hit = get((fid, ctype))
            if hit is None:          # unknown id or unexpected type: skipped
                pos = skip(buf, pos, end, ctype, depth + 1)
                continue
            name, reader, scalar = hit
            if reader is None:
                value: Any = ctype == C_TRUE
            else:
                try:
                    value, pos = reader(buf, pos, end, depth + 1, budget)
                except DecodeBudgetError:
                    raise
                except DecodeError as exc:
                    raise DecodeError(f"{cls.__name__}.{name}: {exc}") from None
            budget.left -= scalar
            if budget.left < 0:
                _over_budget(budget)
            setattr(obj, name, value)

    _STRUCT_READERS[cls] = read
    return read


_READERS: dict[type, StructReader] = {}


def struct_reader(cls: type) -> StructReader:
    """``read(buf, pos, end, budget) -> (obj, end_pos)`` for thriftpy2 class ``cls``
    (as :func:`.binary.struct_reader`, for compact bytes)."""
    try:
        return _READERS[cls]
    except KeyError:
        pass
    read = _struct_reader(cls)
    plan = binary.c_plan(cls) if _compact is not None else None
    if plan is None:
        def read_compact(buf: Any, pos: int, end: int, budget: int) -> tuple[Any, int]:
            return read(buf, pos, end, 0, Budget(budget))
        _READERS[cls] = read_compact
        return read_compact
    decode = _compact.decode_struct

    def read_fast(buf: Any, pos: int, end: int, budget: int) -> tuple[Any, int]:
        # C walks the bytes; on any problem it returns None and the Python reader,
        # which has the error messages, decodes again and raises.
        result = decode(plan, buf, pos, end, budget)
        return read(buf, pos, end, 0, Budget(budget)) if result is None else result
    _READERS[cls] = read_fast
    return read_fast


def decode_struct(cls: type, buf: bytes | bytearray, pos: int = 0, end: int | None = None,
                  budget: int = decoded.UNLIMITED) -> tuple[Any, int]:
    """Decode one struct of class ``cls`` from compact bytes; (object, offset after it).

    Raises:
        DecodeBudgetError: over ``budget`` bytes of decoded objects.
        DecodeError: truncated or malformed bytes, nesting past MAX_DEPTH.
    """
    return struct_reader(cls)(buf, pos, len(buf) if end is None else end, budget)


# --------------------------------------------------------------------------- encoding


class _Writer:
    """Appends compact values to one bytearray; raises ValueError/TypeError on values
    that do not match the spec (the dispatcher maps those to INTERNAL_ERROR)."""

    __slots__ = ("out",)

    def __init__(self) -> None:
        self.out = bytearray()

    def varint(self, n: int) -> None:
        out = self.out
        while n > 0x7F:
            out.append((n & 0x7F) | 0x80)
            n >>= 7
        out.append(n)

    def sized(self, data: bytes) -> None:
        if len(data) > 0x7FFFFFFF:
            raise ValueError(f"a string of {len(data)} bytes does not fit an i32 length")
        self.varint(len(data))
        self.out += data

    def value(self, ttype: int, spec: Any, value: Any, depth: int) -> None:
        if ttype == TType.BOOL:
            self.out.append(C_TRUE if value else C_FALSE)
        elif ttype == TType.BYTE:
            if not isinstance(value, int):
                raise TypeError(f"expected an int, got {type(value).__name__}")
            if not -128 <= value <= 127:
                raise ValueError(f"{value} does not fit a byte")
            self.out.append(value & 0xFF)
        elif ttype in (TType.I16, TType.I32, TType.I64):
            if not isinstance(value, int):     # as thriftpy2's compact writer refuses
                raise TypeError(f"expected an int, got {type(value).__name__}")
            self.varint(zigzag_encode(value, _BITS[ttype]))
        elif ttype == TType.DOUBLE:
            self.out += _DOUBLE.pack(value)
        elif ttype == TType.STRING or ttype == _BINARY:
            if isinstance(value, str):
                self.sized(value.encode("utf-8"))
            elif isinstance(value, (bytes, bytearray, memoryview)):
                self.sized(bytes(value))
            else:
                raise TypeError(f"expected str or bytes, got {type(value).__name__}")
        elif ttype == TType.STRUCT:
            self.struct(value, depth + 1)
        elif ttype in (TType.LIST, TType.SET):
            etype, espec = _split_spec(spec)
            if depth >= MAX_DEPTH:
                raise ValueError(f"nesting deeper than {MAX_DEPTH} levels")
            items = list(value)
            ctype = TO_COMPACT[etype]
            if len(items) < 15:
                self.out.append(len(items) << 4 | ctype)
            else:
                self.out.append(0xF0 | ctype)
                self.varint(len(items))
            for item in items:
                self.value(etype, espec, item, depth + 1)
        elif ttype == TType.MAP:
            (ktype, kspec), (vtype, vspec) = _split_spec(spec[0]), _split_spec(spec[1])
            if depth >= MAX_DEPTH:
                raise ValueError(f"nesting deeper than {MAX_DEPTH} levels")
            self.varint(len(value))
            if value:
                self.out.append(TO_COMPACT[ktype] << 4 | TO_COMPACT[vtype])
            for key, item in value.items():
                self.value(ktype, kspec, key, depth + 1)
                self.value(vtype, vspec, item, depth + 1)
        else:
            raise TypeError(f"unsupported thrift type {ttype}")

    def struct(self, obj: Any, depth: int = 0) -> None:
        if depth >= MAX_DEPTH:
            raise ValueError(f"nesting deeper than {MAX_DEPTH} levels")
        out = self.out
        last = 0
        for fid, entry in obj.thrift_spec.items():
            value = getattr(obj, entry[1], None)
            if value is None:
                continue
            ttype = entry[0]
            spec = entry[2] if len(entry) > 3 else None
            ctype = (C_TRUE if value else C_FALSE) if ttype == TType.BOOL else TO_COMPACT[ttype]
            delta = fid - last
            if 0 < delta <= 15:
                out.append(delta << 4 | ctype)
            else:
                out.append(ctype)
                self.varint(zigzag_encode(fid, 16))
            last = fid
            if ttype != TType.BOOL:
                self.value(ttype, spec, value, depth)
        out.append(C_STOP)


def encode_message(name: str, mtype: int, seqid: int, payload: Any) -> bytes:
    """A compact message: header, then ``payload`` (a thriftpy2 struct or
    ``TApplicationException``) as a struct. No frame length.

    Raises ValueError or TypeError when ``payload`` holds a value its spec refuses.
    """
    if _compact is not None:
        plan = binary._encode_plan(payload.__class__)
        if plan is not None:
            data: bytes | None = _compact.encode_message(name, mtype, seqid, payload, plan)
            if data is not None:
                return data
    return _encode_python(name, mtype, seqid, payload)


def _encode_python(name: str, mtype: int, seqid: int, payload: Any) -> bytes:
    """encode_message in Python: the reference the C encoder matches, and the one that
    raises on values that do not match the spec."""
    writer = _Writer()
    out = writer.out
    out.append(PROTOCOL_ID)
    out.append(VERSION | (mtype << TYPE_SHIFT) & 0xE0)
    if not -(1 << 31) <= seqid < (1 << 31):
        raise ValueError(f"sequence id {seqid} does not fit an i32")
    writer.varint(seqid & 0xFFFFFFFF)
    writer.sized(name.encode("utf-8"))
    writer.struct(payload)
    return bytes(out)


def encode_application_exception(name: str, seqid: int, message: str, code: int) -> bytes:
    """An EXCEPTION message carrying ``TApplicationException(code, message)``."""
    return encode_message(name, EXCEPTION, seqid,
                          TApplicationException(type=int(code), message=message))


assert _compact is None or _compact.MAX_DEPTH == MAX_DEPTH
