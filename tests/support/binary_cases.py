"""Test cases for the TBinaryProtocol decoders (tests/unit/rpc/codec/test_binary_*.py,
the decoded-size budget and the fuzz tests): a thrift IDL with every type, hex and value fixtures, and
the outcome of each decoder on a frame, compared between the C fast path and Python."""

from __future__ import annotations

import math
import re
from pathlib import Path
from types import ModuleType

import thriftpy2
from thriftpy2.protocol.cybin import TCyBinaryProtocol
from thriftpy2.transport.memory import TCyMemoryBuffer

from nimbus_thrift.rpc.codec import binary, pydecode
from nimbus_thrift.rpc.codec.decoded import UNLIMITED, Budget
from nimbus_thrift.rpc.errors import DecodeError

IDL = """
enum Color { RED = 1, GREEN = 2, BLUE = 7 }

struct Inner {
  1: i32 x,
  2: string s,
}

struct Node {
  1: Node child,
  2: i32 v,
}

struct All {
  1: bool flag,
  2: byte tiny,
  3: i16 small,
  4: i32 medium,
  5: i64 big,
  6: double real,
  7: string text,
  8: binary blob,
  9: list<i32> ints,
  10: set<string> tags,
  11: map<string, i64> counts,
  12: Inner inner,
  13: Color color,
  14: list<Inner> inners,
  15: map<i32, list<string>> nested,
  16: set<Inner> inner_set,
  17: list<list<i16>> matrix,
  18: map<Inner, Color> by_inner,
  19: list<binary> blobs,
  20: list<bool> bools,
  21: list<double> doubles,
  22: set<i64> longs,
  23: map<binary, binary> raw,
}

struct Str { 1: string s }
struct Bin { 1: binary b }
struct Ints { 1: list<i32> li }
struct IntSet { 1: set<i32> si }
struct IntMap { 1: map<i32, i32> m }
struct ListKeyMap { 1: map<list<i32>, i32> m }
struct ListSet { 1: set<list<i32>> s }
struct Pair { 1: i32 a, 2: i32 b }
"""


def load_cases(folder: Path) -> ModuleType:
    """The thriftpy2 module of :data:`IDL`, loaded from a file written in ``folder``."""
    path = folder / "binary_cases.thrift"
    path.write_text(IDL)
    return thriftpy2.load(str(path), module_name="binary_cases_thrift")


def h(text: str) -> bytes:
    """Hex with whitespace and `#` comments, as in the fixtures."""
    return bytes.fromhex(re.sub(r"#[^\n]*", "", text).replace(" ", "").replace("\n", ""))


def encode_cy(obj: object) -> bytes:
    buf = TCyMemoryBuffer()
    TCyBinaryProtocol(buf).write_struct(obj)
    return buf.getvalue()


ALL_HEX = """
02 0001 01                          # 1: bool flag = true
03 0002 fe                          # 2: byte tiny = -2
06 0003 8000                        # 3: i16 small = -32768
08 0004 7fffffff                    # 4: i32 medium = 2**31-1
0a 0005 8000000000000000            # 5: i64 big = -2**63
04 0006 3ff8000000000000            # 6: double real = 1.5
0b 0007 00000005 68c3a96c6c         # 7: string text = "h\u00e9ll"
0b 0008 00000003 00ff80             # 8: binary blob = 00 ff 80
0f 0009 08 00000002 00000001 ffffffff                   # 9: list<i32> = [1, -1]
0e 000a 0b 00000002 00000001 61 00000001 62             # 10: set<string> = {a, b}
0d 000b 0b 0a 00000001 00000001 6b 0000000000000003     # 11: map<string,i64> = {k: 3}
0c 000c 08 0001 00000007 0b 0002 00000000 00            # 12: Inner(x=7, s="")
08 000d 00000007                                        # 13: Color = BLUE
0f 000e 0c 00000002 00 08 0001 00000001 00              # 14: [Inner(), Inner(x=1)]
0d 000f 08 0f 00000001 00000005 0b 00000001 00000000    # 15: {5: [""]}
0e 0010 0c 00000001 08 0001 00000002 00                 # 16: {Inner(x=2)}
0f 0011 0f 00000002 06 00000001 0001 06 00000000        # 17: [[1], []]
0d 0012 0c 08 00000001 08 0001 00000003 00 00000001     # 18: {Inner(x=3): RED}
0f 0013 0b 00000002 00000000 00000001 ff                # 19: [b"", b"\\xff"]
0f 0014 02 00000003 01 00 01                            # 20: [True, False, True]
0f 0015 04 00000001 c000000000000000                    # 21: [-2.0]
0e 0016 0a 00000001 7fffffffffffffff                    # 22: {2**63-1}
0d 0017 0b 0b 00000001 00000001 00 00000002 fffe        # 23: {b"\\0": b"\\xff\\xfe"}
00                                                      # STOP
"""


