"""Fakes tier: nimbus_thrift.rpc.connection (framing state machine) and memory (the shared
read-buffer budget), driven byte by byte the way the selector drives them, and the
deadlines each connection runs against (deadlines.py), with made-up times. No sockets."""

from __future__ import annotations

import struct

import pytest

from nimbus_thrift.rpc.connection import (GROWTH_MIN, SCRATCH_SIZE, TRANSITIONS, Connection,
                                          Event, IllegalTransition, State, classify_prefix)
from nimbus_thrift.rpc.deadlines import ParkTimeoutError, overdue, unread_check_due
from nimbus_thrift.rpc.errors import FrameSizeError, NotThriftError, PeerShareError
from nimbus_thrift.rpc.memory import MemoryBudget
from nimbus_thrift.rpc.options import ServerOptions
from nimbus_thrift.rpc.peers import PeerShare
from nimbus_thrift.rpc.throttle import LogThrottle


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def length(n: int) -> bytes:
    return struct.pack(">i", n)


def held_bytes(conn: Connection) -> int:
    """What the connection keeps in memory past length prefixes."""
    return len(conn.frame or b"") + len(conn.leftover)


def assert_accounted(conn: Connection, *others: Connection) -> None:
    """The budget holds exactly what the connections hold."""
    conns = (conn, *others)
    for c in conns:
        if c.state is not State.LINGERING:
            assert c.held == held_bytes(c), c
    assert conn.budget.reserved == sum(c.held for c in conns)


def feed_frame_body(conn: Connection, body: bytes, chunk: int) -> list[bool]:
    """Fill the current frame through frame_view(), ``chunk`` bytes per 'recv'."""
    results = []
    while body:
        view = conn.frame_view()
        assert view is not None, "the frame parked"
        n = min(chunk, len(view), len(body))
        view[:n] = body[:n]
        body = body[n:]
        results.append(conn.frame_bytes_received(n))
    return results


def finish_request(conn: Connection) -> None:
    """What the server does when the outcome comes back and the reply goes out."""
    conn.request_done()
    conn.advance(Event.REPLY_READY)
    conn.advance(Event.REPLY_SENT)


def resume(conn: Connection) -> Event | None:
    """The selector's _resume_reading: feed bytes already read past the last frame."""
    data, conn.leftover = conn.leftover, b""
    return conn.received(data, reserved=True)


# --------------------------------------------------------------------------- framing


def test_frame_one_byte_at_a_time() -> None:
    budget = MemoryBudget(1000)
    conn = Connection("p", budget, max_frame_size=1000)
    payload = bytes(range(10))
    wire = frame(payload)

    for i, byte in enumerate(wire[:4]):
        assert conn.state is State.READING_HEADER
        limit = conn.header_read_limit()
        assert limit == 4 - i + min(SCRATCH_SIZE, 1000)
        assert limit >= 1
        event = conn.received(bytes([byte]))
        assert event is (None if i < 3 else Event.FRAME_ADMITTED)
        assert conn.mid_frame
        assert budget.reserved == 0  # prefix bytes are not reserved, nor undelivered body

    assert conn.state is State.READING_FRAME
    assert_accounted(conn)
    done = feed_frame_body(conn, payload, chunk=1)
    assert budget.reserved == 10   # the first growth: GROWTH_MIN, capped at the length
    assert done == [False] * 9 + [True]
    assert conn.state is State.PROCESSING
    assert bytes(conn.frame) == payload
    assert not conn.mid_frame
    assert budget.reserved == 10 == conn.held

    finish_request(conn)
    assert conn.frame is None
    assert budget.reserved == 0 == conn.held
    assert conn.state is State.READING_HEADER
    assert conn.close() == 0
    assert budget.reserved == 0
    assert conn.state is State.CLOSED


def test_whole_frame_in_one_read() -> None:
    budget = MemoryBudget(1000)
    conn = Connection("p", budget, max_frame_size=1000)
    payload = b"\x80\x01\x00\x01hello"
    assert conn.received(frame(payload)) is Event.FRAME_COMPLETE
    assert conn.state is State.PROCESSING
    assert conn.frame == payload
    assert conn.leftover == b""
    assert budget.reserved == len(payload)
    assert_accounted(conn)
    finish_request(conn)
    assert budget.reserved == 0
    conn.close()
    assert budget.reserved == 0


def test_frame_in_uneven_chunks_through_frame_view() -> None:
    budget = MemoryBudget(1000)
    conn = Connection("p", budget, max_frame_size=1000)
    payload = bytes(range(100))
    assert conn.received(frame(payload)[:4 + 7]) is Event.FRAME_ADMITTED
    assert budget.reserved == 7    # what arrived, nothing more
    assert conn.pos == 7
    view = conn.frame_view()       # full: grows (GROWTH_MIN, capped at the length)
    assert view is not None and len(view) == 93
    view.release()
    assert budget.reserved == 100
    assert feed_frame_body(conn, payload[7:], chunk=30) == [False, False, False, True]
    assert conn.frame == bytearray(payload)
    assert_accounted(conn)


