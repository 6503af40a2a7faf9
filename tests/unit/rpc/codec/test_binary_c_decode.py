"""Bytes tier: the C decoder (nimbus_thrift.rpc.codec._wire) held to the Python
decoder's answers, case by case, on every truncation and flipped byte, on random
frames and on message headers. No sockets."""

from __future__ import annotations

import random
from types import ModuleType

import pytest

from nimbus_thrift.rpc.codec import binary
from nimbus_thrift.rpc.codec.binary import MAX_DEPTH
from nimbus_thrift.rpc.errors import BadVersionError, DecodeError
from support.binary_cases import (ALL_HEX, all_expected, c_outcome, encode_cy, h, load_cases,
                                  python_outcome, round_trip_cases)


@pytest.fixture(scope="module")
def t(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    return load_cases(tmp_path_factory.mktemp("idl"))


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
