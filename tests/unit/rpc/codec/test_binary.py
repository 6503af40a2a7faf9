"""Bytes tier: nimbus_thrift.rpc.codec.binary (message headers, the bounds-checked struct
decoder, reply encoding). No sockets; every input is a byte string written out here."""

from __future__ import annotations

import math
import random
import time
import tracemalloc
from types import ModuleType
from typing import Any

import pytest
from thriftpy2.protocol.binary import TBinaryProtocol
from thriftpy2.protocol.cybin import TCyBinaryProtocol
from thriftpy2.thrift import TApplicationException
from thriftpy2.transport.memory import TCyMemoryBuffer, TMemoryBuffer

from nimbus_thrift.rpc.codec import binary
from nimbus_thrift.rpc.codec.binary import MAX_DEPTH, MessageHeader, decode_struct, read_message_header
from nimbus_thrift.rpc.errors import AppErrorCode, BadVersionError, DecodeError
from support.binary_cases import (ALL_HEX, all_expected, c_outcome, encode_cy, h, load_cases,
                                  python_outcome, round_trip_cases)


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


# --------------------------------------------------------------------------- hostile


def _decode_fails_fast_and_small(cls: type, data: bytes, match: str | None = None) -> None:
    """decode_struct must raise DecodeError, allocate next to nothing and be quick."""
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with pytest.raises(DecodeError, match=match):
            decode_struct(cls, data)
        elapsed = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # A bound far below any declared size: MAX_DEPTH nested objects and their error
    # messages fit in it, a 2 GiB buffer does not.
    assert peak < 1024 * 1024, f"decoder allocated {peak} bytes for a {len(data)}-byte frame"
    assert elapsed < 0.5


def test_string_declaring_2g_in_a_20_byte_frame(t: ModuleType) -> None:
    data = h("0b 0001 7fffffff 6869 00")
    data += b"\x00" * (20 - len(data))
    assert len(data) == 20
    _decode_fails_fast_and_small(t.Str, data)


def test_binary_declaring_2g(t: ModuleType) -> None:
    _decode_fails_fast_and_small(t.Bin, h("0b 0001 7fffffff 6869 00"))


def test_list_declaring_2g_elements(t: ModuleType) -> None:
    _decode_fails_fast_and_small(t.Ints, h("0f 0001 08 7fffffff 00000001 00"),
                                 match="2147483647")


def test_list_count_just_past_the_bytes_left(t: ModuleType) -> None:
    # 3 i32 fit in 12 bytes; a count of 4 must be refused before the loop.
    _decode_fails_fast_and_small(t.Ints, h("0f 0001 08 00000004 00000001 00000002 00000003 00"))


def test_set_declaring_2g_elements(t: ModuleType) -> None:
    _decode_fails_fast_and_small(t.IntSet, h("0e 0001 08 7fffffff 00"))


def test_map_declaring_huge_count(t: ModuleType) -> None:
    _decode_fails_fast_and_small(t.IntMap, h("0d 0001 08 08 7fffffff 00000001 00000002 00"))


def test_negative_counts(t: ModuleType) -> None:
    _decode_fails_fast_and_small(t.Ints, h("0f 0001 08 ffffffff 00"), match="negative")
    _decode_fails_fast_and_small(t.IntMap, h("0d 0001 08 08 80000000 00"), match="negative")


@pytest.mark.parametrize("wire", [
    "0f 0063 02 7fffffff 00",            # unknown field: list of 2**31-1 bools
    "0d 0063 0b 0b 7fffffff 00",         # unknown field: map of 2**31-1 string pairs
    "0e 0063 0c 7fffffff 00",            # unknown field: set of 2**31-1 structs
    "0b 0063 7fffffff 00",               # unknown field: string of 2 GiB
    "0b 0063 ffffffff 00",               # unknown field: negative string length
    "0f 0063 08 ffffffff 00",            # unknown field: negative list count
])
def test_hostile_skipped_values(t: ModuleType, wire: str) -> None:
    _decode_fails_fast_and_small(t.Pair, h(wire))


def test_negative_string_length(t: ModuleType) -> None:
    _decode_fails_fast_and_small(t.Str, h("0b 0001 ffffffff 6869 00"))
    _decode_fails_fast_and_small(t.Bin, h("0b 0001 80000000 6869 00"))


def test_nesting_deeper_than_max_depth_struct(t: ModuleType) -> None:
    levels = MAX_DEPTH + 1
    data = b"\x0c\x00\x01" * (levels - 1) + b"\x00" * levels
    _decode_fails_fast_and_small(t.Node, data, match="nesting")


