"""Helpers for the tests that drive nimbus_thrift.rpc.connection's Connection with bytes,
the way the selector drives it (tests/unit/rpc/test_connection_*.py): length prefixes,
frames, filling a frame through frame_view(), and the checks that the read-buffer
budget holds exactly what the connections hold."""

from __future__ import annotations

import struct

from nimbus_thrift.rpc.connection import Connection, Event, State


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
        view.release()   # as the selector does: the buffer may have to grow next
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


def grow(conn: Connection) -> bool:
    """What the selector's _fill does before a recv: True if the buffer has room (grown
    if it had to be), False if the frame parked instead."""
    view = conn.frame_view()
    if view is None:
        return False
    view.release()
    return True
