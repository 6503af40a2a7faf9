"""Bytes tier: nimbus_thrift.rpc.codec.binary's message headers and its bounds-checked
struct decoder on well-formed input (every type, defaults, skipped fields, thriftpy2's
encoders as the reference). No sockets; every input is a byte string written out here.
Hostile input is test_binary_hostile.py's; the C twin's, test_binary_c_decode.py's."""

from __future__ import annotations

import math
from types import ModuleType

import pytest
from thriftpy2.protocol.binary import TBinaryProtocol
from thriftpy2.transport.memory import TMemoryBuffer

from nimbus_thrift.rpc.codec.binary import MAX_DEPTH, MessageHeader, decode_struct, read_message_header
from nimbus_thrift.rpc.errors import BadVersionError, DecodeError
from support.binary_cases import (ALL_HEX, all_expected, encode_cy, h, load_cases,
                                  round_trip_cases)


@pytest.fixture(scope="module")
def t(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    return load_cases(tmp_path_factory.mktemp("idl"))


def encode_py(obj: object) -> bytes:
    buf = TMemoryBuffer()
    TBinaryProtocol(buf).write_struct(obj)
    return buf.getvalue()


def thriftpy2_decode(cls: type, data: bytes) -> object:
    obj = cls()
    TBinaryProtocol(TMemoryBuffer(data)).read_struct(obj)
    return obj


# --------------------------------------------------------------------------- headers


@pytest.mark.parametrize("wire, expected", [
    pytest.param("80010001 00000004 6563686f 0000002a",          # CALL "echo" seqid 42
                 MessageHeader("echo", 1, 42, 16), id="strict-call"),
    pytest.param("80010004 00000006 6e6f74696679 ffffffff",      # ONEWAY "notify" seqid -1
                 MessageHeader("notify", 4, -1, 18), id="strict-oneway-negative-seqid"),
    pytest.param("80010002 00000000 7fffffff",                   # REPLY "" seqid 2**31-1
                 MessageHeader("", 2, 2**31 - 1, 12), id="strict-empty-name"),
    pytest.param("80010001 00000004 6563686f 0000002a 0b00",     # args follow: end is 16
                 MessageHeader("echo", 1, 42, 16), id="strict-followed-by-args"),
    pytest.param("80010001 00000002 c3a9 00000001",              # name "é" (UTF-8)
                 MessageHeader("\u00e9", 1, 1, 14), id="strict-utf8-name"),
    pytest.param("00000004 6563686f 01 0000002a",                # old: len, name, type, seqid
                 MessageHeader("echo", 1, 42, 13), id="old-call"),
    pytest.param("00000000 04 00000009",                         # old, empty name, ONEWAY
                 MessageHeader("", 4, 9, 9), id="old-empty-name"),
])
def test_read_message_header(wire: str, expected: MessageHeader) -> None:
    data = h(wire)
    assert read_message_header(data) == expected
    # Same answer from the buffer types the server hands over.
    assert read_message_header(bytearray(data)) == expected
    assert read_message_header(memoryview(data)) == expected


def test_strict_read_accepts_strict_header() -> None:
    assert read_message_header(h("80010001 00000004 6563686f 00000001"),
                               strict_read=True) == MessageHeader("echo", 1, 1, 16)


def test_strict_read_refuses_old_header() -> None:
    with pytest.raises(BadVersionError) as info:
        read_message_header(h("00000004 6563686f 01 0000002a"), strict_read=True)
    assert info.value.word == 4


@pytest.mark.parametrize("wire, word", [
    ("80020001 00000004 6563686f 00000001", 0x80020001),   # version 2
    ("80000001 00000004 6563686f 00000001", 0x80000001),   # version 0 with the high bit
    ("ffffffff 00000004 6563686f 00000001", 0xFFFFFFFF),
    ("82210004 6563686f 1802 6869 00", 0x82210004),          # TCompactProtocol
    ("deadbeef", 0xDEADBEEF),
])
def test_negative_word_that_is_not_version_1(wire: str, word: int) -> None:
    with pytest.raises(BadVersionError) as info:
        read_message_header(h(wire))
    assert info.value.word & 0xFFFFFFFF == word
    assert f"0x{word:08x}" in str(info.value)


@pytest.mark.parametrize("wire", [
    "",
    "80",
    "800100",
    "80010001",                          # no name length
    "80010001 000000",                   # name length cut
    "80010001 00000004",                 # no name
    "80010001 00000004 656368",          # name cut
    "80010001 00000004 6563686f",        # no seqid
    "80010001 00000004 6563686f 000000",  # seqid cut
    "80010001 ffffffff 00000001",        # negative name length
    "80010001 7fffffff 00000001",        # name length far past the end
    "000000",                            # old form, shorter than a word
])
def test_truncated_header_is_decode_error(wire: str) -> None:
    with pytest.raises(DecodeError):
        read_message_header(h(wire))


@pytest.mark.parametrize("wire", [
    "00000004 6563686f 01 000000",      # seqid cut
    "00000004 6563686f 01",             # no seqid
    "00000004 6563686f",                # no type
    "00000064 6563686f 01 00000001",    # name length past the end
    "7fffffff",
])
def test_old_header_that_does_not_fit_is_bad_version(wire: str) -> None:
    # A non-negative first word that does not fit as an old-style header is as likely
    # to be garbage as a truncated header; read_message_header documents this as
    # "neither header form" (BadVersionError). Either way the connection closes.
    with pytest.raises(BadVersionError):
        read_message_header(h(wire))


@pytest.mark.parametrize("wire", [
    "80010001 00000002 c328 00000001",   # strict, invalid UTF-8 name
    "00000002 ff fe 01 00000001",        # old, invalid UTF-8 name
])
def test_header_name_not_utf8(wire: str) -> None:
    with pytest.raises(DecodeError, match="UTF-8"):
        read_message_header(h(wire))


# --------------------------------------------------------------------------- decoding

def test_decode_every_type_from_hex(t: ModuleType) -> None:
    data = h(ALL_HEX)
    obj, end = decode_struct(t.All, data)
    expected = all_expected(t)
    assert obj == expected
    assert end == len(data)
    # Field by field too, so a failure names the field and the types are exact.
    assert obj.flag is True
    assert type(obj.blob) is bytes and type(obj.text) is str
    assert isinstance(obj.tags, set) and isinstance(obj.ints, list)
    assert isinstance(obj.inner_set, set) and isinstance(obj.longs, set)
    # The fixture itself is what thriftpy2 reads (thriftpy2 gives sets as lists).
    theirs = thriftpy2_decode(t.All, data)
    for name in ("tags", "inner_set", "longs"):
        setattr(theirs, name, set(getattr(theirs, name)))
    assert theirs == expected


def test_decode_returns_offset_after_stop_and_honours_pos_and_end(t: ModuleType) -> None:
    body = h("08 0001 00000005  08 0002 00000006  00")
    data = b"HEADER" + body + b"trailing"
    obj, end = decode_struct(t.Pair, data, 6, 6 + len(body))
    assert obj == t.Pair(a=5, b=6)
    assert end == 6 + len(body)
    # `end` bounds the read even though the buffer goes on.
    with pytest.raises(DecodeError):
        decode_struct(t.Pair, data, 6, 6 + len(body) - 1)


def test_missing_fields_keep_defaults(t: ModuleType) -> None:
    obj, _ = decode_struct(t.All, b"\x00")
    assert obj == t.All()
    assert obj.flag is None and obj.ints is None


def test_unknown_field_ids_are_skipped(t: ModuleType) -> None:
    data = h("""
        02 0063 01                           # 99: bool
        03 0064 ff                           # 100: byte
        06 0065 0102                         # 101: i16
        08 0066 01020304                     # 102: i32
        0a 0067 0102030405060708             # 103: i64
        04 0068 3ff0000000000000             # 104: double
        0b 0069 00000003 ffffff              # 105: string (not UTF-8: never decoded)
        0c 006a 08 0001 00000001 0f 0002 0b 00000001 00000000 00   # 106: struct
        0d 006b 08 0b 00000001 00000001 00000000                  # 107: map
        0e 006c 06 00000002 0001 0002                             # 108: set
        0f 006d 0f 00000001 08 00000001 00000009                  # 109: list<list>
        0f 006e 08 00000000                                       # 110: empty list
        08 0001 0000002a                     # 1: a = 42 (known, after all of them)
        08 8000 00000001                     # -32768: negative id, unknown
        08 0002 0000002b                     # 2: b = 43
        00
    """)
    obj, end = decode_struct(t.Pair, data)
    assert obj == t.Pair(a=42, b=43)
    assert end == len(data)


def test_known_id_with_wrong_wire_type_is_skipped(t: ModuleType) -> None:
    data = h("""
        0b 0001 00000002 6869      # 1: a is i32 in the IDL, sent as a string
        0a 0002 0000000000000007   # 2: b is i32, sent as i64
        08 0002 00000005           # 2 again, the right type
        00
    """)
    obj, _ = decode_struct(t.Pair, data)
    assert obj.a is None
    assert obj.b == 5


def test_empty_containers_with_any_element_type(t: ModuleType) -> None:
    # Element types of an empty container are not checked (some writers send 0 there).
    data = h("0f 0001 00 00000000  00")
    assert decode_struct(t.Ints, data)[0] == t.Ints(li=[])
    data = h("0d 0001 00 00 00000000  00")
    assert decode_struct(t.IntMap, data)[0] == t.IntMap(m={})


def test_set_decodes_to_set_and_duplicates_collapse(t: ModuleType) -> None:
    obj, _ = decode_struct(t.IntSet, h("0e 0001 08 00000003 00000001 00000002 00000001 00"))
    assert obj.si == {1, 2}


def test_binary_field_takes_any_bytes_string_field_does_not(t: ModuleType) -> None:
    payload = "00000002 c328"  # "\xc3(" is not UTF-8
    assert decode_struct(t.Bin, h(f"0b 0001 {payload} 00"))[0].b == b"\xc3("
    with pytest.raises(DecodeError, match="UTF-8"):
        decode_struct(t.Str, h(f"0b 0001 {payload} 00"))


def test_recursive_struct_up_to_the_depth_limit(t: ModuleType) -> None:
    # MAX_DEPTH levels of Node: the outermost at depth 0, the innermost at MAX_DEPTH-1.
    levels = MAX_DEPTH
    data = b"\x0c\x00\x01" * (levels - 1) + b"\x00" * levels
    obj, end = decode_struct(t.Node, data)
    assert end == len(data)
    depth = 1
    while obj.child is not None:
        obj = obj.child
        depth += 1
    assert depth == levels


@pytest.mark.parametrize("encode", [encode_py, encode_cy], ids=["pure-python", "cybin"])
def test_round_trip_against_thriftpy2_encoders(t: ModuleType, encode) -> None:
    for obj in round_trip_cases(t):
        data = encode(obj)
        decoded, end = decode_struct(type(obj), data)
        assert decoded == obj
        assert end == len(data)
        # And back: what we decoded encodes to the same value again. (Not compared as
        # bytes: a set's iteration order, hence its encoding, depends on hash seeds.)
        again = encode(decoded)
        assert len(again) == len(data)
        assert decode_struct(type(obj), again)[0] == obj


def test_nan_round_trips(t: ModuleType) -> None:
    decoded, _ = decode_struct(t.All, encode_cy(t.All(real=math.nan)))
    assert math.isnan(decoded.real)