def test_very_deep_nesting_is_decode_error_not_recursion_error(t: ModuleType) -> None:
    levels = 50_000  # far past Python's recursion limit, if the cap were missing
    data = b"\x0c\x00\x01" * (levels - 1) + b"\x00" * levels
    with pytest.raises(DecodeError, match="nesting"):
        decode_struct(t.Node, data)


def test_nesting_deeper_than_max_depth_in_skipped_lists(t: ModuleType) -> None:
    # Field 99 is unknown to Pair: list<list<list<...>>> 100 deep, skipped by skip().
    levels = 100
    data = h("0f 0063") + b"\x0f\x00\x00\x00\x01" * (levels - 1) + h("08 00000000") + b"\x00"
    _decode_fails_fast_and_small(t.Pair, data, match="nesting")


def test_nesting_deeper_than_max_depth_in_skipped_structs(t: ModuleType) -> None:
    levels = 100
    data = h("0c 0063") + b"\x0c\x00\x01" * (levels - 1) + b"\x00" * levels + b"\x00"
    _decode_fails_fast_and_small(t.Pair, data, match="nesting")


def test_invalid_utf8_in_string_field(t: ModuleType) -> None:
    for bad in ("ff", "c0af", "eda080", "f4908080", "e282"):  # stray, overlong, surrogate,
        n = len(bytes.fromhex(bad))                         # past U+10FFFF, truncated
        with pytest.raises(DecodeError, match="UTF-8"):
            decode_struct(t.Str, h(f"0b 0001 {n:08x} {bad} 00"))


def test_struct_without_stop(t: ModuleType) -> None:
    _decode_fails_fast_and_small(t.Pair, h("08 0001 00000001 08 0002 00000002"),
                                 match="not terminated")
    _decode_fails_fast_and_small(t.Pair, b"")


@pytest.mark.parametrize("ftype", [1, 5, 7, 9, 16, 17, 18, 0x7F, 0x80, 0xFF])
def test_unknown_wire_type(t: ModuleType, ftype: int) -> None:
    _decode_fails_fast_and_small(t.Pair, bytes([ftype]) + h("0001 00000001 00"))


def test_container_element_type_mismatch(t: ModuleType) -> None:
    with pytest.raises(DecodeError, match="list holds type 11"):
        decode_struct(t.Ints, h("0f 0001 0b 00000001 00000000 00"))
    with pytest.raises(DecodeError, match="map holds types"):
        decode_struct(t.IntMap, h("0d 0001 08 0b 00000001 00000001 00000000 00"))


def test_unhashable_map_key_is_decode_error(t: ModuleType) -> None:
    # map<list<i32>, i32>: a Python list cannot be a dict key.
    with pytest.raises(DecodeError, match="hashable"):
        decode_struct(t.ListKeyMap, h("0d 0001 0f 08 00000001 08 00000001 00000005 00000009 00"))


def test_unhashable_set_element_is_decode_error(t: ModuleType) -> None:
    # set<list<i32>>: like the map key above, a list cannot be a set member. The decoder
    # documents DecodeError for bytes it cannot decode; a TypeError would escape
    # Dispatcher.dispatch ("never raises").
    with pytest.raises(DecodeError):
        decode_struct(t.ListSet, h("0e 0001 0f 00000001 08 00000001 00000005 00"))


def test_truncated_at_every_offset(t: ModuleType) -> None:
    data = encode_cy(all_expected(t))
    assert decode_struct(t.All, data)[0] == all_expected(t)
    for cut in range(len(data)):
        with pytest.raises(DecodeError):
            decode_struct(t.All, data[:cut])
        # Same with the whole buffer there but `end` saying where the frame stops.
        with pytest.raises(DecodeError):
            decode_struct(t.All, data, 0, cut)


def test_message_truncated_at_every_offset(t: ModuleType) -> None:
    frame = binary.encode_message("echo", binary.CALL, 7,
                                  t.All(text="hello", ints=[1, 2], inner=t.Inner(x=1)))
    header = read_message_header(frame)
    assert decode_struct(t.All, frame, header.end)[0].text == "hello"
    for cut in range(len(frame)):
        part = frame[:cut]
        with pytest.raises(DecodeError):
            header = read_message_header(part)
            decode_struct(t.All, part, header.end)


def test_bytes_flipped_never_raise_anything_but_decode_error(t: ModuleType) -> None:
    # Deterministic fuzz: every byte of a valid encoding replaced by a few values.
    data = bytearray(encode_cy(all_expected(t)))
    for i in range(len(data)):
        original = data[i]
        for value in (0x00, 0x01, 0x7F, 0x80, 0xFF):
            data[i] = value
            try:
                decode_struct(t.All, data)
            except DecodeError:
                pass
        data[i] = original


