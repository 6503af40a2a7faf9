"""A differential fuzzer of the two TBinaryProtocol decoders (rpc/_wire.c and the Python
decoder of rpc/binary.py), used by tests/unit/rpc/codec/test_fuzz_decoders.py (a fixed number of
cases, a fixed seed) and scripts/fuzz_decoders.py (as long as asked).

Each case takes a valid encoding (a seed) of a struct of the test IDL
(support.binary_cases) or of the Nimbus IDL, mutates it (bit flips, bytes set to
type codes and boundary values, truncation, 4-byte length or count fields set to
extremes, spliced and repeated regions, random nested containers written into a
field), picks a decoded-size budget (none, around what the frame costs, or tiny) and
checks:

* C and Python give the same outcome: the same value and end offset, or both refuse
  (C refuses by returning None: it leaves the reason to Python by design);
* the Python decoder raises nothing but DecodeError;
* the public binary.decode_struct (C first, Python for the error) gives the Python
  decoder's outcome exactly: the same value, or the same error type and message;
* the message header readers agree on the mutated whole message too.
"""

from __future__ import annotations

import random
import struct
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from thriftpy2.thrift import TType

from nimbus_thrift.idl import nimbus_idl
from nimbus_thrift.rpc.codec import binary, pydecode
from nimbus_thrift.rpc.codec.decoded import UNLIMITED, Budget
from nimbus_thrift.rpc.errors import BadVersionError, DecodeError

from .binary_cases import encode_cy, h, round_trip_cases, ALL_HEX

#: Values that sit on the edges of what a length, count or type byte may be.
EXTREME_I32 = (0, 1, 2, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 0x7FFFFFFF, 0x80000000,
               0xFFFFFFFF, 0xFFFFFFFE, 0x40000000, 0x10000)
INTERESTING_BYTES = (0x00, 0x01, 0x02, 0x03, 0x04, 0x06, 0x08, 0x0A, 0x0B, 0x0C, 0x0D,
                     0x0E, 0x0F, 0x10, 0x7F, 0x80, 0xFF)
WIRE_TYPES = (TType.BOOL, TType.BYTE, TType.I16, TType.I32, TType.I64, TType.DOUBLE,
              TType.STRING, TType.STRUCT, TType.MAP, TType.SET, TType.LIST)


class FuzzFailure(AssertionError):
    """The decoders disagreed, or one raised what it must not. ``data`` is the input."""

    def __init__(self, message: str, cls: type, data: bytes, budget: int) -> None:
        super().__init__(f"{message}\n  class {cls.__name__}, budget {budget}, "
                         f"{len(data)} bytes: {data.hex()}")
        self.cls = cls
        self.data = data
        self.budget = budget


@dataclass
class Stats:
    cases: int = 0
    decoded: int = 0
    refused: int = 0
    over_budget: int = 0
    mutations: Counter[str] = field(default_factory=Counter)


def seeds(t: ModuleType) -> list[tuple[type, bytes]]:
    """(class, valid encoding) pairs to mutate: every round-trip case of the test IDL
    and a few Nimbus messages."""
    out = [(t.All, h(ALL_HEX))] + [(type(o), encode_cy(o)) for o in round_trip_cases(t)]
    n = nimbus_idl()
    stream = n.GlobalStreamId(componentId="split", streamId="default")
    info = n.TopologyInfo(
        id="wc-1-1", name="wc", uptime_secs=5, status="ACTIVE",
        errors={"split": [n.ErrorInfo(error="boom", error_time_secs=1)]},
        executors=[n.ExecutorSummary(
            executor_info=n.ExecutorInfo(task_start=1, task_end=2), component_id="split",
            host="h", port=1, uptime_secs=3, stats=n.ExecutorStats(
                emitted={":all-time": {"default": 5}}, transferred={}, rate=1.0,
                specific=n.ExecutorSpecificStats(bolt=n.BoltStats(
                    acked={"600": {stream: 2}}, failed={}, process_ms_avg={"600": {stream: 0.5}},
                    executed={}, execute_ms_avg={}))))])
    topology = n.StormTopology(
        spouts={"s": n.SpoutSpec(spout_object=n.ComponentObject(shell=n.ShellComponent(
            execution_command="python", script="a.B")), common=n.ComponentCommon(
                inputs={}, streams={"default": n.StreamInfo(output_fields=["w"],
                                                              direct=False)},
                parallelism_hint=2, json_conf="{}"))},
        bolts={"b": n.Bolt(bolt_object=n.ComponentObject(java_object=n.JavaObject(
            full_class_name="x", args_list=[n.JavaObjectArg(int_arg=1),
                                            n.JavaObjectArg()])),
            common=n.ComponentCommon(inputs={stream: n.Grouping(fields=["w"])},
                                     streams={}))},
        state_spouts={}, worker_hooks=[b"\x00\x01"])
    out += [
        (n.TopologyInfo, encode_cy(info)),
        (n.StormTopology, encode_cy(topology)),
        (n.ClusterSummary, encode_cy(n.ClusterSummary(
            supervisors=[], nimbus_uptime_secs=1, nimbuses=[], topologies=[
                n.TopologySummary(id="a-1-1", name="a", num_tasks=1, num_executors=1,
                                  num_workers=1, uptime_secs=1, status="ACTIVE")]))),
    ]
    return out