def test_header_split_over_two_reads() -> None:
    budget = MemoryBudget(1000)
    conn = Connection("p", budget, max_frame_size=1000)
    wire = frame(b"abcdef")
    assert conn.received(wire[:2]) is None
    assert conn.header_read_limit() == 2 + 1000
    assert conn.received(wire[2:]) is Event.FRAME_COMPLETE
    assert conn.frame == b"abcdef"
    assert_accounted(conn)


def test_two_pipelined_frames_in_one_read() -> None:
    budget = MemoryBudget(1000)
    conn = Connection("p", budget, max_frame_size=1000)
    first, second = b"first frame", b"the second one"
    assert conn.received(frame(first) + frame(second)) is Event.FRAME_COMPLETE
    assert conn.frame == first
    assert conn.leftover == frame(second)
    # Everything past the first prefix is reserved, including the second prefix.
    assert budget.reserved == len(first) + 4 + len(second)
    assert_accounted(conn)

    finish_request(conn)
    assert budget.reserved == 4 + len(second)
    assert_accounted(conn)

    assert resume(conn) is Event.FRAME_COMPLETE
    assert conn.frame == second
    assert conn.leftover == b""
    assert budget.reserved == len(second)
    assert_accounted(conn)

    finish_request(conn)
    assert budget.reserved == 0
    conn.close()
    assert budget.reserved == 0


def test_pipelined_second_frame_partly_read() -> None:
    budget = MemoryBudget(1000)
    conn = Connection("p", budget, max_frame_size=1000)
    second = bytes(range(50))
    assert conn.received(frame(b"x") + frame(second)[:4 + 20]) is Event.FRAME_COMPLETE
    finish_request(conn)
    assert resume(conn) is Event.FRAME_ADMITTED
    assert conn.state is State.READING_FRAME
    assert budget.reserved == 20  # the 20 carried over
    assert_accounted(conn)
    assert feed_frame_body(conn, second[20:], chunk=100) == [True]
    assert conn.frame == bytearray(second)
    finish_request(conn)
    assert budget.reserved == 0


@pytest.mark.parametrize("cut", [1, 2, 3])
def test_pipelined_second_header_split(cut: int) -> None:
    budget = MemoryBudget(1000)
    conn = Connection("p", budget, max_frame_size=1000)
    second = frame(b"tail")
    assert conn.received(frame(b"head") + second[:cut]) is Event.FRAME_COMPLETE
    assert budget.reserved == 4 + cut
    finish_request(conn)
    assert resume(conn) is None           # only part of a length prefix
    assert budget.reserved == 0 == conn.held  # prefix bytes are not reserved
    assert conn.mid_frame
    assert conn.received(second[cut:]) is Event.FRAME_COMPLETE
    assert conn.frame == b"tail"
    assert budget.reserved == 4


def test_pipelined_second_frame_refused_releases_everything() -> None:
    budget = MemoryBudget(1000)
    conn = Connection("p", budget, max_frame_size=100)
    assert conn.received(frame(b"ok") + length(5000) + b"junk") is Event.FRAME_COMPLETE
    finish_request(conn)
    assert budget.reserved == 8
    assert resume(conn) is Event.REFUSED
    assert isinstance(conn.refusal, FrameSizeError)
    assert conn.state is State.LINGERING
    assert budget.reserved == 0 == conn.held
    conn.close()
    assert budget.reserved == 0


# --------------------------------------------------------------------------- accounting


def test_close_mid_frame_releases_the_whole_reservation() -> None:
    budget = MemoryBudget(1000)
    conn = Connection("p", budget, max_frame_size=1000)
    assert conn.received(length(300) + b"x" * 10) is Event.FRAME_ADMITTED
    assert budget.reserved == 10
    feed_frame_body(conn, b"y" * 100, chunk=100)
    assert budget.reserved == 300   # grown to the (small) declared length
    assert conn.close() == 300
    assert budget.reserved == 0 == conn.held
    assert conn.frame is None
    assert conn.state is State.CLOSED


def test_close_while_processing_then_late_request_done() -> None:
    budget = MemoryBudget(1000)
    conn = Connection("p", budget, max_frame_size=1000)
    conn.received(frame(b"abc") + b"\x00\x00")   # a frame and 2 pipelined bytes
    assert budget.reserved == 5
    assert conn.close() == 5
    assert budget.reserved == 0
    conn.request_done()  # the worker's outcome arrives after the peer left
    assert budget.reserved == 0 == conn.held


def test_close_is_idempotent() -> None:
    budget = MemoryBudget(1000)
    conn = Connection("p", budget, max_frame_size=1000)
    conn.received(frame(b"abc"))
    assert conn.close() == 3
    assert conn.close() == 0
    assert budget.reserved == 0
    assert conn.state is State.CLOSED


def test_request_done_twice_releases_once() -> None:
    budget = MemoryBudget(1000)
    conn = Connection("p", budget, max_frame_size=1000)
    conn.received(frame(b"abc"))
    other = Connection("q", budget, max_frame_size=1000)
    other.received(frame(b"defg"))
    conn.request_done()
    conn.request_done()
    assert budget.reserved == 4
    assert_accounted(conn, other)


def test_release_more_than_reserved_is_a_bug() -> None:
    budget = MemoryBudget(10)
    budget.force_reserve(3)
    with pytest.raises(AssertionError):
        budget.release(4)
    with pytest.raises(AssertionError):
        budget.release(-1)
    assert budget.reserved == 3


