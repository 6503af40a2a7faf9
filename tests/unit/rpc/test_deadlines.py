"""Fakes tier: the deadlines each connection runs against (rpc/deadlines.py), a pure
function of the connection, the options and made-up times. No sockets."""

from __future__ import annotations

from nimbus_thrift.rpc.connection import Connection, Event, State
from nimbus_thrift.rpc.deadlines import overdue, unread_check_due
from nimbus_thrift.rpc.memory import MemoryBudget
from nimbus_thrift.rpc.options import ServerOptions

from support.connection_bytes import feed_frame_body, length


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
                         first_request_timeout=None, frame_progress_timeout=None)
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
                         first_request_timeout=None, park_timeout=100,
                         frame_progress_timeout=None)
    conn = clocked(opts, fresh=False, frame_started=T0)
    conn.state = State.AWAITING_MEMORY
    conn.parked_at = T0 + 4
    assert overdue(conn, opts, T0 + 50) is None      # parked: only park_timeout runs
    conn.state = State.READING_FRAME
    conn.frame_started += (T0 + 50) - conn.parked_at  # admitted at T0 + 50
    assert overdue(conn, opts, T0 + 55.9) is None    # 4 s before + 5.9 s after
    assert overdue(conn, opts, T0 + 56.1) is not None


def test_a_frame_that_stops_short_is_closed_whatever_it_averaged() -> None:
    """Issue 27: a frame that brought nearly 1 MiB in half a second and then stopped
    16 bytes short met min_frame_rate's average for 1,000 s. The progress rule counts
    from its last bytes: frame_progress_timeout after them, it is late."""
    opts = ServerOptions(frame_progress_timeout=5, first_request_timeout=None)
    conn = clocked(opts, fresh=False, frame_started=T0, last_activity=T0)
    assert conn.received(length(1 << 20) + b"x" * 1000) is Event.FRAME_ADMITTED
    feed_frame_body(conn, b"y" * ((1 << 20) - 1000 - 16), chunk=65536)
    conn.last_activity = T0 + 0.5                     # its last bytes
    late = overdue(conn, opts, T0 + 5.6)
    assert overdue(conn, opts, T0 + 5.4) is None
    assert late is not None and "frame_progress_timeout" in late.reason
    assert f"{(1 << 20) - 16 + 4} of {1 << 20} bytes" in late.reason and not late.park
    # Without the rule, the average since its start is far above min_frame_rate.
    assert overdue(conn, ServerOptions(frame_progress_timeout=None,
                                       first_request_timeout=None), T0 + 29) is None
    # A byte now and then keeps it going (the frame's own clock still bounds it).
    conn.last_activity = T0 + 5.3
    assert overdue(conn, opts, T0 + 10.2) is None


def test_the_progress_rule_covers_a_length_prefix_begun_and_pauses_while_parked() -> None:
    opts = ServerOptions(frame_progress_timeout=3, min_frame_rate=None,
                         first_request_timeout=None, park_timeout=100,
                         frame_read_timeout=None)
    conn = clocked(opts, fresh=False, last_activity=T0, frame_started=T0)
    assert conn.received(b"\x00\x00") is None        # half a length prefix
    assert overdue(conn, opts, T0 + 2.9) is None
    assert overdue(conn, opts, T0 + 3.1) is not None
    # Between frames (no byte of the next one yet) it does not apply: idle_timeout does.
    idle = clocked(opts, fresh=False, last_activity=T0)
    assert overdue(idle, opts, T0 + 60) is None
    # Parked: only park_timeout runs; the selector moves last_activity on by the wait.
    conn.state = State.AWAITING_MEMORY
    conn.parked_at = T0 + 1
    assert overdue(conn, opts, T0 + 50) is None
    conn.state = State.READING_FRAME
    conn.last_activity += (T0 + 50) - conn.parked_at  # admitted at T0 + 50
    assert overdue(conn, opts, T0 + 51.9) is None
    assert overdue(conn, opts, T0 + 52.1) is not None


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
                         write_timeout=None, frame_progress_timeout=None)
    for state in (State.READING_HEADER, State.READING_FRAME, State.AWAITING_MEMORY,
                  State.WRITING):
        conn = clocked(opts, state=state, frame_started=T0, parked_at=T0, write_started=T0)
        assert overdue(conn, opts, T0 + 1e6) is None


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
