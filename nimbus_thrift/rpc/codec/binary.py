"""TBinaryProtocol, without sockets: message headers, a bounds-checked struct decoder,
and reply encoding.

Message header (inside a frame)::

    strict:   [i32 0x8001_0000 | type][i32 len][name bytes][i32 seqid]
    old:      [i32 len >= 0][name bytes][i8 type][i32 seqid]

Why our own decoder: thriftpy2's Cython reader trusts lengths read off the wire (a
30-byte frame declaring a 2 GiB string makes it malloc 2 GiB and copy uninitialised
memory; a list declaring 2**31 elements loops for minutes holding the GIL). Every
length here is checked against the bytes left in the frame before anything is made,
nesting is capped, and every object made is charged against the frame's decoded-size
budget (:mod:`.decoded`: a frame of tiny structs cannot become 150 times its size).
Structs are decoded in C (_wire.c) and, when C says no, again by the Python decoder
(:mod:`.pydecode`), which says why. Replies are built from trusted handler values: they
are encoded in C as thriftpy2's Cython writer would, byte for byte, and by that writer
itself whenever the C code is unsure (it then also raises the errors).
"""

from __future__ import annotations

import struct
import sys
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

from thriftpy2.thrift import TApplicationException, TType

from . import decoded
from .decoded import Budget
from ..errors import BadVersionError, DecodeError
from ..options import DEFAULT_DECODED_SIZE_FACTOR
# The Python decoder; MAX_DEPTH, Reader, skip and struct_cost are this module's too.
from .pydecode import MAX_DEPTH as MAX_DEPTH
from .pydecode import Reader as Reader
from .pydecode import skip as skip
from .pydecode import struct_cost as struct_cost
from .pydecode import _BINARY, _I32, _split_spec, _struct_reader, _wire_type

_Protocol: Any
_Buffer: Any
try:  # The Cython writer is ~5x faster; the pure-Python one keeps PyPy working.
    # From the compiled modules themselves (Any to mypy: no stubs); the packages
    # re-export their classes implicitly, which strict mypy does not follow.
    from thriftpy2.protocol.cybin import cybin as _cybin
    from thriftpy2.transport.memory import cymemory as _cymemory
    _Protocol = _cybin.TCyBinaryProtocol
    _Buffer = _cymemory.TCyMemoryBuffer
except ImportError:  # pragma: no cover - exercised only without the C extension
    from thriftpy2.protocol import binary as _pybinary
    from thriftpy2.transport import memory as _memory
    _Protocol, _Buffer = _pybinary.TBinaryProtocol, _memory.TMemoryBuffer

try:  # The C fast paths (_wire.c decodes, _wireencode.c encodes); this module keeps every error.
    from . import _wire
except ImportError:  # pragma: no cover - exercised only without the C extension
    _wire = None  # type: ignore[assignment]  # None: the C module is not built

CALL, REPLY, EXCEPTION, ONEWAY = 1, 2, 3, 4

VERSION_MASK = 0xFFFF0000
VERSION_1 = 0x80010000

_U32 = struct.Struct(">I")
_FIELD = struct.Struct(">bh")
_HEADER_STRICT = struct.Struct(">Ii")


class MessageHeader(NamedTuple):
    name: str
    type: int
    seqid: int
    #: Offset of the first byte after the header (where the args struct starts).
    end: int


def read_message_header(buf: bytes | bytearray | memoryview, strict_read: bool = False
                        ) -> MessageHeader:
    """Read a message header at the start of ``buf`` (one frame's payload).

    Raises:
        BadVersionError: neither header form (or old form while ``strict_read``).
        DecodeError: the header is truncated or its name is not UTF-8.
    """
    if _wire is not None:
        fast = _wire.read_message_header(buf, strict_read)
        if fast is not None:
            return _new_header(MessageHeader, fast)
    return _read_message_header(buf, strict_read)


_new_header = tuple.__new__


