"""A REPLY in two parts, for the shared results of rpc/shared.py: the message header,
which is each caller's own (its method name and seqid), and the result struct after
it, which is the same for every caller and so encoded once. Put back to back they are
byte for byte what :func:`binary.encode_message` and :func:`compact.encode_message`
write for the whole reply."""

from __future__ import annotations

import struct
from typing import Any

from thriftpy2.thrift import TType

from . import binary, compact

_I32 = struct.Struct(">i")
_STRICT_HEAD = struct.Struct(">Ii")

#: What each protocol's encode_message puts before a REPLY's struct for the name ""
#: and the seqid 0 (strict binary: version and type, name length, seqid; compact:
#: protocol id, version and type, seqid and name length as varints).
_EMPTY_HEADS = {
    "binary": _STRICT_HEAD.pack(binary.VERSION_1 | binary.REPLY, 0) + _I32.pack(0),
    "compact": bytes((compact.PROTOCOL_ID,
                      compact.VERSION | (binary.REPLY << compact.TYPE_SHIFT), 0, 0)),
}
_ENCODERS = {"binary": binary.encode_message, "compact": compact.encode_message}


def result_body(protocol: str, result: Any) -> bytes:
    """``result`` (a method's result struct) as a REPLY in ``protocol`` carries it
    after the message header. Raises what the protocol's encoder raises for a value
    the IDL refuses."""
    message = _ENCODERS[protocol]("", binary.REPLY, 0, result)
    empty = _EMPTY_HEADS[protocol]
    assert message.startswith(empty)
    return message[len(empty):]


def head(protocol: str, name: str, seqid: int) -> bytes:
    """The message header of a REPLY to ``name``/``seqid`` in ``protocol``."""
    if not -(1 << 31) <= seqid < (1 << 31):
        raise ValueError(f"sequence id {seqid} does not fit an i32")
    name_bytes = name.encode("utf-8")
    if protocol == "compact":
        return b"".join((_EMPTY_HEADS["compact"][:2], compact.varint(seqid & 0xFFFFFFFF),
                         compact.varint(len(name_bytes)), name_bytes))
    return b"".join((_STRICT_HEAD.pack(binary.VERSION_1 | binary.REPLY, len(name_bytes)),
                     name_bytes, _I32.pack(seqid)))


def struct_body(protocol: str, value: Any) -> bytes:
    """A struct's own encoding in ``protocol`` (its fields and stop), as it sits in a
    list or a field."""
    return result_body(protocol, value)


def binary_around_list(value: Any, field: str, count: int) -> tuple[bytes, bytes]:
    """What :func:`result_body` writes in binary, for a result whose ``success`` is
    ``value``, before and after the items of ``value``'s list-of-structs ``field``
    (``count`` of them): the encodings of the items (:func:`struct_body`) go between,
    so a caller that kept them from an earlier value encodes only the fields around
    the list again. Byte for byte :func:`result_body`'s output: binary encodes a struct
    the same wherever it sits."""
    spec = type(value).thrift_spec
    field_id = next(fid for fid, entry in spec.items() if entry[1] == field)
    before = _with_fields(value, [entry[1] for fid, entry in spec.items() if fid < field_id])
    after = _with_fields(value, [entry[1] for fid, entry in spec.items() if fid > field_id])
    return (b"".join((_STRUCT_FIELD_0,
                      struct_body("binary", before)[:-1],       # without its stop
                      _LIST_OF_STRUCTS.pack(TType.LIST, field_id, TType.STRUCT, count))),
            struct_body("binary", after)[:-1] + b"\x00\x00")  # the value's stop, the result's


#: Field 0 (``success``) holding a struct; a list field of structs and its length.
_STRUCT_FIELD_0 = struct.pack(">bh", TType.STRUCT, 0)
_LIST_OF_STRUCTS = struct.Struct(">bhbi")


def _with_fields(value: Any, names: list[str]) -> Any:
    """A copy of the struct ``value`` with only ``names`` set (the writer skips None)."""
    part = object.__new__(type(value))
    for entry in type(value).thrift_spec.values():
        setattr(part, entry[1], getattr(value, entry[1], None) if entry[1] in names else None)
    return part