# --------------------------------------------------------------------------- encoding


def test_encode_message_hex() -> None:
    from nimbus_thrift.demo import demo_thrift
    demo = demo_thrift()
    out = binary.encode_message("echo", binary.REPLY, 42, demo.Echo.echo_result(success="hi"))
    assert out.hex() == h("""
        80010002            # strict version 1 | REPLY
        00000004 6563686f   # "echo"
        0000002a            # seqid 42
        0b 0000 00000002 6869   # 0: success = "hi"
        00
    """).hex()


def test_encode_application_exception_hex() -> None:
    out = binary.encode_application_exception("nope", 7, "bad", AppErrorCode.UNKNOWN_METHOD)
    assert out.hex() == h("""
        80010003            # strict version 1 | EXCEPTION
        00000004 6e6f7065   # "nope"
        00000007            # seqid 7
        0b 0001 00000003 626164   # 1: message = "bad"
        08 0002 00000001          # 2: type = UNKNOWN_METHOD
        00
    """).hex()
    header = read_message_header(out)
    assert header == MessageHeader("nope", binary.EXCEPTION, 7, 16)
    exc, _ = decode_struct(TApplicationException, out, header.end)
    assert (exc.type, exc.message) == (1, "bad")


def test_frame_header() -> None:
    assert binary.frame_header(5) == b"\x00\x00\x00\x05"
    assert binary.frame_header(16_384_000).hex() == "00fa0000"


# --------------------------------------------------------------------------- C fast path
#
# binary.py decodes with _wire.c first and again in Python when C says None. These
# tests hold the two to the same answers directly, so a C decoder that silently falls
# back (slow) or accepts what Python refuses (wrong) fails here.

def test_the_c_decoder_is_built() -> None:
    assert binary._wire is not None, "nimbus_thrift.rpc.codec._wire was not built: run scripts/setup.sh"


def test_c_decodes_every_type_and_case_as_python_does(t: ModuleType) -> None:
    cases = [(t.All, h(ALL_HEX))] + [(type(o), encode_cy(o)) for o in round_trip_cases(t)]
    for cls, data in cases:
        c = c_outcome(cls, data)
        assert c is not DecodeError, f"C refused a valid {cls.__name__}"
        assert c == python_outcome(cls, data)


def test_c_honours_pos_and_end(t: ModuleType) -> None:
    body = h("08 0001 00000005  08 0002 00000006  00")
    data = b"HEADER" + body + b"trailing"
    assert c_outcome(t.Pair, data, 6, 6 + len(body)) == (repr(t.Pair(a=5, b=6)), 6 + len(body))
    assert c_outcome(t.Pair, data, 6, 6 + len(body) - 1) is DecodeError
    assert c_outcome(t.Pair, data, 6, len(data) + 1) is DecodeError     # end beyond the buffer


def test_c_and_python_agree_on_every_truncation_and_flipped_byte(t: ModuleType) -> None:
    data = bytearray(encode_cy(all_expected(t)))
    for cut in range(len(data)):
        assert c_outcome(t.All, data, 0, cut) is DecodeError
    checked = 0
    for i in range(len(data)):
        original = data[i]
        for value in (0x00, 0x01, 0x02, 0x0b, 0x0c, 0x7F, 0x80, 0xFF):
            data[i] = value
            assert c_outcome(t.All, data) == python_outcome(t.All, data), f"byte {i} = {value:#x}"
            checked += 1
        data[i] = original
    assert checked == 8 * len(data)


def test_c_and_python_agree_on_random_frames(t: ModuleType) -> None:
    # Seeded fuzz: valid encodings with random bytes spliced in, and random noise.
    import random
    rng = random.Random(20261121)
    seeds = [encode_cy(o) for o in round_trip_cases(t)]
    agreed_valid = 0
    for _ in range(3000):
        data = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(data) + 1)
            data[i:i + rng.randint(0, 3)] = bytes(rng.randrange(256)
                                                  for _ in range(rng.randint(0, 3)))
        for cls in (t.All, t.Node, t.Pair, t.IntMap, t.ListSet):
            python = python_outcome(cls, data)
            assert c_outcome(cls, data) == python
            agreed_valid += python is not DecodeError
    assert agreed_valid > 100        # the fuzz also reaches inputs that decode


