"""Fakes tier: a connection tells its client's form from the first bytes (forms.py,
connection.py) and keeps it; unframed messages are found by the scan as bytes arrive,
one at a time if need be, with the read budget, parking, the size limit and the
per-peer share holding as for frames. Driven the way the selector drives it."""

from __future__ import annotations

import struct
from types import ModuleType

import pytest

from nimbus_thrift.rpc.codec import binary, compact, header
from nimbus_thrift.rpc.connection import GROWTH_MIN, Connection, Event, State
from nimbus_thrift.rpc.errors import FrameSizeError, PeerShareError
from nimbus_thrift.rpc.codec.forms import (FRAMED_BINARY, FRAMED_COMPACT, HEADER, UNFRAMED_BINARY,
                                     UNFRAMED_COMPACT, Message, framed_form, unframed_form)
from nimbus_thrift.rpc.memory import MemoryBudget
from nimbus_thrift.rpc.codec.unframed import ScanError


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def echo_msg(demo: ModuleType, protocol: str, s: str = "x", seqid: int = 1) -> bytes:
    codec = compact if protocol == "compact" else binary
    return codec.encode_message("echo", 1, seqid, demo.Echo.echo_args(s=s))


def feed(conn: Connection, data: bytes, step: int = 1 << 30) -> list[Event | bool | None]:
    """Give ``data`` to ``conn`` ``step`` bytes at a time as the selector would (header
    reads through received(), frame reads into frame_view()); stop at a complete
    request. Returns what each call said."""
    said: list[Event | bool | None] = []
    pos = 0
    while pos < len(data):
        if conn.state is State.READING_HEADER:
            chunk = data[pos:pos + step]
            said.append(conn.received(chunk))
            pos += len(chunk)
        elif conn.state is State.READING_FRAME:
            view = conn.frame_view()
            assert view is not None, "parked"
            chunk = data[pos:pos + min(step, len(view))]
            view[:len(chunk)] = chunk
            view.release()
            pos += len(chunk)
            said.append(conn.frame_bytes_received(len(chunk)))
        else:
            break
    return said


def assert_accounted(conn: Connection) -> None:
    frame = conn.frame
    kept = len(frame.data) if isinstance(frame, Message) else len(frame or b"")
    assert conn.held == kept + len(conn.leftover)
    assert conn.budget.reserved == conn.held


def finish(conn: Connection) -> None:
    conn.request_done()
    conn.advance(Event.REPLY_READY)
    conn.advance(Event.REPLY_SENT)


# --------------------------------------------------------------------------- detection


def test_detection_table() -> None:
    assert unframed_form(b"\x80\x01\x00\x01") is UNFRAMED_BINARY
    assert unframed_form(b"\x82\x21\x00\x04") is UNFRAMED_COMPACT
    assert unframed_form(b"\x00\x00\x00\x10") is None
    assert unframed_form(b"\x82\x22\x00\x04") is None          # compact version 2: no
    assert framed_form(b"\x0f\xff\x00\x00") is HEADER
    assert framed_form(b"\x82\x21") is FRAMED_COMPACT
    assert framed_form(b"\x80\x01\x00\x01") is FRAMED_BINARY
    assert framed_form(b"\x00\x00\x00\x04echo") is FRAMED_BINARY  # old non-strict
    assert framed_form(b"") is FRAMED_BINARY


def test_framed_binary_stays_plain_bytes_and_takes_the_fast_path(demo: ModuleType) -> None:
    budget = MemoryBudget(1 << 20)
    conn = Connection("p", budget, 1 << 20)
    msg = echo_msg(demo, "binary")
    assert feed(conn, framed(msg)) == [Event.FRAME_COMPLETE]
    assert conn.form is FRAMED_BINARY and type(conn.frame) is bytes and conn.frame == msg
    finish(conn)
    assert conn.received(framed(msg)) is Event.FRAME_COMPLETE
    assert type(conn.frame) is bytes
    finish(conn)
    assert budget.reserved == 0


@pytest.mark.parametrize("protocol, form", [("compact", FRAMED_COMPACT)])
def test_framed_compact_is_tagged_every_time(demo: ModuleType, protocol: str, form) -> None:
    budget = MemoryBudget(1 << 20)
    conn = Connection("p", budget, 1 << 20)
    msg = echo_msg(demo, protocol)
    for _ in range(2):
        assert feed(conn, framed(msg))[-1] is Event.FRAME_COMPLETE
        assert isinstance(conn.frame, Message) and conn.frame.form is form
        assert conn.frame.data == msg
        assert_accounted(conn)
        finish(conn)
    assert budget.reserved == 0


