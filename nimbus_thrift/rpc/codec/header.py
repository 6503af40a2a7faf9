"""THeader frames, without sockets (doc/specs/HeaderFormat.md in Apache Thrift)::

    [i32 length][u16 0x0FFF magic][u16 flags][i32 sequence number]
    [u16 header size / 4][header: varint protocol id, varint transform count,
     varint transform ids..., info blocks..., zero padding][payload]

An info block is a varint id then its data; id 1 (key/value) is a varint count then
that many pairs of varint-length strings. Unknown info ids end the info blocks (the
spec orders them oldest first, so nothing after one is known either); the header size
says where the payload starts. Transforms must be understood: ZLIB (1) is, HMAC (2) and
SNAPPY (3) are not, and a frame carrying one is refused with INVALID_TRANSFORM.

Every count and length is checked against the header's bytes before it is used; the
key/value headers are charged against the request's decoded-size budget (an empty
pair costs two bytes on the wire and ~140 once decoded); a ZLIB payload is inflated
with ``max_length`` set to what the caller allows, so it never grows past it.

A reply echoes the request's flags, sequence number, protocol id and transforms (as
Apache Thrift's C++ and Python header transports do); info headers are per message and
not echoed.
"""

from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

from . import decoded
from ..errors import AppErrorCode, DecodeBudgetError, DecodeError, RequestError

MAGIC = 0x0FFF
#: Offset of the header size field's end in a frame's body (after the length).
FIXED_SIZE = 10
PROTOCOL_BINARY = 0
PROTOCOL_COMPACT = 2
PROTOCOLS = {PROTOCOL_BINARY: "binary", PROTOCOL_COMPACT: "compact"}
TRANSFORM_ZLIB = 1
TRANSFORM_NAMES = {1: "ZLIB", 2: "HMAC", 3: "SNAPPY"}
INFO_KEYVALUE = 1

_FIXED = struct.Struct(">HHiH")


class HeaderError(DecodeError):
    """A THeader frame whose header is malformed: the connection closes."""


class UnsupportedHeader(RequestError):
    """A well-formed THeader frame asking for something this server does not do (a
    transform, a protocol id): answered with a TApplicationException of ``code``, in a
    frame echoing ``echo``."""

    def __init__(self, message: str, echo: "HeaderFrame", code: AppErrorCode) -> None:
        super().__init__(message, code)
        self.echo = echo


class HeaderFrame(NamedTuple):
    flags: int
    seqid: int
    protocol_id: int
    transforms: tuple[int, ...]
    #: Info key/value headers, as sent (bytes, unaltered, per the spec).
    info: dict[bytes, bytes]
    #: The message bytes, inflated if the frame said ZLIB.
    payload: bytes


def _varint(buf: bytes, pos: int, end: int, what: str) -> tuple[int, int]:
    result = shift = 0
    start = pos
    while True:
        if pos >= end:
            raise HeaderError(f"THeader {what} at offset {start} runs past the header")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if pos - start >= 5:
            raise HeaderError(f"THeader {what} at offset {start} is a varint longer than "
                              f"5 bytes")


def is_header_frame(body: bytes | bytearray | memoryview) -> bool:
    """Whether a frame's body (after its length) starts with the THeader magic."""
    return len(body) >= 2 and body[0] == MAGIC >> 8 and body[1] == MAGIC & 0xFF