def test_c_refuses_what_python_refuses(t: ModuleType) -> None:
    hostile = [
        (t.Str, h("0b 0001 7fffffff 00")),                  # 2 GiB string in 8 bytes
        (t.Ints, h("0f 0001 08 7fffffff 00")),               # 2**31 elements
        (t.Ints, h("0f 0001 08 ffffffff 00")),               # negative count
        (t.IntMap, h("0d 0001 08 08 80000000 00")),
        (t.Str, h("0b 0001 00000002 c328 00")),             # invalid UTF-8
        (t.Pair, h("08 0001 00000005")),                     # no STOP
        (t.Ints, h("0f 0001 0b 00000001 00000000 00")),      # list<string> for list<i32>
        (t.ListKeyMap, h("0d 0001 0f 08 00000001 08 00000001 00000005 00000009 00")),
        (t.ListSet, h("0e 0001 0f 00000001 08 00000001 00000005 00")),
        (t.Pair, h("07 0009 00")),                           # unknown wire type 7
    ]
    for cls, data in hostile:
        assert python_outcome(cls, data) is DecodeError, data.hex()
        assert c_outcome(cls, data) is DecodeError, data.hex()


def test_c_nesting_limit_matches(t: ModuleType) -> None:
    def nested(levels: int) -> bytes:
        return h("0c 0001") * levels + h("00") * (levels + 1)
    assert c_outcome(t.Node, nested(MAX_DEPTH - 1)) == python_outcome(t.Node, nested(MAX_DEPTH - 1))
    assert c_outcome(t.Node, nested(MAX_DEPTH - 1)) is not DecodeError
    assert c_outcome(t.Node, nested(MAX_DEPTH)) is DecodeError
    assert python_outcome(t.Node, nested(MAX_DEPTH)) is DecodeError
    assert c_outcome(t.Node, nested(100_000)) is DecodeError     # no C stack overflow either


@pytest.mark.parametrize("wire", [
    "80010001 00000004 6563686f 0000002a", "80010004 00000006 6e6f74696679 ffffffff",
    "80010002 00000000 7fffffff", "80010001 00000002 c3a9 00000001",
    "00000004 6563686f 01 0000002a", "00000000 04 00000009",
    "80020001 00000004 6563686f 0000002a",     # bad version
    "80010001 00000004 6563686f 0000",         # truncated seqid
    "80010001 ffffffff 00000000",              # negative name length
    "80010001 00000002 c328 00000001",         # name not UTF-8
    "00000010 6563686f 01 0000002a",           # old header that does not fit
    "8001",
])
@pytest.mark.parametrize("strict", [False, True])
def test_c_message_header_agrees_withpython_outcome(wire: str, strict: bool) -> None:
    data = h(wire)
    try:
        expected = tuple(binary._read_message_header(data, strict))
    except (DecodeError, BadVersionError):
        expected = None
    assert binary._wire.read_message_header(data, strict) == expected
    assert binary._wire.read_message_header(bytearray(data), strict) == expected


# --------------------------------------------------------------------------- C encoder
#
# binary.encode_framed_message / encode_message encode with _wire.c first and with
# thriftpy2's Cython writer when C says None. The C bytes must be thriftpy2's bytes,
# exactly; on every value thriftpy2 refuses, C must say None (so thriftpy2 raises the
# error the dispatcher maps to INTERNAL_ERROR).


def thriftpy2_message(name: Any, mtype: Any, seqid: Any, payload: Any) -> bytes:
    """The reference: a fresh thriftpy2 Cython writer, strict_write=True."""
    buf = TCyMemoryBuffer()
    proto = TCyBinaryProtocol(buf, strict_write=True)
    proto.write_message_begin(name, mtype, seqid)
    proto.write_struct(payload)
    return buf.getvalue()


def thriftpy2_outcome(name: Any, mtype: Any, seqid: Any, payload: Any
                      ) -> bytes | type[BaseException]:
    """The framed reference bytes, or the type of what thriftpy2 raises."""
    try:
        body = thriftpy2_message(name, mtype, seqid, payload)
    except Exception as exc:  # noqa: BLE001 - the type is the answer
        return type(exc)
    return binary.frame_header(len(body)) + body


def _c_encode(payload: Any, name: Any = "m", mtype: Any = binary.REPLY,
              seqid: Any = 7, framed: bool = True) -> bytes | None:
    plan = binary.c_plan(type(payload))
    assert plan is not None, f"no C plan for {type(payload).__name__}"
    return binary._wire.encode_message(name, mtype, seqid, payload, plan, framed)


