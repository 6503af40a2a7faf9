"""Bytes tier: nimbus_thrift.rpc.codec.binary's decoder on hostile input: lengths and
counts that claim more than the frame holds (refused fast, without allocating), too
deep nesting, bad UTF-8, truncation at every offset, flipped bytes. No sockets."""

from __future__ import annotations

import time
import tracemalloc
from types import ModuleType

import pytest

from nimbus_thrift.rpc.codec import binary
from nimbus_thrift.rpc.codec.binary import MAX_DEPTH, decode_struct, read_message_header
from nimbus_thrift.rpc.errors import DecodeError
from support.binary_cases import all_expected, encode_cy, h, load_cases


@pytest.fixture(scope="module")
def t(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    return load_cases(tmp_path_factory.mktemp("idl"))


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
