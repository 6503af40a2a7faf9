"""Bytes tier: the incremental scan that finds where an unframed message ends
(rpc/unframed.py), fed whole, one byte at a time and in every split; hostile input
refused as soon as it is seen; and scanning that stays linear however bytes arrive."""

from __future__ import annotations

import random
import time
from types import ModuleType

import pytest

from nimbus_thrift.rpc.codec import binary, compact
from nimbus_thrift.rpc.errors import FrameSizeError
from nimbus_thrift.rpc.codec.pydecode import MAX_DEPTH
from nimbus_thrift.rpc.codec.unframed import Scanner, ScanError
from support.binary_cases import load_cases, round_trip_cases


@pytest.fixture(scope="module")
def t(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    return load_cases(tmp_path_factory.mktemp("idl"))


def encode(protocol: str, obj: object, name: str = "call", seqid: int = 7) -> bytes:
    codec = compact if protocol == "compact" else binary
    return codec.encode_message(name, 1, seqid, obj)


def feed_in(protocol: str, data: bytes, steps: list[int], limit: int = 1 << 24) -> int | None:
    """Feed ``data`` growing by ``steps``; return the end the scanner reported (and
    check it reports nothing before)."""
    scan = Scanner(protocol, limit)
    have = 0
    for step in steps:
        have = min(len(data), have + step)
        end = scan.feed(data, have)
        if end is not None:
            return end
    return None


PROTOCOLS = ["binary", "compact"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_whole_and_one_byte_at_a_time_find_the_same_end(t: ModuleType, protocol: str) -> None:
    for obj in round_trip_cases(t):
        msg = encode(protocol, obj)
        data = msg + b"\x80\x01\x00\x01NEXT"           # the next message's first bytes
        assert feed_in(protocol, data, [len(data)]) == len(msg)
        scan = Scanner(protocol, 1 << 24)
        ends = [scan.feed(data, have) for have in range(1, len(data) + 1)]
        assert ends.index(len(msg)) == len(msg) - 1       # found exactly when it arrived
        assert all(end is None for end in ends[:len(msg) - 1])


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_random_splits_find_the_same_end(t: ModuleType, protocol: str) -> None:
    rng = random.Random(17)
    for obj in round_trip_cases(t):
        msg = encode(protocol, obj)
        for _ in range(20):
            steps = [rng.randint(1, 40) for _ in range(len(msg))]
            assert feed_in(protocol, msg, steps) == len(msg)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_header_name_and_seqid_are_kept_for_error_replies(t: ModuleType, protocol: str
                                                          ) -> None:
    scan = Scanner(protocol, 1 << 20)
    msg = encode(protocol, t.Pair(a=1, b=2), name="getThing", seqid=-3)
    assert scan.feed(msg, len(msg)) == len(msg)
    assert (scan.name, scan.seqid) == ("getThing", -3)


def test_binary_huge_string_refused_before_its_bytes_arrive() -> None:
    head = binary.encode_message("echo", 1, 1, _Empty())[:-1]   # header, no STOP
    data = head + bytes.fromhex("0b0001 7fffffff") + b"abc"
    scan = Scanner("binary", 1 << 20)
    with pytest.raises(FrameSizeError) as excinfo:
        scan.feed(data, len(data))
    assert excinfo.value.limit == 1 << 20 and "string of 2147483647 bytes" in str(excinfo.value)


def test_compact_huge_list_refused_at_its_header() -> None:
    head = compact.encode_message("echo", 1, 1, _Empty())[:-1]
    data = head + bytes.fromhex("19 f5 ffffffff07")          # list<i32> of 2**31-1
    with pytest.raises(FrameSizeError):
        Scanner("compact", 1 << 20).feed(data, len(data))


@pytest.mark.parametrize("protocol, tail, words", [
    ("binary", "0b0001 ffffffff", "negative length"),
    ("binary", "0f0001 0b ffffffff", "negative size"),
    ("binary", "010001", "unknown field type 1"),
    ("compact", "1d", "unknown compact type 13"),
    ("compact", "15 ffffffffffffffffffffff", "longer than 10 bytes"),
    ("compact", "05 ffffffffffff", "longer than 5 bytes"),          # a field id
])
def test_malformed_messages_raise_scan_error(protocol: str, tail: str, words: str) -> None:
    codec = compact if protocol == "compact" else binary
    data = codec.encode_message("m", 1, 1, _Empty())[:-1] + bytes.fromhex(tail.replace(" ", ""))
    with pytest.raises(ScanError, match=words):
        Scanner(protocol, 1 << 20).feed(data, len(data))


@pytest.mark.parametrize("protocol, nest", [("binary", b"\x0c\x00\x01"), ("compact", b"\x1c")])
def test_nesting_is_capped(protocol: str, nest: bytes) -> None:
    codec = compact if protocol == "compact" else binary
    data = codec.encode_message("m", 1, 1, _Empty())[:-1] + nest * (MAX_DEPTH + 2)
    with pytest.raises(ScanError, match="nesting deeper"):
        Scanner(protocol, 1 << 20).feed(data, len(data))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_unfinished_at_the_limit_is_refused(t: ModuleType, protocol: str) -> None:
    msg = encode(protocol, t.Inner(s="x" * 500))
    scan = Scanner(protocol, 100)
    with pytest.raises(FrameSizeError):
        scan.feed(msg, 101)
    # Within the limit it is fine.
    assert Scanner(protocol, len(msg)).feed(msg, len(msg)) == len(msg)


@pytest.mark.parametrize("data", [b"GET / HTTP/1.1\r\n", b"\x00\x00\x00\x10abcd"])
def test_not_a_message_header(data: bytes) -> None:
    with pytest.raises(ScanError, match="not a strict TBinaryProtocol"):
        Scanner("binary", 1 << 20).feed(data, len(data))
    with pytest.raises(ScanError, match="not a TCompactProtocol"):
        Scanner("compact", 1 << 20).feed(data, len(data))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_scanning_byte_by_byte_is_linear(t: ModuleType, protocol: str) -> None:
    """100 KB fed one byte at a time: a scan that restarted from the message's start
    would do ~5e9 steps; resuming does ~1e5 (a second, not hours)."""
    msg = encode(protocol, t.All(tags={str(i) for i in range(10_000)},
                                 blob=b"z" * 40_000))
    assert len(msg) > 80_000
    scan = Scanner(protocol, 1 << 24)
    started = time.process_time()
    end = None
    for have in range(1, len(msg) + 1):
        end = scan.feed(msg, have)
    assert end == len(msg)
    assert time.process_time() - started < 30     # generous: linear takes well under 2


class _Empty:
    thrift_spec: dict[int, tuple[object, ...]] = {}
    default_spec: list[object] = []