def assert_encodes_as_thriftpy2(payload: Any, name: Any = "m",
                                mtype: Any = binary.REPLY, seqid: Any = 7) -> None:
    """C takes ``payload`` and writes thriftpy2's bytes; so do both public functions."""
    expected = thriftpy2_outcome(name, mtype, seqid, payload)
    assert isinstance(expected, bytes), f"thriftpy2 refused {payload!r}: {expected}"
    c = _c_encode(payload, name, mtype, seqid)
    assert c is not None, f"C refused {payload!r}"
    assert c.hex() == expected.hex()
    assert _c_encode(payload, name, mtype, seqid, framed=False) == expected[4:]
    assert binary.encode_framed_message(name, mtype, seqid, payload) == expected
    assert binary.encode_message(name, mtype, seqid, payload) == expected[4:]


def assert_falls_back(payload: Any, name: Any = "m", mtype: Any = binary.REPLY,
                      seqid: Any = 7) -> None:
    """C says None; the public functions then do exactly what thriftpy2 does (bytes or
    the same exception type)."""
    expected = thriftpy2_outcome(name, mtype, seqid, payload)
    plan = binary.c_plan(type(payload))
    if plan is not None:
        assert binary._wire.encode_message(name, mtype, seqid, payload, plan) is None
        assert binary._wire.encode_message(name, mtype, seqid, payload, plan, False) is None
    if isinstance(expected, bytes):
        assert binary.encode_framed_message(name, mtype, seqid, payload) == expected
        assert binary.encode_message(name, mtype, seqid, payload) == expected[4:]
    else:
        with pytest.raises(expected):
            binary.encode_framed_message(name, mtype, seqid, payload)
        with pytest.raises(expected):
            binary.encode_message(name, mtype, seqid, payload)


def test_the_c_encoder_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    assert binary._wire is not None, "nimbus_thrift.rpc.codec._wire was not built: run scripts/setup.sh"
    from nimbus_thrift.demo import demo_thrift
    result = demo_thrift().Echo.echo_result(success="0123456789abcdef")
    expected = thriftpy2_message("echo", binary.REPLY, 7, result)
    # With thriftpy2's writer out of reach, replies still encode: C made them.
    monkeypatch.setattr(binary, "_encode_thriftpy2", None)
    assert binary.encode_framed_message("echo", binary.REPLY, 7, result) == \
        binary.frame_header(len(expected)) + expected
    assert binary.encode_message("echo", binary.REPLY, 7, result) == expected
    exc = binary.encode_application_exception("echo", 7, "boom", AppErrorCode.INTERNAL_ERROR)
    assert binary.encode_framed_application_exception(
        "echo", 7, "boom", AppErrorCode.INTERNAL_ERROR) == binary.frame_header(len(exc)) + exc


def test_encode_framed_message_hex() -> None:
    from nimbus_thrift.demo import demo_thrift
    result = demo_thrift().Echo.echo_result(success="hi")
    assert binary.encode_framed_message("echo", binary.REPLY, 42, result).hex() == h("""
        0000001a            # frame length 26
        80010002            # strict version 1 | REPLY
        00000004 6563686f   # "echo"
        0000002a            # seqid 42
        0b 0000 00000002 6869   # 0: success = "hi"
        00
    """).hex()


def test_encode_framed_application_exception() -> None:
    body = binary.encode_application_exception("nope", 7, "bad", AppErrorCode.UNKNOWN_METHOD)
    framed = binary.encode_framed_application_exception("nope", 7, "bad",
                                                        AppErrorCode.UNKNOWN_METHOD)
    assert framed == binary.frame_header(len(body)) + body
    assert framed[4:].hex() == h("""
        80010003 00000004 6e6f7065 00000007
        0b 0001 00000003 626164  08 0002 00000001  00
    """).hex()
    exc = TApplicationException(type=6, message=None)       # a None message is not sent
    assert_encodes_as_thriftpy2(exc, "x", binary.EXCEPTION)


def test_c_encodes_every_fixture_as_thriftpy2(t: ModuleType) -> None:
    for obj in round_trip_cases(t):
        assert_encodes_as_thriftpy2(obj)
    # The ALL_HEX fixture, read back, writes as thriftpy2 writes it.
    assert_encodes_as_thriftpy2(decode_struct(t.All, h(ALL_HEX))[0])


