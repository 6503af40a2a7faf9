"""Fakes tier: what a connection holds of the shared read-buffer budget (rpc/memory.py)
and of its address's share (peers.py), driven byte by byte the way the selector drives
it: accounting, parking and admission, buffers that grow with what arrived, and every
way a frame ends giving back what it held. No sockets."""

from __future__ import annotations

import pytest

from nimbus_thrift.rpc.connection import (GROWTH_MIN, SCRATCH_SIZE, Connection, Event,
                                          IllegalTransition, State)
from nimbus_thrift.rpc.deadlines import ParkTimeoutError
from nimbus_thrift.rpc.errors import FrameSizeError, PeerShareError
from nimbus_thrift.rpc.memory import MemoryBudget
from nimbus_thrift.rpc.options import ServerOptions
from nimbus_thrift.rpc.peers import PeerShare

from support.connection_bytes import (assert_accounted, feed_frame_body, finish_request, frame,
                                      grow, length)


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


# --------------------------------------------------------------------------- parking


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