# --------------------------------------------------------------------------- mutations


def _flip_bits(rng: random.Random, data: bytearray) -> None:
    for _ in range(rng.randint(1, 8)):
        i = rng.randrange(len(data))
        data[i] ^= 1 << rng.randrange(8)


def _set_bytes(rng: random.Random, data: bytearray) -> None:
    for _ in range(rng.randint(1, 4)):
        data[rng.randrange(len(data))] = rng.choice(INTERESTING_BYTES)


def _truncate(rng: random.Random, data: bytearray) -> None:
    del data[rng.randrange(len(data)):]


def _extreme_length(rng: random.Random, data: bytearray) -> None:
    # Anywhere: most 4-byte windows of a small encoding touch a length or a count.
    if len(data) >= 4:
        i = rng.randrange(len(data) - 3)
        data[i:i + 4] = struct.pack(">I", rng.choice(EXTREME_I32))


def _splice(rng: random.Random, data: bytearray) -> None:
    i = rng.randrange(len(data) + 1)
    data[i:i + rng.randint(0, 4)] = bytes(rng.randrange(256) for _ in range(rng.randint(0, 4)))


def _repeat_region(rng: random.Random, data: bytearray) -> None:
    # Repeating a region nests what it opens (a struct or container header) deeper.
    i = rng.randrange(len(data))
    j = min(len(data), i + rng.randint(1, 8))
    data[i:i] = data[i:j] * rng.randint(2, 80)


def _nested_value(rng: random.Random, depth: int, out: bytearray, ttype: int) -> None:
    """A random value of wire type ``ttype``, nesting containers and structs."""
    if ttype in (TType.BOOL, TType.BYTE):
        out.append(rng.randrange(256))
    elif ttype == TType.I16:
        out += rng.randbytes(2)
    elif ttype == TType.I32:
        out += rng.randbytes(4)
    elif ttype in (TType.I64, TType.DOUBLE):
        out += rng.randbytes(8)
    elif ttype == TType.STRING:
        n = rng.choice((0, 1, 3, 8))
        out += struct.pack(">i", n) + rng.randbytes(n)
    elif depth > 70 or rng.random() < 0.15:      # past MAX_DEPTH, sometimes
        out.append(0)                            # (an empty struct: STOP)
    elif ttype == TType.STRUCT:
        for _ in range(rng.randint(0, 3)):
            ftype = rng.choice(WIRE_TYPES)
            out += struct.pack(">bh", ftype, rng.randint(-2, 30))
            _nested_value(rng, depth + 1, out, ftype)
        out.append(0)
    elif ttype == TType.MAP:
        k, v = rng.choice(WIRE_TYPES), rng.choice(WIRE_TYPES)
        count = rng.randint(0, 3)
        out += struct.pack(">bbi", k, v, count)
        for _ in range(count):
            _nested_value(rng, depth + 1, out, k)
            _nested_value(rng, depth + 1, out, v)
    else:                                        # SET, LIST
        e = rng.choice(WIRE_TYPES)
        count = rng.randint(0, 3)
        out += struct.pack(">bi", e, count)
        for _ in range(count):
            _nested_value(rng, depth + 1, out, e)


def _nested_field(rng: random.Random, data: bytearray) -> None:
    """A field of random nested containers, with a random id, before a seed's STOP."""
    ftype = rng.choice((TType.STRUCT, TType.MAP, TType.SET, TType.LIST))
    value = bytearray(struct.pack(">bh", ftype, rng.randint(0, 24)))
    _nested_value(rng, 0, value, ftype)
    at = len(data) - 1 if data and data[-1] == 0 else len(data)
    data[at:at] = value


MUTATIONS: dict[str, Callable[[random.Random, bytearray], None]] = {
    "flip_bits": _flip_bits, "set_bytes": _set_bytes, "truncate": _truncate,
    "extreme_length": _extreme_length, "splice": _splice, "repeat_region": _repeat_region,
    "nested_field": _nested_field,
}