def test_c_encodes_edge_values(t: ModuleType) -> None:
    cases = [
        t.All(tiny=-128, small=-32768, medium=-2**31, big=-2**63),
        t.All(tiny=127, small=32767, medium=2**31 - 1, big=2**63 - 1),
        t.All(flag=False, real=math.nan, doubles=[math.nan, -0.0, 0.0]),
        t.All(flag=True, tiny=True, medium=False, real=3),            # bools are ints
        t.All(real=2**53 + 1, doubles=[True, 10**300]),              # ints as doubles
        t.All(text=b"\xff raw bytes", tags={b"\x00", "\u00e9"}),     # bytes in strings
        t.All(blob="\U0001f600", blobs=["\u00e9", b"\xff"]),          # str in binaries
        t.All(blob=bytearray(b"\x00\x01"), raw={"k": b"v"}),
        t.All(blob=memoryview(b"abcdef")[1:4]),
        t.All(ints=(1, 2, 3), tags=frozenset({"x"}), inners=(t.Inner(x=1),)),
        t.All(ints={5}, longs=[1, 1, 2], inner_set=[t.Inner(), t.Inner()]),  # any order
        t.All(counts={"": 0}, nested={-1: []}, matrix=[[], [-1]], by_inner={}),
        t.All(text="x" * 5000, ints=list(range(20_000)), blob=bytes(70_000)),  # grows
        t.All(text="\u4e2d" * 100_000),
        t.ListKeyMap(m={(1, 2): 3}), t.ListSet(s=[[1], [2, 3]]),
    ]
    for obj in cases:
        assert_encodes_as_thriftpy2(obj)
    # Message headers: names in UTF-8 or as bytes, any seqid, any message type.
    pair = t.Pair(a=1)
    for name, mtype, seqid in [("", 1, 0), ("\u00e9\U0001f600", 4, -1), (b"raw", 2, 2**31 - 1),
                               ("m" * 300, 3, -2**31), ("x", 0, 1), ("x", 255, 1)]:
        assert_encodes_as_thriftpy2(pair, name, mtype, seqid)


def test_c_skips_unset_and_missing_fields(t: ModuleType) -> None:
    # The dispatcher makes results with object.__new__: only `success` exists.
    bare = object.__new__(t.Pair)
    assert_encodes_as_thriftpy2(bare)
    bare.b = 5
    assert_encodes_as_thriftpy2(bare)
    obj = t.All(text="x", ints=[1])
    del obj.text
    assert_encodes_as_thriftpy2(obj)


def test_c_encodes_nesting_up_to_the_limit(t: ModuleType) -> None:
    def chain(levels: int) -> object:
        node = t.Node(v=levels)
        for i in range(levels - 1):
            node = t.Node(v=i, child=node)
        return node
    assert_encodes_as_thriftpy2(chain(MAX_DEPTH))        # thriftpy2's own limit, too
    assert_falls_back(chain(MAX_DEPTH + 1))              # RecursionError from thriftpy2
    loop = t.Node(v=1)
    loop.child = loop
    assert_falls_back(loop)
    deep_list: list[object] = []
    for _ in range(MAX_DEPTH + 5):
        deep_list = [deep_list]
    assert_falls_back(t.Ints(li=deep_list))


def _bad_values(t: ModuleType) -> list[tuple[str, object]]:
    """Values thriftpy2 refuses: (what, payload)."""
    str_code: Any = "1"
    return [
        ("str in i32", t.All(medium="1")),
        ("i32 too big", t.All(medium=2**31)),
        ("i32 too small", t.All(medium=-2**31 - 1)),
        ("byte too big", t.All(tiny=128)),
        ("byte too small", t.All(tiny=-129)),
        ("i16 too big", t.All(small=2**15)),
        ("i64 too big", t.All(big=2**63)),
        ("i64 too small", t.All(big=-2**63 - 1)),
        ("huge int", t.All(big=10**100)),
        ("str in double", t.All(real="1.5")),
        ("int too big for a double", t.All(real=10**400)),
        ("int in string", t.All(text=5)),
        ("bytearray in string", t.All(text=bytearray(b"x"))),
        ("lone surrogate in string", t.All(text="\ud800")),
        ("int in binary", t.All(blob=5)),
        ("lone surrogate in binary", t.All(blob="a\udc80")),
        ("bytearray in list<binary>", t.All(blobs=[bytearray(b"x")])),
        ("int for a list", t.All(ints=5)),
        ("str element in list<i32>", t.All(ints=[1, "2"])),
        ("element out of range", t.All(ints=[0, 2**40])),
        ("None element", t.All(ints=[1, None])),
        ("None struct element", t.All(inners=[t.Inner(), None])),
        ("int for a struct", t.All(inner=5)),
        ("list for a map", t.All(counts=[("k", 1)])),
        ("int key in map<string, i64>", t.All(counts={5: 1})),
        ("str value in map<string, i64>", t.All(counts={"k": "v"})),
        ("bad value deep inside", t.All(nested={1: ["a", 2]})),
        ("bad field of a nested struct", t.All(inner=t.Inner(x="x"))),
        ("bad field of a set member", t.All(inner_set={t.Inner(s=5)})),
        ("surrogate message", TApplicationException(type=1, message="\ud800")),
        ("str type code", TApplicationException(type=str_code, message="m")),
    ]