def test_budget_peak_and_capacity() -> None:
    budget = MemoryBudget(100)
    assert budget.try_reserve(60)
    assert not budget.try_reserve(41)
    assert budget.try_reserve(40)
    budget.release(100)
    assert (budget.reserved, budget.peak) == (0, 100)
    with pytest.raises(ValueError):
        budget.try_reserve(-1)
    with pytest.raises(ValueError):
        MemoryBudget(0)


def test_header_read_limit_caps_speculative_bytes_at_free_budget() -> None:
    budget = MemoryBudget(100)
    a = Connection("a", budget, max_frame_size=100)
    b = Connection("b", budget, max_frame_size=100)
    assert b.header_read_limit() == 4 + 100
    a.received(length(60) + b"x" * 10)
    assert b.header_read_limit() == 4 + 90
    view = a.frame_view()
    assert view is not None
    view.release()
    assert b.header_read_limit() == 4 + 40
    big = MemoryBudget(10 * SCRATCH_SIZE)
    c = Connection("c", big, max_frame_size=10 * SCRATCH_SIZE)
    assert c.header_read_limit() == 4 + SCRATCH_SIZE


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("size, error, limit", [
    (-16, NotThriftError, None),
    (-1, NotThriftError, None),
    (0, NotThriftError, None),
    (1001, FrameSizeError, 1000),          # over max_frame_size
    (2**31 - 1, FrameSizeError, 1000),
    (600, FrameSizeError, 500),            # fits the frame cap, not the whole budget
])
def test_refused_frame_lengths(size: int, error: type, limit: int | None) -> None:
    budget = MemoryBudget(500)
    conn = Connection("p", budget, max_frame_size=1000)
    event = conn.received(length(size) + b"\x80\x01\x00\x01 method name")
    assert event is Event.REFUSED
    assert conn.state is State.LINGERING
    assert isinstance(conn.refusal, error)
    if error is FrameSizeError:
        assert conn.refusal.size == size
        assert conn.refusal.limit == limit
        assert str(size) in str(conn.refusal) and str(limit) in str(conn.refusal)
    else:
        assert conn.refusal.first_bytes == length(size)
    # Nothing allocated, nothing left reserved.
    assert conn.frame is None
    assert budget.reserved == 0 == conn.held
    assert budget.parked == 0
    conn.close()
    assert conn.state is State.CLOSED
    assert budget.reserved == 0


def test_largest_acceptable_frame_is_admitted() -> None:
    budget = MemoryBudget(500)
    conn = Connection("p", budget, max_frame_size=500)
    assert conn.received(length(500)) is Event.FRAME_ADMITTED
    assert budget.reserved == 0
    assert feed_frame_body(conn, b"z" * 500, chunk=500) == [True]
    assert budget.reserved == 500


@pytest.mark.parametrize("first4, words", [
    (b"POST", "HTTP"),
    (b"GET ", "HTTP"),
    (b"PRI ", "HTTP"),
    (b"\x16\x03\x01\x02", "TLS"),
    (b"\x80\x01\x00\x01", "unframed TBinaryProtocol"),
    (b"\x80\x01\x00\x04", "unframed TBinaryProtocol"),
    (b"\x82\x21\x00\x04", "unframed TCompactProtocol"),
    (b"\x82\x81\x05\x04", "unframed TCompactProtocol"),   # ONEWAY, seqid 5
    (b"\x01\x00\x00\x00", "SASL"),
])
def test_classify_prefix(first4: bytes, words: str) -> None:
    kind = classify_prefix(first4)
    assert kind is not None and words in kind


@pytest.mark.parametrize("first4", [
    b"\x00\x00\x00\x10", b"\x00\x00\x01\x00", b"\x7f\xff\xff\xff", b"\x80\x02\x00\x01",
    b"\x82\x22\x00\x00", b"\x16\x02\x00\x00",
])
def test_classify_prefix_none(first4: bytes) -> None:
    assert classify_prefix(first4) is None


@pytest.mark.parametrize("data, words", [
    (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "HTTP"),
    (b"POST /rpc HTTP/1.1\r\n", "HTTP"),
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", "TLS"),
])
def test_other_protocols_are_refused_as_not_thrift(data: bytes, words: str) -> None:
    # (Unframed Thrift is served since issue 17: tests/unit/rpc/test_forms_connection.py.)
    budget = MemoryBudget(1 << 20)
    conn = Connection("p", budget, max_frame_size=16_384_000)
    assert conn.received(data) is Event.REFUSED
    assert isinstance(conn.refusal, NotThriftError)
    assert words in conn.refusal.kind
    assert conn.refusal.first_bytes == data[:4]
    assert conn.frame is None
    assert budget.reserved == 0
    conn.close()
    assert budget.reserved == 0


# --------------------------------------------------------------------------- parking


def grow(conn: Connection) -> bool:
    """What the selector's _fill does before a recv: True if the buffer has room (grown
    if it had to be), False if the frame parked instead."""
    view = conn.frame_view()
    if view is None:
        return False
    view.release()
    return True


