"""Bytes tier: nimbus_thrift.rpc.codec.binary's encoding (messages, application
exceptions, frame headers, asserted as hex) and its C encoder, whose bytes must be
thriftpy2's exactly and which must leave to thriftpy2 every value thriftpy2 refuses.
No sockets."""

from __future__ import annotations

import math
import random
from types import ModuleType
from typing import Any

import pytest
from thriftpy2.protocol.cybin import TCyBinaryProtocol
from thriftpy2.thrift import TApplicationException
from thriftpy2.transport.memory import TCyMemoryBuffer

from nimbus_thrift.rpc.codec import binary
from nimbus_thrift.rpc.codec.binary import MAX_DEPTH, MessageHeader, decode_struct, read_message_header
from nimbus_thrift.rpc.errors import AppErrorCode
from support.binary_cases import (ALL_HEX, c_outcome, h, load_cases, python_outcome,
                                  round_trip_cases)


@pytest.fixture(scope="module")
def t(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    return load_cases(tmp_path_factory.mktemp("idl"))


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