def test_c_refuses_what_thriftpy2_refuses(t: ModuleType) -> None:
    for what, payload in _bad_values(t):
        expected = thriftpy2_outcome("m", binary.REPLY, 7, payload)
        assert not isinstance(expected, bytes), f"{what}: thriftpy2 wrote it"
        assert _c_encode(payload) is None, what
        assert_falls_back(payload)


def test_bad_message_headers_fall_back(t: ModuleType) -> None:
    pair = t.Pair(a=1)
    for name, mtype, seqid in [("\ud800", 2, 1), (5, 2, 1), (None, 2, 1),
                               ("m", 2, 2**31), ("m", 2, -2**31 - 1), ("m", 2, "1"),
                               ("m", "2", 1), ("m", 2**40, 1)]:
        expected = thriftpy2_outcome(name, mtype, seqid, pair)
        assert not isinstance(expected, bytes), (name, mtype, seqid)
        assert _c_encode(pair, name, mtype, seqid) is None
        assert_falls_back(pair, name, mtype, seqid)


def test_what_c_leaves_to_thriftpy2_is_written_by_thriftpy2(t: ModuleType) -> None:
    # Values thriftpy2 writes in its own way (truthiness, its own spec for another
    # struct class, iterating a dict's keys, ...): C declines rather than guess, and
    # the fallback writes thriftpy2's bytes.
    class MyStr(str):
        pass

    class MyList(list):
        pass

    from collections import OrderedDict
    cases = [
        t.All(flag="yes"), t.All(flag=2.5), t.All(flag=[]),
        t.All(medium=1.9),                                     # truncated by __int__
        t.All(text=MyStr("x")), t.All(ints=MyList([1, 2])),
        t.All(ints={1: "a", 2: "b"}),                          # a dict: its keys
        t.All(counts=OrderedDict([("b", 1), ("a", 2)])),
        t.All(inner=t.Pair(a=1, b=2)),                         # written with Pair's spec
        t.All(real=MyList()), t.All(text=None, ints=range(3)),
    ]
    for payload in cases:
        assert_falls_back(payload)
    for mtype in (-1, 256, 2**31 - 1):                          # ORed into the version
        assert_falls_back(t.Pair(a=1), "m", mtype, 1)


def test_c_encoder_without_a_usable_plan(t: ModuleType) -> None:
    pair = t.Pair(a=1)
    encode: Any = binary._wire.encode_message
    assert encode("m", 2, 1, pair, None) is None                 # no plan
    assert encode("m", 2, 1, pair, []) is None
    assert encode("m", 2, 1, pair, binary.c_plan(t.Inner)) is None   # another class's plan
    assert encode("m", 2, 1, None, binary.c_plan(t.Pair)) is None
    with pytest.raises(TypeError):
        encode("m", 2, 1, pair)
    # Objects no plan can be made for go to thriftpy2, which raises.
    assert_falls_back(object())
    assert binary._encode_plan(object) is None


# Seeded random payloads over every struct of the IDLs the project serves, with values
# of the right types: C must take them all and write thriftpy2's bytes.

def _random_value(rng: random.Random, ttype: int, spec: Any, depth: int,
                  hashable: bool = False) -> object:
    from thriftpy2.thrift import TType
    if ttype == TType.BOOL:
        return rng.random() < 0.5
    if ttype == TType.BYTE:
        return rng.randint(-128, 127)
    if ttype == TType.I16:
        return rng.choice([rng.randint(-2**15, 2**15 - 1), 0, -1])
    if ttype == TType.I32:
        if isinstance(spec, type):                                  # an enum
            values = [v for k, v in vars(spec).items() if k.isupper() and isinstance(v, int)]
            return rng.choice(values) if values else rng.randint(0, 9)
        return rng.choice([rng.randint(-2**31, 2**31 - 1), rng.randint(-9, 9)])
    if ttype == TType.I64:
        return rng.choice([rng.randint(-2**63, 2**63 - 1), rng.randint(-9, 9)])
    if ttype == TType.DOUBLE:
        return rng.choice([rng.uniform(-1e9, 1e9), math.inf, -0.0, 5e-324, math.nan, 1.5])
    if ttype in (TType.STRING, binary._BINARY):
        text = "".join(rng.choice("ab \u00e9\u4e2d\U0001f600\x00")
                       for _ in range(rng.randint(0, 12)))
        if ttype == binary._BINARY or rng.random() < 0.1:   # both take str and bytes
            return rng.choice([text, text.encode("utf-8"), rng.randbytes(5)])
        return text
    if ttype == TType.STRUCT:
        return _random_struct(rng, spec, depth + 1)
    if ttype in (TType.LIST, TType.SET):
        etype, espec = spec if isinstance(spec, tuple) else (spec, None)
        n = rng.randint(0, 4) if depth < 4 else 0
        items = [_random_value(rng, etype, espec, depth + 1, hashable=True) for _ in range(n)]
        if ttype == TType.SET and not hashable:
            try:
                return set(items)
            except TypeError:    # set<list<i32>>: thriftpy2 writes a list as a set too
                return items
        return tuple(items) if hashable else items
    if ttype == TType.MAP:
        (ktype, kspec), (vtype, vspec) = [s if isinstance(s, tuple) else (s, None) for s in spec]
        n = rng.randint(0, 4) if depth < 4 else 0
        out = {}
        for _ in range(n):
            key = _random_value(rng, ktype, kspec, depth + 1, hashable=True)
            try:
                out[key] = _random_value(rng, vtype, vspec, depth + 1)
            except TypeError:                         # unhashable after all: skip it
                pass
        return out
    raise AssertionError(f"type {ttype}")