def test_theader_frame_read_a_byte_at_a_time(demo: ModuleType) -> None:
    budget = MemoryBudget(1 << 20)
    conn = Connection("p", budget, 1 << 20)
    frame = header.encode(echo_msg(demo, "compact"), 2, 0, 9)
    said = feed(conn, frame, step=1)
    assert said[-1] is True and conn.state is State.PROCESSING
    assert isinstance(conn.frame, Message) and conn.frame.form is HEADER
    assert conn.frame.data == frame[4:]
    conn.close()
    assert budget.reserved == 0


# --------------------------------------------------------------------------- unframed


@pytest.mark.parametrize("protocol, form", [("binary", UNFRAMED_BINARY),
                                            ("compact", UNFRAMED_COMPACT)])
def test_unframed_whole_message_with_the_next_one_behind_it(demo: ModuleType, protocol: str,
                                                            form) -> None:
    budget = MemoryBudget(1 << 20)
    conn = Connection("p", budget, 1 << 20)
    first, second = echo_msg(demo, protocol, "one", 1), echo_msg(demo, protocol, "two", 2)
    assert conn.received(first + second[:5]) is Event.FRAME_COMPLETE
    assert conn.form is form and isinstance(conn.frame, Message)
    assert bytes(conn.frame.data) == first and conn.leftover == second[:5]
    assert_accounted(conn)
    finish(conn)
    # The selector hands the leftover back first (already reserved), then reads on.
    data, conn.leftover = conn.leftover, b""
    assert conn.received(data, reserved=True) is Event.FRAME_ADMITTED
    assert feed(conn, second[5:])[-1] is True
    assert bytes(conn.frame.data) == second and conn.leftover == b""
    assert_accounted(conn)
    finish(conn)
    conn.close()
    assert budget.reserved == 0


@pytest.mark.parametrize("protocol, form", [("binary", UNFRAMED_BINARY),
                                            ("compact", UNFRAMED_COMPACT)])
def test_unframed_whole_message_fast_path_matches_received(demo: ModuleType, protocol: str,
                                                           form) -> None:
    # The selector's fast path for one whole unframed message per read: the same
    # outcome as received(), and nothing changed when it declines.
    budget = MemoryBudget(1 << 20)
    conn = Connection("p", budget, 1 << 20)
    first, second = echo_msg(demo, protocol, "one", 1), echo_msg(demo, protocol, "two", 2)
    assert conn.whole_message(memoryview(first)) is None     # form not known yet
    assert conn.received(first) is Event.FRAME_COMPLETE      # the first fixes it
    finish(conn)
    assert conn.form is form and conn.unframed_compact is (protocol == "compact")
    for declined in (second[:7], second + first[:3], second + first):
        before = (conn.state, conn.held, budget.reserved, conn.share.declared, conn.frame)
        assert conn.whole_message(memoryview(declined)) is None
        assert (conn.state, conn.held, budget.reserved, conn.share.declared,
                conn.frame) == before
    assert conn.whole_message(memoryview(second)) is Event.FRAME_COMPLETE
    assert conn.state is State.PROCESSING and isinstance(conn.frame, Message)
    assert conn.frame.form is form and bytes(conn.frame.data) == second
    assert conn.share.declared == conn.declared == conn.size == len(second)
    assert_accounted(conn)
    finish(conn)
    assert budget.reserved == 0 and conn.share.declared == 0
    # Over the address's share of the budget: declined, for received() to refuse.
    conn.share.declared = budget.peer_share - len(second) + 1
    assert conn.whole_message(memoryview(second)) is None
    conn.close()


@pytest.mark.parametrize("protocol", ["binary", "compact"])
def test_unframed_one_byte_at_a_time(demo: ModuleType, protocol: str) -> None:
    budget = MemoryBudget(1 << 20)
    conn = Connection("p", budget, 1 << 20)
    msg = echo_msg(demo, protocol, "z" * 300)
    said = feed(conn, msg[:-1], step=1)
    assert said[:3] == [None, None, None]             # the first word is still coming
    assert said[3] is Event.FRAME_ADMITTED
    assert said[4:] == [False] * (len(msg) - 5)
    assert conn.received_in_frame() == len(msg) - 1   # the frame-rate rule's count
    assert_accounted(conn)
    assert feed(conn, msg[-1:]) == [True]
    assert bytes(conn.frame.data) == msg
    assert_accounted(conn)
    conn.close()
    assert budget.reserved == 0


def test_unframed_message_over_the_limit_is_refused_holding_nothing(demo: ModuleType) -> None:
    budget = MemoryBudget(1 << 20)
    conn = Connection("p", budget, max_frame_size=1000)
    msg = echo_msg(demo, "binary", "y" * 5000)
    said = feed(conn, msg, step=100)
    assert said[-1] in (True, Event.FRAME_COMPLETE)
    message = conn.frame
    assert isinstance(message, Message) and isinstance(message.error, FrameSizeError)
    assert (message.name, message.seqid) == ("echo", 1)
    assert conn.closing and conn.held == 0 and budget.reserved == 0
    assert conn.share.declared == 0
    reply = conn.error_reply(message.name, message.seqid, str(message.error))
    assert reply[:4] == b"\x80\x01\x00\x03"             # unframed binary EXCEPTION
    conn.close()


