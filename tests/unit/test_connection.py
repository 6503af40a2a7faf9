"""Fakes tier: nimbus_thrift.rpc.connection (framing state machine) and memory (the shared
read-buffer budget), driven byte by byte the way the selector drives them. No sockets."""

from __future__ import annotations

import struct

import pytest

from nimbus_thrift.rpc.connection import (SCRATCH_SIZE, TRANSITIONS, Connection, Event,
                                          IllegalTransition, State, classify_prefix)
from nimbus_thrift.rpc.errors import FrameSizeError, NotThriftError
from nimbus_thrift.rpc.memory import MemoryBudget


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def length(n: int) -> bytes:
    return struct.pack(">i", n)


def held_bytes(conn: Connection) -> int:
    """What the connection keeps in memory past length prefixes."""
    return len(conn.frame or b"") + len(conn.leftover) + len(conn.partial)


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
        assert budget.reserved == (0 if i < 3 else 10)  # prefix bytes are not reserved

    assert conn.state is State.READING_FRAME
    assert_accounted(conn)
    done = feed_frame_body(conn, payload, chunk=1)
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
    assert budget.reserved == 100  # 7 received + 93 reserved for the rest
    assert conn.pos == 7
    assert len(conn.frame_view()) == 93
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
    assert budget.reserved == 50  # 20 carried over + 30 reserved for the rest
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
    assert budget.reserved == 300
    feed_frame_body(conn, b"y" * 100, chunk=100)
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
    a.received(length(60))
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
    (b"\x80\x01\x00\x01\x00\x00\x00\x04echo\x00\x00\x00\x01\x00", "unframed TBinaryProtocol"),
    (b"\x82\x21\x00\x04echo\x00", "unframed TCompactProtocol"),
])
def test_other_protocols_are_refused_as_not_thrift(data: bytes, words: str) -> None:
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


def test_parking_and_admission() -> None:
    budget = MemoryBudget(100)
    a = Connection("a", budget, max_frame_size=100)
    b = Connection("b", budget, max_frame_size=100)
    c = Connection("c", budget, max_frame_size=100)

    assert a.received(length(80)) is Event.FRAME_ADMITTED
    assert budget.reserved == 80

    # B reads its header and as much body as the budget allows, then parks.
    assert b.header_read_limit() == 4 + 20
    assert b.received(length(50) + b"b" * 10) is Event.FRAME_PARKED
    assert b.state is State.AWAITING_MEMORY
    assert budget.parked == 1
    assert b.need == 40
    assert b.partial == b"b" * 10
    assert b.frame is None                 # nothing allocated while parked
    assert budget.reserved == 90
    assert_accounted(a, b)

    # While anything is parked, a third connection may read only a length prefix.
    assert budget.free_now() == 0
    assert c.header_read_limit() == 4

    # A's frame completes and its request is done: B is admitted.
    assert feed_frame_body(a, b"a" * 80, chunk=80) == [True]
    finish_request(a)
    assert budget.reserved == 10
    assert budget.admit() == [b]
    assert b.state is State.READING_FRAME
    assert budget.parked == 0
    assert b.need == 0 and b.partial == b""
    assert budget.reserved == 50
    assert b.pos == 10 and len(b.frame_view()) == 40
    assert_accounted(a, b)
    assert c.header_read_limit() == 4 + 50

    assert feed_frame_body(b, b"B" * 40, chunk=40) == [True]
    assert b.frame == bytearray(b"b" * 10 + b"B" * 40)
    finish_request(b)
    for conn in (a, b, c):
        conn.close()
    assert budget.reserved == 0


def test_parked_queue_is_fifo_small_frame_waits_behind_large() -> None:
    budget = MemoryBudget(100)
    a = Connection("a", budget, max_frame_size=100)
    b = Connection("b", budget, max_frame_size=100)
    c = Connection("c", budget, max_frame_size=100)
    assert a.received(length(80)) is Event.FRAME_ADMITTED
    assert b.received(length(90)) is Event.FRAME_PARKED     # 90 > 20 free
    # C's 10 bytes would fit in the 20 free, but B is waiting: C queues behind it.
    assert budget.free_now() == 0
    assert c.received(length(10)) is Event.FRAME_PARKED
    assert budget.parked == 2
    assert budget.reserved == 80
    # Nothing is admitted while the head does not fit, even though C would.
    assert budget.admit() == []
    assert c.state is State.AWAITING_MEMORY

    a.close()
    assert budget.reserved == 0
    # B (90) goes first; C (10) then fits too: both, in arrival order.
    assert budget.admit() == [b, c]
    assert b.state is c.state is State.READING_FRAME
    assert budget.reserved == 100
    assert_accounted(a, b, c)
    for conn in (b, c):
        conn.close()
    assert budget.reserved == 0


def test_admit_stops_at_the_first_waiter_that_does_not_fit() -> None:
    budget = MemoryBudget(100)
    a, b, c = (Connection(p, budget, max_frame_size=100) for p in "abc")
    assert a.received(length(60)) is Event.FRAME_ADMITTED
    assert b.received(length(50)) is Event.FRAME_PARKED
    assert c.received(length(55)) is Event.FRAME_PARKED
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


def test_close_while_parked_unparks_and_releases_partial() -> None:
    budget = MemoryBudget(100)
    a, b, c = (Connection(p, budget, max_frame_size=100) for p in "abc")
    a.received(length(80))
    assert b.received(length(60) + b"x" * 20) is Event.FRAME_PARKED
    assert c.received(length(10)) is Event.FRAME_PARKED
    assert budget.reserved == 100
    assert b.close() == 20
    assert budget.parked == 1
    assert budget.reserved == 80
    # With B gone, C is at the head and fits in what is free.
    assert budget.admit() == [c]
    assert budget.reserved == 90
    assert_accounted(a, b, c)
    a.close()
    c.close()
    assert budget.reserved == 0


def test_close_after_refusal_while_others_parked() -> None:
    budget = MemoryBudget(100)
    a, b, c = (Connection(p, budget, max_frame_size=100) for p in "abc")
    a.received(length(90))
    assert b.received(length(50)) is Event.FRAME_PARKED
    assert c.received(length(500)) is Event.REFUSED
    c.close()
    assert budget.parked == 1 and budget.reserved == 90
    a.close()
    b.close()
    assert budget.reserved == 0 and budget.parked == 0


# --------------------------------------------------------------------------- the table

EXPECTED_TRANSITIONS = {
    (State.READING_HEADER, Event.FRAME_ADMITTED): State.READING_FRAME,
    (State.READING_HEADER, Event.FRAME_PARKED): State.AWAITING_MEMORY,
    (State.READING_HEADER, Event.REFUSED): State.LINGERING,
    (State.AWAITING_MEMORY, Event.MEMORY_GRANTED): State.READING_FRAME,
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
