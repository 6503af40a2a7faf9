"""A fuzzer of the decoders issue 17 added: the TCompactProtocol decoder (rpc/compact.py)
and the unframed-message scanner (rpc/unframed.py) for both protocols. Used by
tests/unit/rpc/codec/test_fuzz_compact.py (a fixed number of cases and seed) and
scripts/fuzz_compact.py (as long as asked).

Each case takes a valid message (a seed: a struct of the test IDL, support.binary_cases,
behind a CALL header) in compact or binary, mutates it (bit flips, bytes set to type
codes and boundary values, truncation, varint runs, spliced and repeated regions),
picks a decoded-size budget and checks:

* the compact decoder raises nothing but DecodeError (a budget refusal included);
* the scanner raises nothing but ScanError or FrameSizeError, fed whole and fed in
  random pieces (same outcome both ways);
* whenever the decoder reads the message (its header and argument struct), the scanner
  finds the same end: the scan never cuts a message short or runs past one the
  decoder accepts;
* the C compact decoder (_compact.c) and the Python one give the same outcome: the same
  value and end, or both refuse (C by returning None).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from nimbus_thrift.rpc.codec import binary, compact, pydecode
from nimbus_thrift.rpc.codec.decoded import UNLIMITED, Budget
from nimbus_thrift.rpc.errors import DecodeError, FrameSizeError, RpcError
from nimbus_thrift.rpc.codec.unframed import Scanner, ScanError

from .binary_cases import round_trip_cases

INTERESTING = (0x00, 0x01, 0x02, 0x03, 0x05, 0x08, 0x09, 0x0B, 0x0C, 0x0D, 0x0E, 0x0F,
               0x10, 0x15, 0x19, 0x1C, 0x7F, 0x80, 0xF0, 0xFF)
LIMIT = 1 << 20


class FuzzFailure(AssertionError):
    def __init__(self, message: str, protocol: str, data: bytes) -> None:
        super().__init__(f"{message}\n  {protocol}, {len(data)} bytes: {data.hex()}")
        self.data = data


@dataclass
class Stats:
    cases: int = 0
    decoded: int = 0
    refused: int = 0
    scanned: int = 0
    fast_scanned: int = 0
    mutations: Counter[str] = field(default_factory=Counter)


def seeds(t: ModuleType) -> list[tuple[str, type, bytes]]:
    out = []
    for obj in round_trip_cases(t):
        for protocol, codec in (("compact", compact), ("binary", binary)):
            out.append((protocol, type(obj), codec.encode_message("call", 1, 3, obj)))
    return out


def _mutate(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    buf = bytearray(data)
    kind = rng.choice(MUTATIONS)
    if kind == "flip" and buf:
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(buf))
            buf[i] ^= 1 << rng.randrange(8)
    elif kind == "byte" and buf:
        for _ in range(rng.randint(1, 3)):
            buf[rng.randrange(len(buf))] = rng.choice(INTERESTING)
    elif kind == "truncate" and buf:
        del buf[rng.randrange(len(buf)):]
    elif kind == "varint" and buf:
        i = rng.randrange(len(buf))
        buf[i:i] = bytes([0xFF] * rng.randint(1, 12) + [rng.choice((0x00, 0x07, 0x7F))])
    elif kind == "splice" and len(buf) > 2:
        i, j = sorted(rng.sample(range(len(buf)), 2))
        k = rng.randrange(len(buf))
        buf[k:k] = buf[i:j] * rng.randint(1, 3)
    elif kind == "delete" and len(buf) > 2:
        i, j = sorted(rng.sample(range(len(buf)), 2))
        del buf[i:j]
    return kind, bytes(buf)


MUTATIONS = ("flip", "byte", "truncate", "varint", "splice", "delete")


def _decode(protocol: str, cls: type, data: bytes, budget: int) -> int | type:
    """The decoder's end offset for the whole message, or DecodeError."""
    try:
        if protocol == "compact":
            head = compact.read_message_header(data)
            return compact.decode_struct(cls, data, head.end, budget=budget)[1]
        head = binary._read_message_header(data, True)
        return pydecode._struct_reader(cls)(data, head.end, len(data), 0, Budget(budget))[1]
    except DecodeError:
        return DecodeError
    except RpcError:                # BadVersionError: not a message header at all
        return DecodeError


def python_outcome(cls: type, data: bytes, pos: int, budget: int) -> Any:
    try:
        value, end = compact._struct_reader(cls)(data, pos, len(data), 0, Budget(budget))
    except DecodeError:
        return DecodeError
    return repr(value), end


def c_outcome(cls: type, data: bytes, pos: int, budget: int) -> Any:
    plan = binary.c_plan(cls)
    assert plan is not None and compact._compact is not None, "the C codec is not built"
    result = compact._compact.decode_struct(plan, data, pos, len(data), budget)
    if result is None:
        return DecodeError
    assert type(result[0]) is cls
    return repr(result[0]), result[1]


def _scan(protocol: str, data: bytes, pieces: list[int]) -> int | None | type:
    scan = Scanner(protocol, LIMIT)
    have = 0
    try:
        for piece in pieces:
            have = min(len(data), have + piece)
            end = scan.feed(data, have)
            if end is not None:
                return end
            if have == len(data):
                return None
        return None
    except (ScanError, FrameSizeError):
        return ScanError


def run(t: ModuleType, cases: int, seed: int) -> Stats:
    rng = random.Random(seed)
    pool = seeds(t)
    stats = Stats()
    for _ in range(cases):
        protocol, cls, original = rng.choice(pool)
        kind, data = _mutate(rng, original)
        stats.mutations[kind] += 1
        budget = rng.choice((UNLIMITED, UNLIMITED, rng.randint(0, 4 * len(data) + 200)))
        try:
            decoded = _decode(protocol, cls, data, budget)
        except Exception as exc:  # noqa: BLE001 - the point of the fuzzer
            raise FuzzFailure(f"the {protocol} decoder raised {exc!r}", protocol, data) \
                from exc
        try:
            whole = _scan(protocol, data, [len(data) or 1])
            pieces = [rng.randint(1, 16) for _ in range(len(data) + 1)]
            split = _scan(protocol, data, pieces)
        except Exception as exc:  # noqa: BLE001
            raise FuzzFailure(f"the {protocol} scanner raised {exc!r}", protocol, data) \
                from exc
        fast = compact._compact.scan_message(data, protocol == "compact", LIMIT) \
            if compact._compact is not None else -1
        if fast >= 0 and fast != whole:
            raise FuzzFailure(f"the C scan said {fast}, the Scanner {whole!r}", protocol, data)
        if whole != split:
            raise FuzzFailure(f"the scanner found {whole!r} whole but {split!r} in pieces",
                              protocol, data)
        if protocol == "compact":
            try:
                pos = compact.read_message_header(data).end
            except RpcError:
                pos = min(len(data), 8)
            py, c = python_outcome(cls, data, pos, budget), c_outcome(cls, data, pos, budget)
            if py != c:
                raise FuzzFailure(f"C decoded {c!r}, Python {py!r} (budget {budget})",
                                  protocol, data)
        stats.cases += 1
        if decoded is DecodeError:
            stats.refused += 1
        else:
            stats.decoded += 1
            # A message the decoder reads ends where the scanner says, or later bytes
            # (a mutation may leave trailing bytes) begin the next message.
            if whole != decoded:
                raise FuzzFailure(f"the decoder read {decoded} bytes, the scanner said "
                                  f"{whole!r}", protocol, data)
        if isinstance(whole, int):
            stats.scanned += 1
        if fast >= 0:
            stats.fast_scanned += 1
    return stats
