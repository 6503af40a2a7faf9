"""Bytes tier: THeader frames (rpc/header.py): parsing what Apache Thrift's Python
THeaderTransport writes, info headers, ZLIB inflated within its limit, unsupported
transforms and protocols, and malformed headers."""

from __future__ import annotations

import struct
import zlib

import pytest
from thrift.transport.THeaderTransport import (THeaderClientType, THeaderTransformID,
                                               THeaderTransport)
from thrift.transport.TTransport import TMemoryBuffer

from nimbus_thrift.rpc.codec import header
from nimbus_thrift.rpc.errors import AppErrorCode, DecodeBudgetError, DecodeError


def apache_frame(payload: bytes, protocol_id: int = 0, seqid: int = 0, flags: int = 0,
                 headers: dict[bytes, bytes] | None = None, zlib_: bool = False) -> bytes:
    """What Apache Thrift's Python THeaderTransport writes for ``payload``."""
    out = TMemoryBuffer()
    trans = THeaderTransport(out, [THeaderClientType.HEADERS], protocol_id)
    trans.sequence_id = seqid
    trans.flags = flags
    for key, value in (headers or {}).items():
        trans.set_header(key, value)
    if zlib_:
        trans.add_transform(THeaderTransformID.ZLIB)
    trans.write(payload)
    trans.flush()
    return out.getvalue()


def body(frame: bytes) -> bytes:
    assert struct.unpack(">I", frame[:4])[0] == len(frame) - 4
    return frame[4:]


def test_parses_what_apache_python_writes() -> None:
    frame = apache_frame(b"\x82\x21payload", protocol_id=2, seqid=-9, flags=1,
                         headers={b"user": b"alice", b"trace": b"\x00\xff"})
    assert header.is_header_frame(body(frame))
    parsed, _ = header.parse(body(frame), 1 << 20)
    assert (parsed.flags, parsed.seqid, parsed.protocol_id, parsed.transforms) == (1, -9, 2, ())
    assert parsed.info == {b"user": b"alice", b"trace": b"\x00\xff"}
    assert parsed.payload == b"\x82\x21payload"


def test_zlib_payload_is_inflated() -> None:
    payload = b"\x80\x01\x00\x01" + b"abc" * 1000
    parsed, _ = header.parse(body(apache_frame(payload, zlib_=True)), 1 << 20)
    assert parsed.transforms == (header.TRANSFORM_ZLIB,) and parsed.payload == payload


def test_zlib_bomb_is_stopped_at_the_limit() -> None:
    bomb = zlib.compress(b"\0" * (64 << 20))               # 64 MiB of zeros, ~64 KB
    frame = header.encode(b"", 0, 0, 0)
    frame = body(header.encode(b"x", 0, 0, 0, (header.TRANSFORM_ZLIB,)))
    frame = frame[:-len(zlib.compress(b"x"))] + bomb
    with pytest.raises(DecodeError, match="more than 1,048,576 bytes"):
        header.parse(frame, 1 << 20)


def test_inflate_refuses_junk_and_truncation() -> None:
    with pytest.raises(DecodeError, match="does not inflate"):
        header.inflate(b"not zlib at all", 100)
    with pytest.raises(DecodeError, match="truncated"):
        header.inflate(zlib.compress(b"hello" * 100)[:-6], 10_000)
    assert header.inflate(zlib.compress(b"hello"), 5) == b"hello"


@pytest.mark.parametrize("transform, name", [(2, "HMAC"), (3, "SNAPPY"), (9, "unknown")])
def test_unsupported_transforms_are_refused_with_invalid_transform(transform: int,
                                                                    name: str) -> None:
    frame = body(header.encode(b"\x80\x01\x00\x01", 0, 5, 7, ()))
    # Rewrite the transform list: protocol 0, one transform.
    fixed = frame[:10]
    head = bytes([0, 1, transform, 0])
    frame = fixed[:8] + struct.pack(">H", 1) + head + b"\x80\x01\x00\x01"
    with pytest.raises(header.UnsupportedHeader) as excinfo:
        header.parse(frame, 1 << 20)
    assert excinfo.value.code == AppErrorCode.INVALID_TRANSFORM
    assert name in str(excinfo.value)
    assert (excinfo.value.echo.flags, excinfo.value.echo.seqid) == (5, 7)


def test_unknown_protocol_id_is_refused_with_invalid_protocol() -> None:
    frame = body(header.encode(b"x", 1, 0, 0))     # protocol 1 (JSON): not served
    with pytest.raises(header.UnsupportedHeader) as excinfo:
        header.parse(frame, 1 << 20)
    assert excinfo.value.code == AppErrorCode.INVALID_PROTOCOL


@pytest.mark.parametrize("data, words", [
    (b"\x0f\xff\x00", "shorter than"),
    (b"\x0f\xff\x00\x00\x00\x00\x00\x01\x00\x05", "does not fit"),
    (b"\x0f\xff\x00\x00\x00\x00\x00\x01\x00\x02" + b"\x80" * 5 + b"\x00" * 3, "varint longer"),
    (b"\x0f\xff\x00\x00\x00\x00\x00\x01\x00\x01\x00\x09\x00\x00", "transforms"),
    (b"\x0f\xff\x00\x00\x00\x00\x00\x01\x00\x02\x00\x00\x01\x7f\x00\x00\x00\x00", "key/value"),
    (b"\x0f\xff\x00\x00\x00\x00\x00\x01\x00\x02\x00\x00\x01\x01\x09\x00\x00\x00", "key of 9"),
    (b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00", "magic"),
])
def test_malformed_headers(data: bytes, words: str) -> None:
    with pytest.raises(header.HeaderError, match=words):
        header.parse(data, 1 << 20)


def test_info_headers_are_charged_against_the_budget() -> None:
    many = {str(i).encode(): b"" for i in range(5000)}
    frame = body(apache_frame(b"\x80\x01\x00\x01", headers=many))
    parsed, left = header.parse(frame, 1 << 20, 10_000_000)
    assert len(parsed.info) == 5000 and left < 10_000_000 - 5000 * 138
    with pytest.raises(DecodeBudgetError):
        header.parse(frame, 1 << 20, 100_000)


def test_encode_round_trips_through_apache_python() -> None:
    frame = header.encode(b"\x82\x21reply", 2, 3, -4, (header.TRANSFORM_ZLIB,),
                          {b"k": b"v"})
    trans = THeaderTransport(TMemoryBuffer(frame), [THeaderClientType.HEADERS])
    trans.readFrame(0)
    assert trans.read(7) == b"\x82\x21reply"
    assert (trans.flags, trans.sequence_id, trans.protocol_id) == (3, -4, 2)
    assert trans.get_headers() == {b"k": b"v"}