def test_parking_and_admission() -> None:
    budget = MemoryBudget(100)
    a = Connection("a", budget, max_frame_size=100)
    b = Connection("b", budget, max_frame_size=100)
    c = Connection("c", budget, max_frame_size=100)

    assert a.received(length(80) + b"a" * 10) is Event.FRAME_ADMITTED
    assert grow(a)
    assert budget.reserved == 80

    # B reads its header and as much body as the budget allows; growing does not fit:
    # B parks for everything it still needs.
    assert b.header_read_limit() == 4 + 20
    assert b.received(length(50) + b"b" * 20) is Event.FRAME_ADMITTED
    assert not grow(b)
    assert b.state is State.AWAITING_MEMORY
    assert budget.parked == 1
    assert b.need == 30
    assert bytes(b.frame) == b"b" * 20      # what arrived, kept (and reserved)
    assert budget.reserved == 100
    assert_accounted(a, b)

    # While anything is parked, a third connection may read only a length prefix.
    assert budget.free_now() == 0
    assert c.header_read_limit() == 4

    # A's frame completes and its request is done: B is admitted, to its whole length.
    assert feed_frame_body(a, b"a" * 70, chunk=70) == [True]
    finish_request(a)
    assert budget.reserved == 20
    assert budget.admit() == [b]
    assert b.state is State.READING_FRAME
    assert budget.parked == 0
    assert b.need == 0
    assert budget.reserved == 50
    assert b.pos == 20 and len(b.frame) == 50
    assert_accounted(a, b)
    assert c.header_read_limit() == 4 + 50

    assert feed_frame_body(b, b"B" * 30, chunk=30) == [True]
    assert b.frame == bytearray(b"b" * 20 + b"B" * 30)
    finish_request(b)
    for conn in (a, b, c):
        conn.close()
    assert budget.reserved == 0


def test_parked_queue_is_fifo_small_frame_waits_behind_large() -> None:
    budget = MemoryBudget(100)
    a = Connection("a", budget, max_frame_size=100)
    b = Connection("b", budget, max_frame_size=100)
    c = Connection("c", budget, max_frame_size=100)
    assert a.received(length(80) + b"a" * 80)  is Event.FRAME_COMPLETE
    assert b.received(length(90)) is Event.FRAME_ADMITTED
    assert not grow(b)                      # 64 KiB step capped at 90 > 20 free
    # C's 10 bytes would fit in the 20 free, but B is waiting: C queues behind it.
    assert budget.free_now() == 0
    assert c.received(length(10)) is Event.FRAME_ADMITTED
    assert not grow(c)
    assert budget.parked == 2
    assert budget.reserved == 80
    # Nothing is admitted while the head does not fit, even though C would.
    assert budget.admit() == []
    assert c.state is State.AWAITING_MEMORY

    finish_request(a)
    assert budget.reserved == 0
    # B (90) goes first; C (10) then fits too: both, in arrival order.
    assert budget.admit() == [b, c]
    assert b.state is c.state is State.READING_FRAME
    assert budget.reserved == 100
    assert_accounted(a, b, c)
    for conn in (a, b, c):
        conn.close()
    assert budget.reserved == 0


def test_admit_stops_at_the_first_waiter_that_does_not_fit() -> None:
    budget = MemoryBudget(100)
    a, b, c = (Connection(p, budget, max_frame_size=100) for p in "abc")
    assert a.received(frame(b"a" * 60)) is Event.FRAME_COMPLETE
    assert b.received(length(50)) is Event.FRAME_ADMITTED
    assert not grow(b)
    assert c.received(length(55)) is Event.FRAME_ADMITTED
    assert not grow(c)
    a.close()
    assert budget.admit() == [b]           # 50 + 55 > 100: C keeps waiting
    assert budget.parked == 1
    assert c.state is State.AWAITING_MEMORY
    assert c.header_read_limit() == 4
    b.close()
    assert budget.admit() == [c]
    assert budget.reserved == 55
    c.close()
    assert budget.reserved == 0


def test_close_while_parked_unparks_and_releases_what_arrived() -> None:
    budget = MemoryBudget(100)
    a, b, c = (Connection(p, budget, max_frame_size=100) for p in "abc")
    assert a.received(frame(b"a" * 70)) is Event.FRAME_COMPLETE
    assert b.received(length(60) + b"x" * 20) is Event.FRAME_ADMITTED
    assert not grow(b)
    assert c.received(length(10)) is Event.FRAME_ADMITTED
    assert not grow(c)
    assert budget.reserved == 90
    assert b.close() == 20
    assert budget.parked == 1
    assert budget.reserved == 70
    # With B gone, C is at the head and fits in what is free.
    assert budget.admit() == [c]
    assert budget.reserved == 80
    assert_accounted(a, b, c)
    a.close()
    c.close()
    assert budget.reserved == 0


def test_close_after_refusal_while_others_parked() -> None:
    budget = MemoryBudget(100)
    a, b, c = (Connection(p, budget, max_frame_size=100) for p in "abc")
    a.received(frame(b"a" * 90))
    assert b.received(length(50)) is Event.FRAME_ADMITTED
    assert not grow(b)
    assert c.received(length(500)) is Event.REFUSED
    c.close()
    assert budget.parked == 1 and budget.reserved == 90
    a.close()
    b.close()
    assert budget.reserved == 0 and budget.parked == 0


# --------------------------------------------------------------------------- charging