def all_expected(t: ModuleType) -> object:
    return t.All(
        flag=True, tiny=-2, small=-32768, medium=2**31 - 1, big=-2**63, real=1.5,
        text="h\u00e9ll", blob=b"\x00\xff\x80", ints=[1, -1], tags={"a", "b"},
        counts={"k": 3}, inner=t.Inner(x=7, s=""), color=t.Color.BLUE,
        inners=[t.Inner(), t.Inner(x=1)], nested={5: [""]}, inner_set={t.Inner(x=2)},
        matrix=[[1], []], by_inner={t.Inner(x=3): t.Color.RED}, blobs=[b"", b"\xff"],
        bools=[True, False, True], doubles=[-2.0], longs={2**63 - 1},
        raw={b"\x00": b"\xff\xfe"})


def canonical(value: object) -> str:
    """``value`` as text in which equal values read the same: a set's or a map's
    iteration order (which depends on insertion order and, with string hash
    randomisation, on the process) is sorted away; NaN reads as itself."""
    if isinstance(value, (set, frozenset)):
        return "set{" + ", ".join(sorted(canonical(v) for v in value)) + "}"
    if isinstance(value, dict):
        return "{" + ", ".join(sorted(f"{canonical(k)}: {canonical(v)}"
                                      for k, v in value.items())) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(canonical(v) for v in value) + "]"
    if hasattr(value, "thrift_spec"):
        fields = ", ".join(f"{name}={canonical(getattr(value, name))}"
                           for _, (_, name, *_rest) in sorted(value.thrift_spec.items()))
        return f"{type(value).__name__}({fields})"
    return repr(value)


def round_trip_cases(t: ModuleType) -> list[object]:
    return [
        t.All(),
        all_expected(t),
        t.All(flag=False, tiny=127, small=32767, medium=-2**31, big=2**63 - 1,
              real=-0.0, text="", blob=b"", ints=[], tags=set(), counts={},
              inner=t.Inner(), color=t.Color.GREEN, inners=[], nested={},
              inner_set=set(), matrix=[], by_inner={}, blobs=[], bools=[],
              doubles=[], longs=set(), raw={}),
        t.All(real=math.inf, doubles=[math.inf, -math.inf, 5e-324, 1.7976931348623157e308],
              text="\U0001f600 \u00fc \u4e2d \x00", tags={"\U0001f600", ""},
              ints=list(range(-500, 500)), blob=bytes(range(256)),
              counts={str(i): i * 2**40 for i in range(50)},
              nested={i: [str(j) for j in range(i)] for i in range(10)},
              matrix=[[j for j in range(i)] for i in range(20)]),
        t.Node(v=1, child=t.Node(v=2, child=t.Node(v=3))),
        t.Pair(a=0, b=-1),
    ]



# --------------------------------------------------------------------------- outcomes
#
# binary.py decodes with _wire.c first and again in Python when C says None. These
# hold the two to the same answers directly, so a C decoder that silently falls back
# (slow) or accepts what Python refuses (wrong) fails.

def python_outcome(cls: type, data: bytes | bytearray, pos: int = 0, end: int | None = None,
            budget: int = UNLIMITED):
    """The Python decoder's outcome: (repr of the value, end) or DecodeError (any
    refusal; C says no more). Compared as reprs so that a NaN equals itself."""
    try:
        value, stop = pydecode._struct_reader(cls)(data, pos, len(data) if end is None else end,
                                                 0, Budget(budget))
    except DecodeError:
        return DecodeError
    return repr(value), stop


def c_outcome(cls: type, data: bytes | bytearray, pos: int = 0, end: int | None = None,
       budget: int = UNLIMITED):
    plan = binary.c_plan(cls)
    assert plan is not None, f"no C plan for {cls.__name__}"
    result = binary._wire.decode_struct(plan, data, pos, len(data) if end is None else end,
                                        budget)
    if result is None:
        return DecodeError
    assert type(result[0]) is cls
    return repr(result[0]), result[1]



def spent(cls: type, data: bytes | bytearray, pos: int = 0, end: int | None = None) -> int:
    """The decoded-size budget the Python decoder spends on ``cls`` in ``data``."""
    budget = Budget(UNLIMITED)
    pydecode._struct_reader(cls)(data, pos, len(data) if end is None else end, 0, budget)
    return UNLIMITED - budget.left
