"""Bytes tier: TCompactProtocol (rpc/compact.py): round trips against thriftpy2's and
Apache Thrift's compact codecs, varint and zigzag edges, hostile input (truncated
varints, huge lengths and counts, nesting), and the decoded-size budget, charged as the
binary decoder charges it."""

from __future__ import annotations

from types import ModuleType

import pytest
from thriftpy2.protocol.compact import TCompactProtocol
from thriftpy2.thrift import TApplicationException
from thriftpy2.transport.memory import TMemoryBuffer

from nimbus_thrift.rpc.codec import binary, compact
from nimbus_thrift.rpc.codec.decoded import UNLIMITED
from nimbus_thrift.rpc.errors import BadVersionError, DecodeBudgetError, DecodeError
from nimbus_thrift.rpc.codec.pydecode import MAX_DEPTH
from support.binary_cases import (all_expected, canonical, encode_cy, load_cases,
                                  round_trip_cases, spent)


@pytest.fixture(scope="module")
def t(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    return load_cases(tmp_path_factory.mktemp("idl"))


def thriftpy2_compact(obj: object) -> bytes:
    buf = TMemoryBuffer()
    TCompactProtocol(buf).write_struct(obj)
    return buf.getvalue()


def ours(obj: object) -> bytes:
    writer = compact._Writer()
    writer.struct(obj)
    return bytes(writer.out)


# --------------------------------------------------------------------------- varints


@pytest.mark.parametrize("value, encoded", [
    (0, "00"), (1, "01"), (127, "7f"), (128, "8001"), (300, "ac02"),
    (2**32 - 1, "ffffffff0f"), (2**64 - 1, "ffffffffffffffffff01"),
])
def test_varint_encodings(value: int, encoded: str) -> None:
    assert compact.varint(value).hex() == encoded
    assert compact.read_varint(bytes.fromhex(encoded), 0, len(encoded) // 2) == \
        (value, len(encoded) // 2)


@pytest.mark.parametrize("value, bits, zz", [
    (0, 32, 0), (-1, 32, 1), (1, 32, 2), (-2, 32, 3), (2**31 - 1, 32, 2**32 - 2),
    (-2**31, 32, 2**32 - 1), (-2**63, 64, 2**64 - 1), (2**63 - 1, 64, 2**64 - 2),
    (-32768, 16, 65535),
])
def test_zigzag_edges(value: int, bits: int, zz: int) -> None:
    assert compact.zigzag_encode(value, bits) == zz
    assert compact.zigzag_decode(zz) == value


@pytest.mark.parametrize("value, bits", [(2**31, 32), (-2**31 - 1, 32), (2**63, 64),
                                         (32768, 16)])
def test_zigzag_refuses_out_of_range(value: int, bits: int) -> None:
    with pytest.raises(ValueError, match="does not fit"):
        compact.zigzag_encode(value, bits)


@pytest.mark.parametrize("data, words", [
    (b"", "truncated"), (b"\x80", "truncated"), (b"\xff\xff\xff", "truncated"),
    (b"\xff" * 10 + b"\x01", "longer than 10"),
])
def test_varint_refusals(data: bytes, words: str) -> None:
    with pytest.raises(DecodeError, match=words):
        compact.read_varint(data, 0, len(data))


def test_i32_varint_too_large_is_refused(t: ModuleType) -> None:
    # field 4 (i32), delta 4, type I32: a 5-byte varint over 32 bits
    with pytest.raises(DecodeError, match="too large for an i32"):
        compact.decode_struct(t.All, bytes.fromhex("45 ffffffff1f 00"))
    with pytest.raises(DecodeError, match="longer than 5 bytes"):
        compact.decode_struct(t.All, bytes.fromhex("45 ffffffffff01 00"))


# --------------------------------------------------------------------------- round trips


def test_round_trips_agree_with_thriftpy2_byte_for_byte(t: ModuleType) -> None:
    for obj in round_trip_cases(t):
        data = ours(obj)
        assert data == thriftpy2_compact(obj), type(obj).__name__
        value, end = compact.decode_struct(type(obj), data)
        # Compared as canonical text: a set decoded in wire order may iterate in
        # another order than the one it was encoded from (NaN still equals itself).
        assert canonical(value) == canonical(obj) and end == len(data)


def test_known_encoding_of_a_small_struct(t: ModuleType) -> None:
    # Inner(x=-1, s="hi"): field 1 delta 1 I32 (0x15), zigzag(-1)=1; field 2 BINARY (0x18).
    assert ours(t.Inner(x=-1, s="hi")).hex() == "1501" + "18026869" + "00"
    # A field id jump of more than 15: type byte then the zigzag id (Pair b=2 -> id 2 is
    # delta 1; Node.child id 1 then v id 2). A bool field carries its value in the type.
    assert ours(t.All(flag=True)).hex() == "1100"
    assert ours(t.All(flag=False)).hex() == "1200"
    assert ours(t.All(raw={})).hex() == "0b2e0000"   # id 23 (delta 23 > 15): 0x0b, zz 46


def test_decoder_reads_apache_thrift_encodings(t: ModuleType) -> None:
    from thrift.protocol.TCompactProtocol import TCompactProtocol as ApacheCompact
    from thrift.transport.TTransport import TMemoryBuffer as ApacheBuffer
    buf = ApacheBuffer()
    proto = ApacheCompact(buf)
    # Inner by hand through the Apache writer: field 1 i32, field 2 string.
    proto.writeStructBegin("Inner")
    proto.writeFieldBegin("x", 8, 1)
    proto.writeI32(-123456)
    proto.writeFieldEnd()
    proto.writeFieldBegin("s", 11, 2)
    proto.writeString("\u00e9t\u00e9")
    proto.writeFieldEnd()
    proto.writeFieldStop()
    proto.writeStructEnd()
    value, _ = compact.decode_struct(t.Inner, buf.getvalue())
    assert (value.x, value.s) == (-123456, "\u00e9t\u00e9")


def test_message_header_round_trip_and_negative_seqid(t: ModuleType) -> None:
    data = compact.encode_message("echo", compact.REPLY, -5, t.Inner(x=1))
    assert data[:2] == b"\x82\x41"           # version 1, type REPLY (2 << 5)
    header = compact.read_message_header(data)
    assert (header.name, header.type, header.seqid) == ("echo", compact.REPLY, -5)
    value, end = compact.decode_struct(t.Inner, data, header.end)
    assert value.x == 1 and end == len(data)


def test_application_exception_reads_back_with_thriftpy2() -> None:
    data = compact.encode_application_exception("m", 9, "no such method", 1)
    buf = TMemoryBuffer(data)
    proto = TCompactProtocol(buf)
    assert proto.read_message_begin() == ("m", compact.EXCEPTION, 9)
    exc = TApplicationException()
    proto.read_struct(exc)
    assert (exc.type, exc.message) == (1, "no such method")


@pytest.mark.parametrize("data, error", [
    (b"\x80\x01", BadVersionError), (b"\x82\x22", BadVersionError), (b"\x82", DecodeError),
    (b"\x82\x21\x01", DecodeError), (b"\x82\x21\x01\x10ab", DecodeError),
    (b"\x82\x21\x01\x02\xff\xfe", DecodeError),
    (b"\x82\x21\xff\xff\xff\xff\x7f\x00", DecodeError),     # seqid over 32 bits
])
def test_message_header_refusals(data: bytes, error: type) -> None:
    with pytest.raises(error):
        compact.read_message_header(data)


# --------------------------------------------------------------------------- hostile


@pytest.mark.parametrize("hexdata, words", [
    ("78 ffffffff07 00", "needs 2147483647 bytes"),        # string of 2**31-1 bytes
    ("78 05 6869", "needs 5 bytes"),                       # string past the end
    ("79 f5 ffffffff07", "declares 2147483647 elements"),   # list<i32> of 2**31-1
    ("1b ffffffff07 88", "declares"),                      # map of 2**31-1 entries
    ("45 80", "truncated"),                                # truncated varint
    ("46 01", "unexpected"),                               # unknown compact type 6 ok?
    ("15 02", "not terminated"),                           # no STOP
    ("1d", "unknown compact type 13"),                     # unknown type, skipped field
])
def test_hostile_bytes_are_refused_with_a_decode_error(t: ModuleType, hexdata: str,
                                                        words: str) -> None:
    data = bytes.fromhex(hexdata.replace(" ", ""))
    with pytest.raises(DecodeError) as excinfo:
        compact.decode_struct(t.All, data)
    if words != "unexpected":
        assert words in str(excinfo.value)


def test_nesting_is_capped(t: ModuleType) -> None:
    # Node.child (field 1, struct) nested past MAX_DEPTH.
    data = b"\x1c" * (MAX_DEPTH + 5) + b"\x00" * (MAX_DEPTH + 6)
    with pytest.raises(DecodeError, match="nesting deeper"):
        compact.decode_struct(t.Node, data)
    ok = b"\x1c" * 10 + b"\x00" * 11
    value, end = compact.decode_struct(t.Node, ok)
    assert end == len(ok)


def test_skipping_unknown_fields_is_bounded_too(t: ModuleType) -> None:
    # Pair has ids 1 and 2: id 3 (a list of 2**31-1 lists) is skipped, and refused.
    data = bytes.fromhex("39 f9 ffffffff07")
    with pytest.raises(DecodeError, match="declares"):
        compact.decode_struct(t.Pair, data)
    deep = bytes.fromhex("3c") + b"\x1c" * (MAX_DEPTH + 2)
    with pytest.raises(DecodeError, match="nesting deeper"):
        compact.decode_struct(t.Pair, deep)


def test_unknown_fields_are_skipped(t: ModuleType) -> None:
    # Pair(a=1) then unknown field 7: a list of two strings, a bool, a double; then b=2.
    data = bytes.fromhex("15 02 69 28 01 61 01 62 11 17 0000000000000000 05 04 04 00"
                         .replace(" ", ""))
    value, end = compact.decode_struct(t.Pair, data)
    assert (value.a, value.b, end) == (1, 2, len(data))


# --------------------------------------------------------------------------- budget


def test_decoded_size_budget_charged_as_the_binary_decoder_charges(t: ModuleType) -> None:
    for obj in round_trip_cases(t):
        cls = type(obj)
        cost = spent(cls, encode_cy(obj))
        data = ours(obj)
        compact.decode_struct(cls, data, budget=cost)             # exactly enough
        with pytest.raises(DecodeBudgetError):
            compact.decode_struct(cls, data, budget=cost - 1)     # one byte short


def test_a_frame_of_empty_structs_is_refused_by_the_budget(t: ModuleType) -> None:
    # list<Inner> of 100,000 empty structs: 100 KB of compact bytes, ~10 MB decoded.
    data = bytes.fromhex("e9") + b"\xfc" + compact.varint(100_000) + b"\x00" * 100_000 + b"\x00"
    with pytest.raises(DecodeBudgetError):
        compact.decode_struct(t.All, data, budget=1024 * 1024)
    value, _ = compact.decode_struct(t.All, data, budget=UNLIMITED)
    assert len(value.inners) == 100_000


def test_all_expected_round_trips(t: ModuleType) -> None:
    obj = all_expected(t)
    value, _ = compact.decode_struct(t.All, ours(obj))
    assert value == obj
    # And binary's reader sees the same value from binary's bytes (same objects).
    assert binary.decode_struct(t.All, encode_cy(obj), budget=UNLIMITED)[0] == value


# --------------------------------------------------------------------------- C fast path


def test_c_and_python_decode_alike(t: ModuleType) -> None:
    from support.compact_fuzz import c_outcome, python_outcome
    cases = [ours(obj) for obj in round_trip_cases(t)]
    for data in cases:
        for budget in (UNLIMITED, 1000, 0):
            for cls in (t.All, t.Node, t.Pair):
                assert c_outcome(cls, data, 0, budget) == python_outcome(cls, data, 0, budget)
    # A value C must not read differently: every outcome equal on the hostile bytes too.
    for hexdata in ("78ffffffff0700", "7805686", "79f5ffffffff07", "4580", "1d", "1502",
                    "45ffffffff1f00", "e9fc" + "00" * 20):
        data = bytes.fromhex(hexdata if len(hexdata) % 2 == 0 else hexdata + "9")
        assert c_outcome(t.All, data, 0, UNLIMITED) == python_outcome(t.All, data, 0, UNLIMITED)


def test_c_encoder_writes_the_python_bytes(t: ModuleType) -> None:
    for obj in round_trip_cases(t):
        c = compact.encode_message("call", compact.REPLY, -7, obj)
        py = compact._encode_python("call", compact.REPLY, -7, obj)
        assert c == py
    assert compact._compact is not None
    assert compact._compact.encode_message("m", 2, 1, t.Inner(x=1),
                                           binary.c_plan(t.Inner)) is not None


@pytest.mark.parametrize("value", [1.5, "7", 2**31, None.__class__])
def test_values_c_does_not_take_go_to_python_which_raises(t: ModuleType, value: object) -> None:
    obj = t.Inner(x=value)
    plan = binary.c_plan(t.Inner)
    assert compact._compact is not None
    assert compact._compact.encode_message("m", 2, 1, obj, plan) is None
    with pytest.raises((ValueError, TypeError)):
        compact.encode_message("m", 2, 1, obj)