def test_declared_frames_that_send_nothing_hold_nothing() -> None:
    """Row 3 of issue 13: 260 connections declaring 1,000,000 bytes and sending nothing
    held 260 MB (reserved and zero-filled up front)."""
    budget = MemoryBudget(256 << 20)
    conns = [Connection(f"p{i}", budget, max_frame_size=16_384_000) for i in range(260)]
    for conn in conns:
        assert conn.received(length(1_000_000)) is Event.FRAME_ADMITTED
        assert conn.state is State.READING_FRAME
    assert budget.reserved == 0
    assert all(len(conn.frame) == 0 for conn in conns)
    # A byte each: each holds one growth step, not its declared megabyte.
    for conn in conns:
        assert feed_frame_body(conn, b"x", chunk=1) == [False]
    assert budget.reserved == 260 * GROWTH_MIN
    assert_accounted(*conns)
    for conn in conns:
        conn.close()
    assert budget.reserved == 0


@pytest.mark.parametrize("chunk", [1, 1000, 4096, GROWTH_MIN, 100_000])
def test_frame_buffer_grows_with_what_arrived(chunk: int) -> None:
    """Held is never more than twice what arrived, or one growth step, whatever the
    read sizes; the frame still comes out byte for byte."""
    size = 1_000_000
    budget = MemoryBudget(4 << 20)
    conn = Connection("p", budget, max_frame_size=size)
    body = bytes(range(256)) * (size // 256) + bytes(size % 256)
    assert conn.received(length(size) + body[:10]) is Event.FRAME_ADMITTED
    assert budget.reserved == 10
    fed = 10
    while fed < size:
        view = conn.frame_view()
        assert view is not None
        n = min(chunk, len(view), size - fed)
        view[:n] = body[fed:fed + n]
        view.release()
        fed += n
        done = conn.frame_bytes_received(n)
        assert conn.held <= max(GROWTH_MIN, 2 * fed), (fed, conn.held)
        assert_accounted(conn)
    assert done and conn.state is State.PROCESSING
    assert bytes(conn.frame) == body
    assert budget.reserved == size
    finish_request(conn)
    assert budget.reserved == 0


def test_admitted_parked_frame_reads_to_its_end_without_parking_again() -> None:
    budget = MemoryBudget(200_000)
    hog = Connection("hog", budget, max_frame_size=200_000)
    assert hog.received(frame(b"h" * 150_000)) is Event.FRAME_COMPLETE
    big = Connection("big", budget, max_frame_size=200_000)
    assert big.received(length(180_000) + b"b" * 40_000) is Event.FRAME_ADMITTED
    assert not grow(big)
    assert big.need == 140_000                # everything it still needs
    finish_request(hog)
    assert budget.admit() == [big]
    assert len(big.frame) == 180_000
    assert feed_frame_body(big, b"B" * 140_000, chunk=7) [-1] is True
    assert budget.parked == 0
    finish_request(big)
    assert budget.reserved == 0


def test_parked_frames_holding_everything_admit_the_oldest_over_capacity() -> None:
    """Frames in progress hold part of what they declared; when every reserved byte
    belongs to a parked frame nothing would ever be released, so the oldest is admitted
    over capacity (at most one frame over), and the rest follow as it completes."""
    budget = MemoryBudget(100)
    a, b = (Connection(p, budget, max_frame_size=100) for p in "ab")
    assert a.received(length(80) + b"a" * 64) is Event.FRAME_ADMITTED
    assert b.header_read_limit() == 4 + 36
    assert b.received(length(80) + b"b" * 36) is Event.FRAME_ADMITTED
    assert not grow(a) and not grow(b)       # each needs what the other holds
    assert budget.reserved == 100 and budget.parked == 2
    assert budget.admit() == [a]             # A first: it parked first
    assert budget.overcommits == 1
    assert budget.reserved == 116 and budget.parked == 1
    assert budget.free_now() == 0            # nobody else grows meanwhile
    assert budget.admit() == []              # B waits for A's memory, not over capacity
    assert feed_frame_body(a, b"A" * 16, chunk=16) == [True]
    finish_request(a)
    assert budget.admit() == [b]
    assert budget.overcommits == 1 and budget.reserved == 80
    b.close()
    a.close()
    assert budget.reserved == 0


def test_park_timeout_refusal_releases_and_names_the_call() -> None:
    budget = MemoryBudget(200)
    hog = Connection("hog", budget, max_frame_size=200)
    assert hog.received(frame(b"h" * 150)) is Event.FRAME_COMPLETE
    conn = Connection("p", budget, max_frame_size=200)
    header = b"\x80\x01\x00\x01\x00\x00\x00\x04echo\x00\x00\x00\x2a"
    assert conn.received(length(120) + header + b"x" * 20) is Event.FRAME_ADMITTED
    assert not grow(conn)
    assert budget.parked == 1 and budget.reserved == 150 + len(header) + 20
    error = ParkTimeoutError(120, conn.pos, 10.0, 200)
    conn.refuse_parked(error)
    assert conn.state is State.LINGERING
    assert conn.refusal is error
    assert conn.refused_call == ("echo", 42)
    assert budget.parked == 0 and budget.reserved == 150 and conn.held == 0
    assert "park_timeout (10s)" in str(error) and "120" in str(error)
    # The hog's release admits nobody (the refused frame left the queue).
    finish_request(hog)
    assert budget.admit() == [] and budget.reserved == 0
    conn.close()
    assert budget.reserved == 0
    with pytest.raises(IllegalTransition):
        hog.refuse_parked(error)


# --------------------------------------------------------------------------- the table

EXPECTED_TRANSITIONS = {
    (State.HANDSHAKING, Event.HANDSHAKE_DONE): State.READING_HEADER,
    (State.READING_HEADER, Event.FRAME_ADMITTED): State.READING_FRAME,
    (State.READING_HEADER, Event.REFUSED): State.LINGERING,
    (State.READING_FRAME, Event.FRAME_PARKED): State.AWAITING_MEMORY,
    (State.AWAITING_MEMORY, Event.MEMORY_GRANTED): State.READING_FRAME,
    (State.AWAITING_MEMORY, Event.REFUSED): State.LINGERING,
    (State.READING_FRAME, Event.FRAME_COMPLETE): State.PROCESSING,
    (State.PROCESSING, Event.REPLY_READY): State.WRITING,
    (State.PROCESSING, Event.OVERLOADED): State.WRITING,
    (State.PROCESSING, Event.NO_REPLY): State.READING_HEADER,
    (State.WRITING, Event.REPLY_SENT): State.READING_HEADER,
}


def test_transition_table_is_the_documented_one() -> None:
    others = {k: v for k, v in TRANSITIONS.items() if k[1] is not Event.CLOSE}
    assert others == EXPECTED_TRANSITIONS
    closes = {k[0]: v for k, v in TRANSITIONS.items() if k[1] is Event.CLOSE}
    assert closes == {s: State.CLOSED for s in State if s is not State.CLOSED}


@pytest.mark.parametrize("state", list(State))
@pytest.mark.parametrize("event", list(Event))
def test_every_state_event_pair(state: State, event: Event) -> None:
    conn = Connection("p", MemoryBudget(10), max_frame_size=10)
    conn.state = state
    if (state, event) in TRANSITIONS:
        assert conn.advance(event) is TRANSITIONS[(state, event)]
        assert conn.state is TRANSITIONS[(state, event)]
    else:
        with pytest.raises(IllegalTransition, match=f"{state.name}.*{event.name}"):
            conn.advance(event)
        assert conn.state is state  # a refused transition changes nothing
    if event is Event.CLOSE:
        assert ((state, event) in TRANSITIONS) == (state is not State.CLOSED)


def test_illegal_transition_from_the_api() -> None:
    conn = Connection("p", MemoryBudget(100), max_frame_size=100)
    with pytest.raises(IllegalTransition):
        conn.memory_granted()       # never parked
    conn = Connection("p", MemoryBudget(100), max_frame_size=100)
    conn.received(frame(b"abc"))
    with pytest.raises(IllegalTransition):
        conn.received(frame(b"more"))  # PROCESSING reads nothing


# --------------------------------------------------------------------------- deadlines
# overdue() is a pure function of the connection, the options and the time: these drive
# it with made-up times, as the selector's sweep would with the real clock.

T0 = 1000.0


def clocked(opts: ServerOptions, **fields: object) -> Connection:
    conn = Connection("p", MemoryBudget(1 << 20), max_frame_size=opts.max_frame_size, now=T0)
    for name, value in fields.items():
        setattr(conn, name, value)
    return conn


def test_first_request_deadline_then_idle_deadline() -> None:
    opts = ServerOptions(first_request_timeout=5, idle_timeout=60)
    conn = clocked(opts)
    assert overdue(conn, opts, T0 + 4.9) is None
    late = overdue(conn, opts, T0 + 5.1)
    assert late is not None and "first_request_timeout (5s)" in late.reason
    assert not late.park
    # After a first request the long idle clock applies instead.
    conn.fresh = False
    conn.last_activity = T0 + 1
    assert overdue(conn, opts, T0 + 60) is None
    late = overdue(conn, opts, T0 + 61.5)
    assert late is not None and "idle_timeout" in late.reason


def test_first_request_deadline_covers_a_first_frame_in_progress() -> None:
    opts = ServerOptions(first_request_timeout=5, min_frame_rate=None)
    conn = clocked(opts)
    assert conn.received(length(100) + b"x" * 10) is Event.FRAME_ADMITTED
    conn.frame_started = T0 + 1
    assert overdue(conn, opts, T0 + 4) is None
    late = overdue(conn, opts, T0 + 5.5)
    assert late is not None and "first request" in late.reason and "14 of 100" in late.reason


def test_a_trickle_does_not_reset_the_frames_clock() -> None:
    """The issue's weak test trickled for no longer than the timeout: this trickles a
    byte a second for three times frame_read_timeout, and the frame is late once its
    first byte is older than the timeout, however recent the last one."""
    opts = ServerOptions(frame_read_timeout=10, min_frame_rate=None,
                         first_request_timeout=None)
    conn = clocked(opts, fresh=False)
    conn.frame_started = T0
    assert conn.received(length(1000) + b"x") is Event.FRAME_ADMITTED
    late_at = None
    for second in range(1, 31):
        feed_frame_body(conn, b"t", chunk=1)
        conn.last_activity = T0 + second
        if late_at is None and overdue(conn, opts, T0 + second + 0.5) is not None:
            late_at = second
    assert late_at == 10
    reason = overdue(conn, opts, T0 + 30.5)
    assert reason is not None and "frame_read_timeout" in reason.reason


def test_rate_rule_closes_a_drip_after_the_grace_period() -> None:
    opts = ServerOptions(min_frame_rate=1000, frame_rate_grace=5, frame_read_timeout=None,
                         first_request_timeout=None)
    conn = clocked(opts, fresh=False, frame_started=T0)
    assert conn.received(length(1_000_000) + b"x" * 96) is Event.FRAME_ADMITTED
    assert overdue(conn, opts, T0 + 5) is None      # grace
    # 100 bytes received: enough until 0.1 s past the grace period, not after.
    assert overdue(conn, opts, T0 + 5.09) is None
    late = overdue(conn, opts, T0 + 5.2)
    assert late is not None and "min_frame_rate (1000 bytes/s" in late.reason
    # A client keeping up with the rate is left alone.
    feed_frame_body(conn, b"y" * 10_000, chunk=4096)
    assert overdue(conn, opts, T0 + 15) is None
    assert overdue(conn, opts, T0 + 15.2) is not None


def test_rate_rule_counts_a_length_prefix_dripped_byte_by_byte() -> None:
    opts = ServerOptions(min_frame_rate=1, frame_rate_grace=2, first_request_timeout=None)
    conn = clocked(opts, fresh=False, frame_started=T0)
    assert conn.received(b"\x00") is None
    assert conn.received_in_frame() == 1
    assert overdue(conn, opts, T0 + 2.5) is None     # 1 byte >= 1 byte/s x 0.5 s
    assert overdue(conn, opts, T0 + 3.5) is not None


def test_rate_rule_and_frame_clock_pause_while_parked() -> None:
    """The selector moves frame_started on by the time a frame waited for memory: the
    wait is not the client's, and the clock is not restarted either."""
    opts = ServerOptions(frame_read_timeout=10, min_frame_rate=None,
                         first_request_timeout=None, park_timeout=100)
    conn = clocked(opts, fresh=False, frame_started=T0)
    conn.state = State.AWAITING_MEMORY
    conn.parked_at = T0 + 4
    assert overdue(conn, opts, T0 + 50) is None      # parked: only park_timeout runs
    conn.state = State.READING_FRAME
    conn.frame_started += (T0 + 50) - conn.parked_at  # admitted at T0 + 50
    assert overdue(conn, opts, T0 + 55.9) is None    # 4 s before + 5.9 s after
    assert overdue(conn, opts, T0 + 56.1) is not None


def test_park_timeout_is_a_refusal() -> None:
    opts = ServerOptions(park_timeout=3)
    conn = clocked(opts, fresh=False, state=State.AWAITING_MEMORY, parked_at=T0)
    assert overdue(conn, opts, T0 + 2.9) is None
    late = overdue(conn, opts, T0 + 3.1)
    assert late is not None and late.park and "park_timeout (3s)" in late.reason


def test_write_deadline_and_unread_reply_check() -> None:
    opts = ServerOptions(write_timeout=4)
    conn = clocked(opts, fresh=False, state=State.WRITING, write_started=T0)
    assert overdue(conn, opts, T0 + 3.9) is None
    late = overdue(conn, opts, T0 + 4.1)
    assert late is not None and "write_timeout" in late.reason
    # Between requests, the kernel's send queue is checked once per quiet spell.
    conn.state = State.READING_HEADER
    conn.last_activity = T0 + 10
    assert not unread_check_due(conn, opts, T0 + 13)
    assert unread_check_due(conn, opts, T0 + 14.5)
    conn.outq_checked = conn.last_activity
    assert not unread_check_due(conn, opts, T0 + 20)
    conn.last_activity = T0 + 21                      # a new reply: check again later
    assert unread_check_due(conn, opts, T0 + 25.5)
    assert not unread_check_due(conn, ServerOptions(write_timeout=None), T0 + 99)


def test_deadlines_off_when_none() -> None:
    opts = ServerOptions(first_request_timeout=None, idle_timeout=None,
                         frame_read_timeout=None, min_frame_rate=None, park_timeout=None,
                         write_timeout=None)
    for state in (State.READING_HEADER, State.READING_FRAME, State.AWAITING_MEMORY,
                  State.WRITING):
        conn = clocked(opts, state=state, frame_started=T0, parked_at=T0, write_started=T0)
        assert overdue(conn, opts, T0 + 1e6) is None


# --------------------------------------------------------------------------- log throttle


def test_log_throttle_one_line_per_key_per_interval_with_a_count() -> None:
    throttle = LogThrottle(interval=10, max_keys=2)
    assert throttle.allow("a", T0) == 0
    assert [throttle.allow("a", T0 + i) for i in range(1, 6)] == [None] * 5
    assert throttle.allow("b", T0 + 1) == 0           # another key: its own window
    assert throttle.allow("a", T0 + 10) == 5          # next line carries the count
    assert throttle.allow("c", T0 + 11) == 0          # over max_keys: shares OTHERS
    assert throttle.allow("d", T0 + 12) is None
    assert len(throttle) == 3
    assert throttle.allow("a", T0 + 12) is None
    assert sorted(throttle.expire(T0 + 30)) == [("(other peers)", 1), ("a", 1)]
    assert len(throttle) == 0


# ------------------------------------------------------------------ per-address share


def test_an_address_declares_at_most_its_share_and_gets_it_back() -> None:
    """max_read_buffer_bytes_per_peer: connections of one address share a PeerShare;
    a frame whose length would take the address past it is refused at its length, and
    every way a frame ends (done, closed, refused while parked) gives its length back."""
    budget = MemoryBudget(1000, peer_share=100)
    share = PeerShare()
    a, b, c = (Connection(f"10.0.0.1:{i}", budget, 1000) for i in range(3))
    for conn in (a, b, c):
        conn.share = share
    assert a.received(length(60) + b"x" * 10) is Event.FRAME_ADMITTED
    assert share.declared == 60
    assert b.received(length(50) + b"y") is Event.REFUSED
    assert isinstance(b.refusal, PeerShareError)
    assert isinstance(b.refusal, FrameSizeError)      # answered like one
    assert (b.refusal.size, b.refusal.limit, b.refusal.in_use) == (50, 100, 60)
    assert "max_read_buffer_bytes_per_peer" in str(b.refusal)
    assert share.declared == 60 and budget.reserved == 10   # b holds nothing
    # Whole frames in one read (the fast path) count too.
    assert c.received(length(40) + b"z" * 40) is Event.FRAME_COMPLETE
    assert share.declared == 100
    c.request_done()
    assert share.declared == 60
    a.close()
    assert share.declared == 0 and budget.reserved == 0
    # A frame refused while parked gives its length back as well.
    d = Connection("10.0.0.1:9", MemoryBudget(50, peer_share=50), 1000)
    d.share = share
    hog = Connection("10.0.0.2:1", d.budget, 1000)
    assert hog.received(length(45) + b"h" * 45) is Event.FRAME_COMPLETE
    assert d.received(length(30) + b"p" * 4) is Event.FRAME_ADMITTED
    # Its 4-byte buffer is full; growing it does not fit beside the hog's 45: parked.
    assert d.frame_view() is None and d.state is State.AWAITING_MEMORY
    assert share.declared == 30
    d.refuse_parked(ParkTimeoutError(30, 4, 1.0, 50))
    assert share.declared == 0


def test_peer_share_defaults_to_a_quarter_of_the_budget_but_one_frame_at_least() -> None:
    assert ServerOptions().peer_read_share == (256 << 20) // 4
    assert ServerOptions(max_read_buffer_bytes=1 << 20, max_frame_size=512 << 10) \
        .peer_read_share == 512 << 10
    assert ServerOptions(max_read_buffer_bytes=100, max_frame_size=1000).peer_read_share == 100
    assert ServerOptions(max_read_buffer_bytes_per_peer=5000).peer_read_share == 5000
    # Never more than the whole budget.
    assert ServerOptions(max_read_buffer_bytes=1000, max_read_buffer_bytes_per_peer=5000) \
        .peer_read_share == 1000


def test_a_tls_handshake_has_its_own_deadline() -> None:
    opts = ServerOptions(handshake_timeout=10.0, first_request_timeout=20.0)
    conn = Connection("p", MemoryBudget(100), max_frame_size=100, now=100.0)
    conn.state = State.HANDSHAKING
    assert overdue(conn, opts, 109.9) is None
    late = overdue(conn, opts, 110.1)
    assert late is not None and "handshake_timeout (10s)" in late.reason and not late.park
    conn.advance(Event.HANDSHAKE_DONE)
    assert conn.state is State.READING_HEADER
    # Done: the first request's clock (from the accept) applies from now on.
    assert overdue(conn, opts, 110.1) is None
    assert overdue(conn, opts, 120.1) is not None


def test_whole_frame_takes_one_read_frame_as_received_would():
    """The selector's fast path (fastio.recv_frame found exactly one whole frame):
    the same state and accounting as the general path, and None wherever the general
    path must look at the bytes."""
    msg = b"\x80\x01\x00\x01\x00\x00\x00\x04echo" + b"\x00" * 8
    general = Connection("p", MemoryBudget(1000), 1000)
    fast = Connection("p", MemoryBudget(1000), 1000)
    # The first message fixes the form: until then only the general path applies.
    assert fast.whole_frame(msg) is None
    for conn in (general, fast):
        assert conn.received(length(len(msg)) + msg) is Event.FRAME_COMPLETE
        conn.answered()
    assert general.received(length(len(msg)) + msg) is Event.FRAME_COMPLETE
    assert fast.whole_frame(msg) is Event.FRAME_COMPLETE
    for attr in ("state", "frame", "size", "pos", "held", "declared"):
        assert getattr(fast, attr) == getattr(general, attr), attr
    assert fast.budget.reserved == general.budget.reserved == len(msg)
    assert fast.share.declared == general.share.declared == len(msg)
    fast.answered()
    assert fast.budget.reserved == 0 and fast.share.declared == 0
    # A length prefix already begun, or a frame over a limit: not this path's.
    fast.hdr = b"\x00"
    assert fast.whole_frame(msg) is None
    fast.hdr = b""
    small = Connection("q", MemoryBudget(1000), 8)
    small.form = fast.form
    assert small.whole_frame(msg) is None and small.state is State.READING_HEADER
    assert small.budget.reserved == 0
