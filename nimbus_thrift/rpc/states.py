"""A connection's states and the events that move it between them, as one table.

The table is the whole state machine: :class:`~.connection.Connection` applies an
event by looking it up (``advance``), and its one-step fast paths are checked against
the table at import. The drawing of it is in connection.py's docstring.
"""

from __future__ import annotations

import enum


class State(enum.Enum):
    # Identity hashing: Enum's own __hash__ is Python code (hash of the name), and the
    # transition table is looked up with (State, Event) keys on every request.
    __hash__ = object.__hash__

    HANDSHAKING = "in the TLS handshake"
    READING_HEADER = "reading a frame length"
    AWAITING_MEMORY = "waiting for read-buffer memory"
    READING_FRAME = "reading a frame"
    PROCESSING = "waiting for the handler"
    WRITING = "writing a reply"
    LINGERING = "closing after an error reply"
    CLOSED = "closed"


class Event(enum.Enum):
    __hash__ = object.__hash__      # as State's

    HANDSHAKE_DONE = "TLS handshake done"
    FRAME_ADMITTED = "frame admitted"
    FRAME_PARKED = "frame parked"
    MEMORY_GRANTED = "memory granted"
    FRAME_COMPLETE = "frame complete"
    OVERLOADED = "worker queue full"
    REPLY_READY = "reply ready"
    NO_REPLY = "no reply"
    REPLY_SENT = "reply sent"
    REFUSED = "frame refused"
    CLOSE = "close"


S, E = State, Event

#: The only transitions there are. CLOSE is allowed from every state but CLOSED. A
#: connection starts in READING_HEADER, or in HANDSHAKING on a TLS port (tls.py).
TRANSITIONS: dict[tuple[State, Event], State] = {
    (S.HANDSHAKING, E.HANDSHAKE_DONE): S.READING_HEADER,
    (S.READING_HEADER, E.FRAME_ADMITTED): S.READING_FRAME,
    (S.READING_HEADER, E.REFUSED): S.LINGERING,
    (S.READING_FRAME, E.FRAME_PARKED): S.AWAITING_MEMORY,
    (S.AWAITING_MEMORY, E.MEMORY_GRANTED): S.READING_FRAME,
    (S.AWAITING_MEMORY, E.REFUSED): S.LINGERING,
    (S.READING_FRAME, E.FRAME_COMPLETE): S.PROCESSING,
    (S.PROCESSING, E.REPLY_READY): S.WRITING,
    (S.PROCESSING, E.OVERLOADED): S.WRITING,
    (S.PROCESSING, E.NO_REPLY): S.READING_HEADER,
    (S.WRITING, E.REPLY_SENT): S.READING_HEADER,
    **{(state, E.CLOSE): S.CLOSED for state in State if state is not S.CLOSED},
}


class IllegalTransition(AssertionError):
    """A bug: the server asked for a transition the table does not have."""