def parse(body: bytes, inflate_limit: int, budget: int = decoded.UNLIMITED
          ) -> tuple[HeaderFrame, int]:
    """Parse one THeader frame's body (everything after its 4-byte length).

    ``inflate_limit``: the most bytes a ZLIB payload may inflate to. ``budget``: the
    decoded-size budget the info headers are charged against. Returns the frame and
    what is left of ``budget``.

    Raises:
        HeaderError: a malformed header (the connection cannot go on).
        UnsupportedHeader: a transform or protocol this server does not do
            (INVALID_TRANSFORM / INVALID_PROTOCOL; the frame boundary is intact).
        DecodeBudgetError: the info headers would take more than ``budget``.
        DecodeError: the payload inflates past ``inflate_limit``, or is not zlib.
    """
    size = len(body)
    if size < FIXED_SIZE:
        raise HeaderError(f"THeader frame of {size} bytes is shorter than its "
                          f"{FIXED_SIZE}-byte fixed header")
    magic, flags, seqid, words = _FIXED.unpack_from(body, 0)
    if magic != MAGIC:
        raise HeaderError(f"not a THeader frame (magic 0x{magic:04x})")
    end = FIXED_SIZE + 4 * words
    if end > size:
        raise HeaderError(f"THeader header of {4 * words} bytes does not fit the "
                          f"{size}-byte frame")
    protocol_id, pos = _varint(body, FIXED_SIZE, end, "protocol id")
    count, pos = _varint(body, pos, end, "transform count")
    if count > end - pos:
        raise HeaderError(f"THeader declares {count} transforms in {end - pos} bytes")
    transforms = []
    for _ in range(count):
        transform, pos = _varint(body, pos, end, "transform id")
        transforms.append(transform)
    info: dict[bytes, bytes] = {}
    left = budget
    while pos < end:
        kind, pos = _varint(body, pos, end, "info id")
        if kind != INFO_KEYVALUE:
            break                      # padding (0) or an id we do not know: payload next
        pairs, pos = _varint(body, pos, end, "header count")
        if 2 * pairs > end - pos:
            raise HeaderError(f"THeader declares {pairs} key/value headers in "
                              f"{end - pos} bytes")
        for _ in range(pairs):
            klen, pos = _varint(body, pos, end, "header key length")
            if pos + klen > end:
                raise HeaderError(f"THeader key of {klen} bytes runs past the header")
            key = body[pos:pos + klen]
            pos += klen
            vlen, pos = _varint(body, pos, end, "header value length")
            if pos + vlen > end:
                raise HeaderError(f"THeader value of {vlen} bytes runs past the header")
            left -= 2 * decoded.COST_BYTES + decoded.COST_MAP_ENTRY + klen + vlen
            if left < 0:
                raise DecodeBudgetError(budget, "THeader info headers")
            info[bytes(key)] = bytes(body[pos:pos + vlen])
            pos += vlen
    # What a refusal echoes: the flags and sequence number, in binary when the
    # protocol id is not one we speak, with no transform we cannot apply.
    echo = HeaderFrame(flags, seqid, protocol_id if protocol_id in PROTOCOLS else
                       PROTOCOL_BINARY, (), info, b"")
    if protocol_id not in PROTOCOLS:
        raise UnsupportedHeader(f"THeader protocol id {protocol_id} is not supported "
                                f"(0 binary and 2 compact are)", echo,
                                AppErrorCode.INVALID_PROTOCOL)
    payload = bytes(body[end:])
    for transform in transforms:
        if transform != TRANSFORM_ZLIB:
            name = TRANSFORM_NAMES.get(transform, "unknown")
            raise UnsupportedHeader(f"THeader transform {transform} ({name}) is not "
                                    f"supported; this server reads ZLIB (1) only", echo,
                                    AppErrorCode.INVALID_TRANSFORM)
    for _ in transforms:
        payload = inflate(payload, inflate_limit)
    return HeaderFrame(flags, seqid, protocol_id, tuple(transforms), info, payload), left


def inflate(data: bytes, limit: int) -> bytes:
    """Inflate a zlib stream to at most ``limit`` bytes: the output is capped while it
    is made (``max_length``), so a small bomb never grows past the limit.

    Raises DecodeError when the stream is not zlib, is truncated, or is larger."""
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(data, limit + 1)
    except zlib.error as exc:
        raise DecodeError(f"THeader ZLIB payload does not inflate: {exc}") from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise DecodeError(f"THeader ZLIB payload inflates to more than {limit:,} bytes "
                          f"(the limit for this frame: the max frame size, and the "
                          f"frame's decoded-size budget)")
    if not inflater.eof:
        raise DecodeError("THeader ZLIB payload is truncated")
    return out


def encode(payload: bytes, protocol_id: int, flags: int, seqid: int,
           transforms: tuple[int, ...] = (), info: dict[bytes, bytes] | None = None
           ) -> bytes:
    """One THeader frame, its 4-byte length first, around ``payload`` (compressed here
    when ``transforms`` holds ZLIB)."""
    head = bytearray()

    def varint(n: int) -> None:
        while n > 0x7F:
            head.append((n & 0x7F) | 0x80)
            n >>= 7
        head.append(n)

    varint(protocol_id)
    varint(len(transforms))
    for transform in transforms:
        varint(transform)
        if transform == TRANSFORM_ZLIB:
            payload = zlib.compress(payload)
    if info:
        varint(INFO_KEYVALUE)
        varint(len(info))
        for key, value in info.items():
            varint(len(key))
            head += key
            varint(len(value))
            head += value
    head += b"\x00" * (-len(head) % 4)
    fixed = _FIXED.pack(MAGIC, flags & 0xFFFF, seqid, len(head) // 4)
    return struct.pack(">I", FIXED_SIZE + len(head) + len(payload)) + fixed + bytes(head) \
        + payload