def mutate(rng: random.Random, data: bytes, stats: Stats) -> bytes:
    out = bytearray(data)
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        if not out:
            break
        name = rng.choice(list(MUTATIONS))
        stats.mutations[name] += 1
        MUTATIONS[name](rng, out)
    return bytes(out)


# --------------------------------------------------------------------------- checks


def _python(cls: type, data: bytes, budget: int) -> Any:
    """(repr, end) or (error type, message); anything but DecodeError propagates."""
    try:
        value, end = pydecode._struct_reader(cls)(data, 0, len(data), 0, Budget(budget))
    except DecodeError as exc:
        return type(exc), str(exc)
    return repr(value), end


def _c(cls: type, data: bytes, budget: int) -> Any:
    plan = binary.c_plan(cls)
    assert plan is not None
    result = binary._wire.decode_struct(plan, data, 0, len(data), budget)
    return None if result is None else (repr(result[0]), result[1])


def _public(cls: type, data: bytes, budget: int) -> Any:
    try:
        value, end = binary.decode_struct(cls, data, budget=budget)
    except DecodeError as exc:
        return type(exc), str(exc)
    return repr(value), end


def check(cls: type, data: bytes, budget: int, stats: Stats) -> None:
    """One case; raises FuzzFailure on any disagreement or unexpected exception."""
    stats.cases += 1
    try:
        python = _python(cls, data, budget)
        c = _c(cls, data, budget)
        public = _public(cls, data, budget)
    except Exception as exc:  # noqa: BLE001 - the point: nothing else may escape
        raise FuzzFailure(f"raised {type(exc).__name__}: {exc}", cls, data, budget) from exc
    refused = isinstance(python[0], type)
    if refused:
        stats.refused += 1
        stats.over_budget += "decoded-size limit" in python[1]
        if c is not None:
            raise FuzzFailure(f"C accepted what Python refused ({python[1]})", cls, data,
                              budget)
    else:
        stats.decoded += 1
        if c != python:
            raise FuzzFailure(f"C gave {c!r}, Python {python!r}", cls, data, budget)
    if public != python:
        raise FuzzFailure(f"decode_struct gave {public!r}, the Python decoder {python!r}",
                          cls, data, budget)


def check_header(message: bytes, stats: Stats) -> None:
    """The C and Python message header readers agree on ``message``, strict or not."""
    stats.cases += 1
    for strict in (False, True):
        try:
            expected = tuple(binary._read_message_header(message, strict))
        except (DecodeError, BadVersionError):
            expected = None
        except Exception as exc:  # noqa: BLE001 - nothing else may escape
            raise FuzzFailure(f"header reader raised {type(exc).__name__}: {exc}",
                              binary.MessageHeader, message, 0) from exc
        if binary._wire.read_message_header(message, strict) != expected:
            raise FuzzFailure(f"message header readers disagree (strict={strict})",
                              binary.MessageHeader, message, 0)


def pick_budget(rng: random.Random, cls: type, data: bytes) -> int:
    roll = rng.random()
    if roll < 0.5:
        return UNLIMITED
    if roll < 0.9:
        return rng.randint(0, 4 * len(data) + 2000)    # around what small frames cost
    return rng.randint(-2, 200)                       # tiny: refused almost at once


def run(t: ModuleType, cases: int, seed: int,
        progress: Callable[[Stats], None] | None = None, every: int = 10_000) -> Stats:
    """``cases`` fuzz cases from ``seed``; raises FuzzFailure on the first failure."""
    rng = random.Random(seed)
    pool = seeds(t)
    stats = Stats()
    for i in range(cases):
        cls, base = rng.choice(pool)
        if rng.random() < 0.1:                   # the message header, mutated with it
            name = rng.choice((b"", b"m", b"submitTopology"))
            head = rng.choice((struct.pack(">Ii", 0x80010001, len(name)) + name,
                               struct.pack(">i", len(name)) + name + b"\x01"))
            check_header(mutate(rng, head + b"\x00\x00\x00\x07" + base[:32], stats),
                         stats)
            continue
        data = mutate(rng, base, stats)
        check(cls, data, pick_budget(rng, cls, data), stats)
        if progress is not None and (i + 1) % every == 0:
            progress(stats)
    return stats


def save_failure(failure: FuzzFailure, folder: Path) -> Path:
    """Write a failing input where it can be replayed (hex, with the class and budget)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"fuzz_failure_{failure.cls.__name__}_{len(failure.data)}.txt"
    path.write_text(f"# class {failure.cls.__name__} budget {failure.budget}\n"
                    f"{failure.data.hex()}\n{failure}\n")
    return path
