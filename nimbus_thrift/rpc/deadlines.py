"""The clocks a connection runs against, as one pure function of a connection, the
options and the time: which limit (if any) it has overrun. The selector's sweep calls
:func:`overdue` for every connection; the unit tests call it with made-up times.

The clocks, by state (times are the selector's ``time.monotonic()``):

* in the TLS handshake: ``handshake_timeout`` from the accept;
* between requests: ``first_request_timeout`` from the accept while no request has
  been completed yet, ``idle_timeout`` from the last activity after that;
* mid-frame (a length prefix or a body arriving): ``frame_read_timeout`` from the
  frame's first byte, and the rate rule: after ``frame_rate_grace`` seconds the frame
  must have brought ``min_frame_rate`` bytes for every second since. The frame's clock
  is paused, not restarted, while the frame waits for memory (the selector moves
  ``frame_started`` on by the time parked), so parking neither costs an honest client
  its time nor hands a slow one a fresh allowance; the first request's clock likewise;
  and the progress rule: ``frame_progress_timeout`` from the frame's last bytes (the
  selector's ``last_activity``, moved on likewise by a park), so a frame that stops
  short of its end is closed whatever it averaged before (issue 27);
* waiting for memory: ``park_timeout`` from parking, answered like a frame too large
  (:class:`ParkTimeoutError`, then close);
* writing a reply the socket did not take at once: ``write_timeout`` from then.

Reply bytes already handed to the kernel are checked by the selector itself (a
syscall; see ``Lifetime._unread_reply``), with :func:`unread_check_due` saying when.
"""

from __future__ import annotations

from typing import NamedTuple

from .connection import Connection
from .errors import WireError
from .options import ServerOptions
from .states import State


class ParkTimeoutError(WireError):
    """A frame waited longer than ``park_timeout`` for read-buffer memory. Answered
    like :class:`~nimbus_thrift.rpc.errors.FrameSizeError`: PROTOCOL_ERROR, then close."""

    def __init__(self, size: int, received: int, limit: float, budget: int) -> None:
        self.size = size
        self.received = received
        self.limit = limit
        self.budget = budget
        self.what = "park_timeout"
        super().__init__(f"frame of {size} bytes refused: no read-buffer memory for it "
                         f"within park_timeout ({limit:g}s); the server's read buffers "
                         f"(max_read_buffer_bytes, {budget} bytes) are in use, retry later")


class Overdue(NamedTuple):
    """A limit a connection overran: ``reason`` for the log; ``park`` True when it is
    a parked frame's (answered with a refusal), False when the connection just closes."""

    reason: str
    park: bool = False


def overdue(conn: Connection, opts: ServerOptions, now: float) -> Overdue | None:
    """The limit ``conn`` has overrun at ``now``, or None."""
    st = conn.state
    if st is State.HANDSHAKING:
        if now - conn.opened_at > opts.handshake_timeout:
            return Overdue(f"TLS handshake not finished within handshake_timeout "
                           f"({opts.handshake_timeout:g}s) of connecting")
        return None
    if st is State.READING_HEADER and not conn.hdr:
        if conn.fresh:
            limit = opts.first_request_timeout
            if limit and now - conn.opened_at > limit:
                return Overdue(f"no request within first_request_timeout ({limit:g}s) "
                               f"of connecting")
        limit = opts.idle_timeout
        if limit and now - conn.last_activity > limit:
            return Overdue(f"idle for more than {limit:g}s (idle_timeout)")
        return None
    if st is State.READING_HEADER or st is State.READING_FRAME:
        received = conn.received_in_frame()
        if conn.fresh:
            limit = opts.first_request_timeout
            if limit and now - conn.opened_at > limit:
                return Overdue(f"first request not received within first_request_timeout "
                               f"({limit:g}s) of connecting ({received} of "
                               f"{_declared(conn)} bytes)")
        elapsed = now - conn.frame_started
        limit = opts.frame_read_timeout
        if limit and elapsed > limit:
            return Overdue(f"frame not received within {limit:g}s (frame_read_timeout; "
                           f"{received} of {_declared(conn)} bytes)")
        limit = opts.frame_progress_timeout
        if limit and now - conn.last_activity > limit:
            return Overdue(f"no byte of the frame for more than {limit:g}s "
                           f"(frame_progress_timeout; {received} of {_declared(conn)} "
                           f"bytes)")
        rate = opts.min_frame_rate
        late = elapsed - opts.frame_rate_grace
        if rate and late > 0 and received < rate * late:
            return Overdue(f"frame arriving at {received / elapsed:.0f} bytes/s, under "
                           f"min_frame_rate ({rate} bytes/s after "
                           f"{opts.frame_rate_grace:g}s; {received} of "
                           f"{_declared(conn)} bytes in {elapsed:.1f}s)")
        return None
    if st is State.AWAITING_MEMORY:
        limit = opts.park_timeout
        if limit and now - conn.parked_at > limit:
            return Overdue(f"frame waited more than park_timeout ({limit:g}s) for "
                           f"read-buffer memory", park=True)
        return None
    if st is State.WRITING:
        limit = opts.write_timeout
        if limit and now - conn.write_started > limit:
            return Overdue(f"reply not taken by the client within {limit:g}s "
                           f"(write_timeout)")
    return None


def unread_check_due(conn: Connection, opts: ServerOptions, now: float) -> bool:
    """Whether to ask the kernel now if reply bytes it holds for ``conn`` are still
    unread: once per quiet spell, when a connection between requests has been quiet for
    ``write_timeout`` since its last reply (or read)."""
    limit = opts.write_timeout
    if not limit or conn.state is not State.READING_HEADER or conn.hdr or conn.fresh:
        return False
    return conn.outq_checked != conn.last_activity and now - conn.last_activity > limit


def _declared(conn: Connection) -> str:
    return str(conn.size) if conn.state is not State.READING_HEADER else "?"