def _random_struct(rng: random.Random, cls: Any, depth: int = 0) -> Any:
    # As the dispatcher makes results (cls.__new__: no attributes) or with __init__.
    bare = rng.random() < 0.2
    obj = cls.__new__(cls) if bare else cls()
    for fid, entry in cls.thrift_spec.items():
        if depth > 6 or rng.random() < 0.25:
            if not bare:
                setattr(obj, entry[1], None)
            continue
        spec = entry[2] if len(entry) > 3 else None
        setattr(obj, entry[1], _random_value(rng, entry[0], spec, depth))
    return obj


def _idl_classes(t: ModuleType) -> list[type]:
    from nimbus_thrift.demo import demo_thrift
    from nimbus_thrift.idl import nimbus_idl
    classes: list[type] = []
    for module in (t, demo_thrift(), nimbus_idl()):
        meta = module.__thrift_meta__
        classes += meta["structs"] + meta["unions"] + meta["exceptions"]
        for service in meta["services"]:
            for method in service.thrift_services:
                classes.append(getattr(service, method + "_args"))
                result = getattr(service, method + "_result", None)
                if result is not None:
                    classes.append(result)
    return classes


def test_c_encodes_random_structs_as_thriftpy2(t: ModuleType) -> None:
    rng = random.Random(20261122)
    classes = _idl_classes(t)
    assert len(classes) > 100
    for cls in classes:                                    # every class at least once
        assert_encodes_as_thriftpy2(_random_struct(rng, cls))
    for _ in range(3000):
        payload = _random_struct(rng, rng.choice(classes))
        expected = thriftpy2_outcome("m", binary.REPLY, 7, payload)
        assert isinstance(expected, bytes)
        assert _c_encode(payload) == expected
    # The other direction: what C wrote, the decoders read back.
    obj = _random_struct(rng, t.All)
    data = _c_encode(obj, framed=False)
    assert data is not None
    header = read_message_header(data)
    assert python_outcome(t.All, data, header.end) == c_outcome(t.All, data, header.end)


def test_c_and_thriftpy2_agree_on_random_wrong_values(t: ModuleType) -> None:
    # Seeded fuzz: random Python values of any type in random fields. Either thriftpy2
    # writes them (and C writes the same bytes or declines) or it raises (and C declines).
    rng = random.Random(20261123)
    junk: list[object] = [None, True, 0, -1, 2**31, 2**63, 10**30, 1.5, math.nan, "", "x",
                          "\ud800", b"", b"\xff", bytearray(b"a"), [], [1], ["a"], (), {1},
                          {"a": 1}, {1: "a"}, t.Inner(x=1), t.Pair(), object(), [None],
                          [[1]], {"k": [1]}]
    outcomes = {"same": 0, "declined": 0, "refused": 0}
    for _ in range(2000):
        obj = _random_struct(rng, t.All)
        for _ in range(rng.randint(1, 3)):
            entry = rng.choice(list(t.All.thrift_spec.values()))
            setattr(obj, entry[1], rng.choice(junk))
        expected = thriftpy2_outcome("m", binary.REPLY, 7, obj)
        c = _c_encode(obj)
        if not isinstance(expected, bytes):
            assert c is None
            outcomes["refused"] += 1
            with pytest.raises(expected):
                binary.encode_framed_message("m", binary.REPLY, 7, obj)
        else:
            assert c in (None, expected)
            outcomes["same" if c is not None else "declined"] += 1
            assert binary.encode_framed_message("m", binary.REPLY, 7, obj) == expected
    assert min(outcomes.values()) > 50, outcomes