def _read_message_header(buf: bytes | bytearray | memoryview, strict_read: bool
                         ) -> MessageHeader:
    size = len(buf)
    if size < 4:
        raise DecodeError(f"message header truncated: frame has {size} bytes")
    word = _I32.unpack_from(buf, 0)[0]
    if word < 0:
        if word & VERSION_MASK != VERSION_1:  # `&` on a negative int keeps 32 bits here
            raise BadVersionError(word, "not a TBinaryProtocol version word")
        mtype = word & 0xFF
        if size < 8:
            raise DecodeError("message header truncated in the name length")
        name_len = _I32.unpack_from(buf, 4)[0]
        start = 8
        after_name = start + name_len
        if name_len < 0 or after_name + 4 > size:
            raise DecodeError(f"message name length {name_len} does not fit the "
                              f"{size}-byte frame")
        seqid = _I32.unpack_from(buf, after_name)[0]
        end = after_name + 4
    else:
        if strict_read:
            raise BadVersionError(word, "old non-strict message header while the "
                                        "server reads strictly")
        name_len = word
        start = 4
        after_name = start + name_len
        if after_name + 5 > size:
            raise BadVersionError(word, f"length {name_len} of an old-style header does "
                                        f"not fit the {size}-byte frame")
        mtype = buf[after_name]
        seqid = _I32.unpack_from(buf, after_name + 1)[0]
        end = after_name + 5
    try:
        name = str(buf[start:after_name], "utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError(f"message name is not UTF-8: {exc}") from None
    return MessageHeader(name, mtype, seqid, end)


# --------------------------------------------------------------------------- decoding

#: ``read(buf, pos, end, budget) -> (obj, end_pos)``; budget in bytes (see decoded.py).
StructReader = Callable[[Any, int, int, int], tuple[Any, int]]

_FAST_READERS: dict[type, StructReader] = {}


def struct_reader(cls: type) -> StructReader:
    """``read(buf, pos, end, budget) -> (obj, end_pos)`` for thriftpy2 class ``cls``,
    made once per class; ``budget`` is the decoded-size budget in bytes; same errors as
    :func:`decode_struct`."""
    try:
        return _FAST_READERS[cls]
    except KeyError:
        reader = _FAST_READERS[cls] = _make_struct_reader(cls)
        return reader


def _make_struct_reader(cls: type) -> StructReader:
    read = _struct_reader(cls)
    plan = c_plan(cls)
    if plan is None:
        return lambda buf, pos, end, budget: read(buf, pos, end, 0, Budget(budget))
    decode = _wire.decode_struct

    def read_fast(buf: Any, pos: int, end: int, budget: int) -> tuple[Any, int]:
        # C walks the frame; on any problem it returns None and the Python reader,
        # which has the error messages, decodes again and raises.
        result = decode(plan, buf, pos, end, budget)
        return read(buf, pos, end, 0, Budget(budget)) if result is None else result
    return read_fast


#: The C codecs' kind codes (_wirecommon.h), in its enum's order.
_C_KINDS = {TType.BOOL: 0, TType.BYTE: 1, TType.I16: 2, TType.I32: 3, TType.I64: 4,
            TType.DOUBLE: 5, TType.STRING: 6, _BINARY: 7, TType.STRUCT: 8,
            TType.LIST: 9, TType.SET: 10, TType.MAP: 11}


def c_plan(cls: type, _plans: dict[type, list[Any]] | None = None) -> list[Any] | None:
    """The plan the C codecs decode and encode ``cls`` with (its layout is described
    in _wirecommon.h), or None without the C module or for a spec it does not know (then Python
    decodes and thriftpy2 encodes)."""
    if _wire is None:
        return None
    plans: dict[type, list[Any]] = {} if _plans is None else _plans
    if cls in plans:
        return plans[cls]                        # recursive structs share one plan
    fields: dict[int, tuple[str, int, Any]] = {}
    order: list[tuple[str, int, Any, int, int]] = []
    plan: list[Any] = [cls, fields]
    plans[cls] = plan
    try:
        # thrift_spec's order is the order thriftpy2's writer puts fields on the wire.
        # attr-defined: thrift_spec is set on the classes thriftpy2 generates.
        for fid, entry in cls.thrift_spec.items():  # type: ignore[attr-defined]
            ttype, name = entry[0], entry[1]
            kind, sub = _c_element(ttype, entry[2] if len(entry) > 3 else None, plans)
            wire = _wire_type(ttype)
            fields[fid * 256 + wire] = (name, kind, sub)
            # Interned: C's attribute lookups then find the name by identity.
            order.append((sys.intern(name), kind, sub, fid, wire))
    except (KeyError, TypeError, AttributeError):
        return None
    plan.append(tuple(order))
    plan.append(struct_cost(cls))
    return plan


def _c_element(ttype: int, spec: Any, plans: dict[type, list[Any]]) -> tuple[int, Any]:
    kind = _C_KINDS[ttype]
    if ttype == TType.STRUCT:
        sub = c_plan(spec, plans)
        if sub is None:
            raise TypeError(f"no plan for {spec!r}")
        return kind, sub
    if ttype in (TType.LIST, TType.SET):
        etype, espec = _split_spec(spec)
        return kind, (*_c_element(etype, espec, plans), _wire_type(etype))
    if ttype == TType.MAP:
        (ktype, kspec), (vtype, vspec) = _split_spec(spec[0]), _split_spec(spec[1])
        return kind, ((*_c_element(ktype, kspec, plans), _wire_type(ktype)),
                      (*_c_element(vtype, vspec, plans), _wire_type(vtype)))
    return kind, None


def decode_struct(cls: type, buf: bytes | bytearray, pos: int = 0,
                  end: int | None = None, budget: int | None = None) -> tuple[Any, int]:
    """Decode one struct of thriftpy2 class ``cls`` from ``buf[pos:end]``, its objects
    charged against ``budget`` bytes (default: the decoded-size limit of a frame of
    ``len(buf)`` bytes with the server's default factor; :data:`decoded.UNLIMITED`
    for none).

    Returns the object and the offset after its STOP byte.

    Raises:
        DecodeBudgetError: the objects would take more than ``budget``.
        DecodeError: truncated data, a length or count that does not fit the frame,
            nesting deeper than :data:`MAX_DEPTH`, invalid UTF-8 in a ``string``.
    """
    if budget is None:
        budget = decoded.decoded_size_limit(len(buf), DEFAULT_DECODED_SIZE_FACTOR)
    return struct_reader(cls)(buf, pos, len(buf) if end is None else end, budget)


# --------------------------------------------------------------------------- encoding

FRAME_HEADER = _U32


def frame_header(size: int) -> bytes:
    """The 4-byte big-endian length prefix of a frame of ``size`` bytes."""
    return _U32.pack(size)


_ENCODE_PLANS: dict[type, list[Any] | None] = {}
#: Bound once: these functions run once per reply.
_c_encode_message: Any = getattr(_wire, "encode_message", None)


def _encode_plan(cls: type) -> list[Any] | None:
    """The C plan payloads of class ``cls`` are encoded with, made once per class (None:
    thriftpy2 encodes them)."""
    try:
        return _ENCODE_PLANS[cls]
    except KeyError:
        pass
    try:
        plan = c_plan(cls)
    except Exception:  # noqa: BLE001 - any payload reaches here; thriftpy2 says what is wrong
        plan = None
    _ENCODE_PLANS[cls] = plan
    return plan


def encode_framed_message(name: str, mtype: int, seqid: int, payload: Any) -> bytes:
    """What :func:`encode_message` returns, behind its 4-byte frame length: one whole
    frame, ready to send.

    Raises what :func:`encode_message` raises.
    """
    # C writes thriftpy2's bytes or, on any value it does not take as thriftpy2 would,
    # returns None: then thriftpy2 writes them, or raises the precise error. (There is
    # no plan without the C module.)
    plan = _encode_plan(payload.__class__)
    if plan is not None:
        framed: bytes | None = _c_encode_message(name, mtype, seqid, payload, plan)
        if framed is not None:
            return framed
    body = _encode_thriftpy2(name, mtype, seqid, payload)
    return _U32.pack(len(body)) + body


def encode_message(name: str, mtype: int, seqid: int, payload: Any) -> bytes:
    """A strict message header followed by ``payload`` (a thriftpy2 struct or
    ``TApplicationException``), as the bytes of one frame's payload (no length prefix),
    exactly as thriftpy2's writer makes them.

    Raises whatever the writer raises when ``payload`` holds a value that does not
    match its spec (the dispatcher maps that to INTERNAL_ERROR).
    """
    plan = _encode_plan(payload.__class__)
    if plan is not None:
        body: bytes | None = _c_encode_message(name, mtype, seqid, payload, plan, False)
        if body is not None:
            return body
    return _encode_thriftpy2(name, mtype, seqid, payload)


_writers = threading.local()


def _encode_thriftpy2(name: str, mtype: int, seqid: int, payload: Any) -> bytes:
    """encode_message with thriftpy2's writer: the reference the C encoder matches, and
    the one that raises on values that do not match the spec."""
    try:
        buf, proto = _writers.pair
    except AttributeError:  # first use on this thread: one writer per thread, reused
        buf = _Buffer()     # (half the cost of building one per reply)
        proto = _Protocol(buf, strict_write=True)
        _writers.pair = (buf, proto)
    try:
        proto.write_message_begin(name, mtype, seqid)
        proto.write_struct(payload)
        value: bytes = buf.getvalue()
        return value
    finally:
        buf.clean()


#: From this size on, a string/binary result is sent as its own buffer after a small
#: header instead of being copied into the encoder's buffer and out again (four copies
#: of a 1 MiB reply become one: str to UTF-8).
LARGE_VALUE = 64 * 1024
STRING_TYPES = (TType.STRING, _BINARY)
_SUCCESS_STRING_FIELD = _FIELD.pack(TType.STRING, 0)


def encode_large_reply(name: str, seqid: int, value: str | bytes | bytearray) -> list[bytes]:
    """A REPLY whose result struct holds only ``success`` = ``value`` (a string or
    binary), as ``[frame length and header, value, stop]``: one frame in three buffers
    to send back to back."""
    data = value.encode("utf-8") if isinstance(value, str) else value
    name_bytes = name.encode("utf-8")
    head = b"".join((_HEADER_STRICT.pack(VERSION_1 | REPLY, len(name_bytes)), name_bytes,
                     _I32.pack(seqid), _SUCCESS_STRING_FIELD, _I32.pack(len(data))))
    return [_U32.pack(len(head) + len(data) + 1) + head,
            bytes(data) if isinstance(data, bytearray) else data, b"\x00"]


def encode_application_exception(name: str, seqid: int, message: str, code: int) -> bytes:
    """An EXCEPTION message carrying ``TApplicationException(code, message)``."""
    return encode_message(name, EXCEPTION, seqid,
                          TApplicationException(type=int(code), message=message))


def encode_framed_application_exception(name: str, seqid: int, message: str,
                                        code: int) -> bytes:
    """What :func:`encode_application_exception` returns, behind its frame length."""
    return encode_framed_message(name, EXCEPTION, seqid,
                                 TApplicationException(type=int(code), message=message))


assert _wire is None or _wire.MAX_DEPTH == MAX_DEPTH
assert _wire is None or _wire.COSTS == decoded.COSTS