def test_unframed_string_declared_past_the_limit_is_refused_at_once() -> None:
    budget = MemoryBudget(1 << 20)
    conn = Connection("p", budget, max_frame_size=10_000)
    head = binary.encode_message("echo", 1, 3, _Empty())[:-1] + bytes.fromhex("0b0001 7fffffff")
    assert conn.received(head) is Event.FRAME_COMPLETE   # refused before any body
    assert isinstance(conn.frame.error, FrameSizeError) and budget.reserved == 0


def test_malformed_unframed_message_is_refused() -> None:
    conn = Connection("p", MemoryBudget(1 << 20), 1 << 20)
    data = compact.encode_message("m", 1, 4, _Empty())[:-1] + b"\x1d"
    assert conn.received(data) is Event.FRAME_COMPLETE
    assert isinstance(conn.frame.error, ScanError) and conn.frame.seqid == 4


def test_unframed_growth_parks_for_memory_and_resumes(demo: ModuleType) -> None:
    budget = MemoryBudget(GROWTH_MIN + 100)
    other = Connection("q", budget, 1 << 20)
    assert other.received(framed(echo_msg(demo, "binary", "a" * (GROWTH_MIN - 200)))) \
        is Event.FRAME_COMPLETE                          # holds most of the budget
    conn = Connection("p", budget, 1 << 20)
    msg = echo_msg(demo, "compact", "b" * 1000)
    assert conn.received(msg[:50]) is Event.FRAME_ADMITTED
    assert conn.frame_view() is None and conn.state is State.AWAITING_MEMORY
    other.request_done()
    assert budget.admit() == [conn] and conn.state is State.READING_FRAME
    assert feed(conn, msg[50:])[-1] is True
    assert bytes(conn.frame.data) == msg
    assert_accounted(conn)
    conn.close()
    other.close()
    assert budget.reserved == 0


def test_unframed_growth_past_the_peer_share_is_refused(demo: ModuleType) -> None:
    budget = MemoryBudget(1 << 22, peer_share=GROWTH_MIN + 10)
    conn = Connection("p", budget, 1 << 22)
    msg = echo_msg(demo, "binary", "c" * (3 * GROWTH_MIN))
    feed(conn, msg, step=4096)
    assert isinstance(conn.frame.error, PeerShareError)
    assert budget.reserved == 0 and conn.share.declared == 0


def test_a_connection_keeps_its_form(demo: ModuleType) -> None:
    conn = Connection("p", MemoryBudget(1 << 20), 1 << 20)
    feed(conn, echo_msg(demo, "binary"))
    finish(conn)
    # A framed message on an unframed connection is scanned as unframed: refused.
    assert conn.received(framed(echo_msg(demo, "binary"))) is Event.FRAME_COMPLETE
    assert isinstance(conn.frame.error, ScanError)


@pytest.mark.parametrize("form_bytes, first", [
    (lambda d: framed(echo_msg(d, "compact")), b"\x00"),
    (lambda d: echo_msg(d, "compact"), b"\x82"),
    (lambda d: header.encode(echo_msg(d, "binary"), 0, 0, 0), b"\x00"),
])
def test_error_reply_in_the_connection_form(demo: ModuleType, form_bytes, first) -> None:
    conn = Connection("p", MemoryBudget(1 << 20), 1 << 20)
    feed(conn, form_bytes(demo))
    reply = conn.error_reply("echo", 5, "refused")
    assert reply[:1] == first


class _Empty:
    thrift_spec: dict[int, tuple[object, ...]] = {}


@pytest.mark.parametrize("protocol_id", [None, 0, 2])
def test_an_oversized_first_frame_is_refused_in_its_form(demo: ModuleType,
                                                          protocol_id: int | None) -> None:
    budget = MemoryBudget(1 << 20)
    conn = Connection("p", budget, max_frame_size=100)
    body = echo_msg(demo, "compact", "x" * 500, seqid=21)
    data = framed(body) if protocol_id is None else header.encode(body, protocol_id, 0, 21)
    assert conn.received(data[:60]) is Event.REFUSED
    assert isinstance(conn.refusal, FrameSizeError)
    if protocol_id is None:
        assert conn.form is FRAMED_COMPACT and conn.refused_call == ("echo", 21)
        reply = conn.error_reply(*conn.refused_call, str(conn.refusal))
        assert compact.read_message_header(reply[4:]).seqid == 21
    else:
        assert conn.form is HEADER and conn.refused_call == ("", 21)
        reply = conn.error_reply(*conn.refused_call, str(conn.refusal))
        assert header.parse(reply[4:], 1 << 20)[0].seqid == 21
    assert budget.reserved == 0
