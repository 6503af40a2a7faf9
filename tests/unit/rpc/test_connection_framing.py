"""Fakes tier: nimbus_thrift.rpc.connection's framing, driven byte by byte the way the
selector drives it: frames whole, split and pipelined, the lengths refused (and what
they are taken for), the state table, and the one-read fast path. No sockets."""

from __future__ import annotations

import pytest

from nimbus_thrift.rpc.connection import (GROWTH_MIN, SCRATCH_SIZE, TRANSITIONS, Connection,
                                          Event, IllegalTransition, State, classify_prefix)
from nimbus_thrift.rpc.errors import FrameSizeError, NotThriftError
from nimbus_thrift.rpc.memory import MemoryBudget

from support.connection_bytes import (assert_accounted, feed_frame_body, finish_request, frame,
                                      length, resume)


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
