"""One connection's framing and read-buffer accounting, as a state machine without
sockets: the selector feeds it bytes and asks it what to do next.

Theory of operation
-------------------
Like Java's THsHa FrameBuffer, a connection has at most one request in flight::

    READING_HEADER ──frame admitted──► READING_FRAME ──complete──► PROCESSING
       │    ▲                         │  ▲                     reply │    │ no reply
       │    │          buffer full,   │  │ memory              or overloaded │    │ (oneway)
       │    │          budget is not  ▼  │ granted                ▼    │
       │    │                     AWAITING_MEMORY                WRITING   │
       │    │                      (not polled) ─park timeout─┐    │    │
       │    └──────────────── reply sent ◄─────────────────────┼────┘    │
       │    └──────────────────────────────────────────────────┼─────────┘
       └─frame refused─► LINGERING (error reply, then close) ◄─┘  any ──► CLOSED

Reading stops while a request is processed or a reply is written; frames a client
pipelines stay in the kernel, or (when one read brought several) in ``leftover``.

Accounting: every byte held beyond a frame's 4-byte length prefix is reserved in the
shared :class:`~nimbus_thrift.rpc.memory.MemoryBudget` before it is kept, and only
bytes that arrived (plus bounded room for the next read) are held. The selector reads
at most ``header_read_limit()`` bytes while looking for a frame header, which caps the
speculative body bytes at what the budget has free. A declared length is checked
against ``max_frame_size`` and the whole budget before anything is kept; an admitted
frame's buffer then holds only what arrived, and :meth:`Connection.frame_view` grows it
when it is full, doubling (to at least :data:`GROWTH_MIN`, at most to the declared
length) after reserving the growth. So a frame in progress holds at most twice what
its client sent, or :data:`GROWTH_MIN`: a client that declares a large frame and sends
nothing holds nothing. When growth does not fit, the frame parks for *everything* it
still needs (AWAITING_MEMORY), so once admitted it reads to its end without parking
again. A request's frame is released when its outcome comes back (reply ready,
handler error, or the peer gone); closing releases whatever is left. ``held`` is this
connection's share, so a second release is impossible: it is zeroed as it is returned.

Forms (forms.py): the first message fixes the connection's form. A first word that is
an unframed binary or compact header makes the connection unframed; otherwise its
frames' first bytes say framed binary, framed compact or THeader. Framed binary takes
the paths above unchanged (a frame is plain bytes; the one-read fast path applies from
the second frame on). Other framed forms read exactly like it, their complete frames
handed on as a :class:`~.forms.Message`. An unframed message has no length: its bytes
go into a buffer grown as for a frame (toward ``max_frame_size`` + 1, each growth
reserved first and counted in the peer's share, parking when the budget is short) and
an incremental scan (unframed.py; a whole message in one read is scanned in C) finds
its end, the bytes after it kept as ``leftover`` like a frame's. A scan that fails (too
large, malformed) completes the message as a Message carrying the error, holding
nothing, with ``closing`` set: the client gets the error in its form, then the
connection closes (its stream has no boundary to resume at).
"""

from __future__ import annotations

import struct

from .codec import compact, forms
from .codec import header as theader
from .codec.binary import read_message_header
from .errors import AppErrorCode, FrameSizeError, NotThriftError, PeerShareError, RpcError
from .fastio import grow_bytearray
from .codec.forms import (FRAMED_BINARY, FRAMED_COMPACT, HEADER, Form, Message, classify_prefix,
                    framed_form, unframed_form)
from .memory import SMALL_FRAME, MemoryBudget, ReadGroup
from .peers import PeerShare
from .states import TRANSITIONS, Event, IllegalTransition, State
from .codec.unframed import Scanner

try:  # The C scan of an unframed message that arrived whole (_compactscan.c).
    from .codec._compact import scan_message as _scan_message
except ImportError:  # pragma: no cover - exercised only without the C extension
    _scan_message = None  # type: ignore[assignment]  # None: the C module is not built

Buffer = bytes | bytearray | memoryview

#: Bytes read speculatively past a frame header in one recv. One read then usually
#: brings a whole small request (one syscall per call); larger frames are read straight
#: into their own buffer afterwards.
SCRATCH_SIZE = 64 * 1024

#: Smallest growth of a frame buffer, and the buffer a frame gets when its first body
#: bytes come after the header read: one scratch-sized read, so a frame that streams in
#: grows by doubling from there (4 reallocations for 1 MiB) while a client dripping a
#: byte at a time holds no more than this.
GROWTH_MIN = SCRATCH_SIZE

_LENGTH = struct.Struct(">i")


S, E = State, Event


#: Where a frame that arrives whole in one read lands: Connection.received's fast path
#: sets it directly, so it must be what the table says.
_ONE_READ_FRAME = TRANSITIONS[(TRANSITIONS[(S.READING_HEADER, E.FRAME_ADMITTED)],
                               E.FRAME_COMPLETE)]
assert _ONE_READ_FRAME is S.PROCESSING
#: Where a request whose reply went out whole at once lands: Connection.answered()
#: applies REPLY_READY then REPLY_SENT in one step.
_ANSWERED = TRANSITIONS[(TRANSITIONS[(S.PROCESSING, E.REPLY_READY)], E.REPLY_SENT)]
assert _ANSWERED is S.READING_HEADER

# Module-level names for the per-request paths: a global lookup costs ~6 ns, an enum
# member read off its class ~80 ns (measured, CPython 3.11), several times per request.
_READING_HEADER = S.READING_HEADER
_PROCESSING = S.PROCESSING
_CLOSED = S.CLOSED
_FRAME_COMPLETE = E.FRAME_COMPLETE

#: A connection's read group before its first large frame (see Connection._group):
#: never counted in, it only stands for "not joined yet".
_UNJOINED = ReadGroup("")


def _peek_call(body: Buffer, form: Form | None = None) -> tuple[str, int]:
    """(method name, seqid) from the start of a refused frame of ``form``, so the error
    reply can name them; ("", 0) when too little of it arrived (a THeader frame: its
    sequence number, with no name: its message is behind the header)."""
    if form is HEADER:
        return "", int.from_bytes(bytes(body[4:8]), "big", signed=True) \
            if len(body) >= 8 else 0
    try:
        header = compact.read_message_header(body) if form is FRAMED_COMPACT \
            else read_message_header(body)
    except RpcError:
        return "", 0
    return header.name, header.seqid


class Connection:
    """Per-connection protocol state. ``peer`` is for logs only.

    The selector drives it:

    * in READING_HEADER, read at most :meth:`header_read_limit` bytes and pass them to
      :meth:`received` (or call :meth:`received` with ``leftover`` first);
    * in READING_FRAME, read into :meth:`frame_view` and report the count with
      :meth:`frame_bytes_received`; when :meth:`frame_view` returns None the frame
      parked (AWAITING_MEMORY) and the connection must not be polled until the budget
      admits it;
    * when a frame is complete it is in :attr:`frame`; when its outcome is back, call
      :meth:`request_done`.

    It holds no socket: the selector keeps that, and what its I/O needs, in the
    :class:`~.channel.Channel` beside it. The clocks (``last_activity``,
    ``frame_started``, ``parked_at``, ``write_started``, ...) are set by the selector
    and read by deadlines.py, a pure function of this object and the time.
    """

    __slots__ = ("peer", "budget", "max_frame_size", "state", "hdr", "frame", "pos",
                 "size", "leftover", "held", "need", "last_activity",
                 "frame_started", "write_started", "refusal", "refused_call", "closing",
                 "host", "opened_at", "fresh", "parked_at", "outq_checked", "share",
                 "declared", "principal", "form", "scan", "unframed_compact", "group",
                 "tally", "large_held")

    def __init__(self, peer: str, budget: MemoryBudget, max_frame_size: int,
                 now: float = 0.0) -> None:
        self.peer = peer
        self.budget = budget
        self.max_frame_size = max_frame_size
        self.state = State.READING_HEADER
        self.hdr = b""                 # up to 3 bytes of a length prefix (not reserved)
        self.frame: bytearray | bytes | None = None
        self.pos = 0                   # bytes of `frame` filled
        self.size = 0                  # declared length of the current frame
        self.leftover = b""            # bytes read past the current frame (reserved)
        self.held = 0                  # bytes reserved for this connection
        self.need = 0                  # bytes still to reserve while parked
        self.last_activity = now
        # When the current frame's first byte arrived, moved later by the time it spent
        # parked: the frame's clocks (read timeout, rate) count the client's time only.
        self.frame_started = 0.0
        self.opened_at = now
        self.fresh = True              # no request complete yet (first_request_timeout)
        self.parked_at = 0.0           # when the current frame parked
        self.write_started = 0.0       # when a reply the socket did not take began waiting
        self.outq_checked = 0.0        # last_activity when the send queue was last checked
        self.host = peer               # what per-peer limits count (the peer's address)
        self.share = PeerShare()       # the counts of ``host`` (the selector's, once accepted)
        self.declared = 0              # the current frame's length, as counted in ``tally``
        # The read group of ``host`` (peers.read_group): its large frames' declared
        # lengths are what the per-peer share limits; joined at the first, left at close.
        self.group = _UNJOINED
        # Where the current frame's length is counted: ``share`` for a small frame (the
        # address's own count: a neighbour's large frames never refuse a small call),
        # ``group`` for a large one and for an unframed message read over several reads.
        self.tally: PeerShare | ReadGroup = self.share
        # Of ``held``, the bytes the budget counts as a large frame's (memory.py).
        self.large_held = 0
        self.principal: str | None = None   # who the transport says the client is
        # The client's form (forms.py), fixed by its first message; None until then.
        self.form: Form | None = None
        # The scan of the unframed message being read (unframed.py), else None.
        self.scan: Scanner | None = None
        # Whether an unframed connection's protocol is compact; None for every other
        # form (one test on the selector's read path, see whole_message()).
        self.unframed_compact: bool | None = None
        self.refusal: Exception | None = None
        self.refused_call: tuple[str, int] = ("", 0)   # (method, seqid) of a refused frame
        # Close once the reply in progress is out (an error reply, or an unframed
        # stream that lost its message boundary).
        self.closing = False

    def __repr__(self) -> str:
        return f"<Connection {self.peer} {self.state.name} held={self.held}>"

    # ----------------------------------------------------------------- transitions

    def advance(self, event: Event) -> State:
        """Apply ``event``; raise :class:`IllegalTransition` if the table forbids it."""
        try:
            self.state = TRANSITIONS[(self.state, event)]
        except KeyError:
            raise IllegalTransition(f"{self.state.name} has no transition on "
                                    f"{event.name} ({self.peer})") from None
        return self.state

    # ----------------------------------------------------------------- reading

    def header_read_limit(self) -> int:
        """How many bytes the selector may read now, in READING_HEADER: the rest of the
        length prefix plus as many body bytes as the budget can hold right now."""
        return 4 - len(self.hdr) + min(SCRATCH_SIZE, self.budget.free_now())

    def frame_view(self) -> memoryview | None:
        """Where the next bytes of the current frame go (READING_FRAME).

        A full buffer first grows (doubling, to at least :data:`GROWTH_MIN`, at most to the
        declared length), the growth reserved before it is allocated. When the budget
        cannot give it now, the frame parks for everything it still needs and this
        returns None (the connection is AWAITING_MEMORY)."""
        frame = self.frame
        assert isinstance(frame, bytearray)
        pos = self.pos
        cap = len(frame)
        if pos == cap:
            grown = 2 * cap if cap > GROWTH_MIN // 2 else GROWTH_MIN
            if self.scan is not None:
                # An unframed message has no declared length: the buffer grows toward
                # one byte past the limit (the byte that proves a message too long),
                # and what it may grow to counts as declared for the peer's share.
                grown = min(grown, self.scan.limit + 1)
                self.size = grown
                self.tally.declared += grown - cap
                self.declared += grown - cap
            size = self.size
            if grown > size:
                grown = size
            # A frame over SMALL_FRAME grows in the large frames' room (memory.py).
            large = size > SMALL_FRAME
            budget = self.budget
            if not (budget.try_reserve_large(grown - cap, self.large_held) if large
                    else budget.try_reserve(grown - cap)):
                self.need = size - cap
                budget.park(self, large)
                self.advance(Event.FRAME_PARKED)
                return None
            self.held += grown - cap
            if large:
                self.large_held += grown - cap
            grow_bytearray(frame, grown)
        return memoryview(frame)[pos:]

    def whole_frame(self, body: bytes) -> Event | None:
        """Take ``body``, the payload of exactly one whole frame that arrived in one read
        in READING_HEADER (fastio.recv_frame found its length prefix equal to the bytes
        after it): FRAME_COMPLETE, or None when the general path must look at the bytes
        instead (a prefix already begun, a form not yet known or not framed binary,
        a length this connection may not take now).

        The fast path of the common case: the same transitions as :meth:`received`
        (FRAME_ADMITTED, then FRAME_COMPLETE; checked against the table at import),
        without the general bookkeeping."""
        if self.hdr or self.state is not _READING_HEADER or self.form is not FRAMED_BINARY:
            return None
        size = len(body)
        share = self.share
        budget = self.budget
        if size > self.max_frame_size or size > budget.capacity or \
                share.declared + size > budget.peer_share:
            return None
        # (At most a scratch read: a small frame, counted in the address's share.)
        self.tally = share
        share.declared += size
        self.declared = size
        budget.force_reserve(size)
        self.held += size
        self.frame = body
        self.size = self.pos = size
        self.state = _ONE_READ_FRAME
        return _FRAME_COMPLETE

    def whole_message(self, data: memoryview) -> Event | None:
        """Take ``data``, the bytes of one read in READING_HEADER on an unframed
        connection: FRAME_COMPLETE when they are exactly one whole message (the common
        case: a client that waits for each reply), or None, having changed nothing, for
        :meth:`received` to take them (a message split over reads, pipelined messages,
        one the scan refuses, a peer over its share).

        The unframed twin of :meth:`whole_frame`: the same transitions and bookkeeping
        as :meth:`received` and :meth:`_start_unframed`, without the general path."""
        compact = self.unframed_compact
        if compact is None or self.state is not _READING_HEADER or _scan_message is None:
            return None
        size = len(data)
        share = self.share
        budget = self.budget
        # (message_limit(), inlined.)
        limit = self.max_frame_size if self.max_frame_size < budget.capacity \
            else budget.capacity
        if share.declared + size > budget.peer_share or \
                _scan_message(data, compact, limit) != size:
            return None
        # Fits: the selector read no more than header_read_limit() (as in received()).
        budget.force_reserve(size)
        self.held += size
        self.tally = share
        share.declared += size
        self.declared = size
        self.frame = Message(bytes(data), self.form)  # type: ignore[assignment,arg-type]
        self.size = self.pos = size
        self.state = _ONE_READ_FRAME
        return _FRAME_COMPLETE

    def received(self, data: Buffer, reserved: bool = False) -> Event | None:
        """Take bytes that arrived in READING_HEADER.

        ``reserved`` says the bytes are already counted in the budget (``leftover``);
        otherwise everything past the length prefix is reserved now, which always fits
        because the selector read no more than :meth:`header_read_limit`.

        Returns the event applied (FRAME_COMPLETE when a whole frame is now in
        :attr:`frame`, FRAME_ADMITTED when more must be read, FRAME_PARKED when memory
        must free first, REFUSED when the length is unacceptable; :attr:`refusal` then
        holds the error), or None when the length prefix is still incomplete.
        """
        view = memoryview(data)
        if self.scan is not None or (self.form is not None
                                     and self.form.transport == "unframed"):
            return self._received_unframed(view, reserved)
        missing = 4 - len(self.hdr)
        if len(view) < missing:
            self.hdr += bytes(view)
            if reserved:
                self._give_back(len(view))
            return None
        prefix = self.hdr + bytes(view[:missing]) if self.hdr else bytes(view[:4])
        self.hdr = b""
        body = view[missing:]
        if reserved:
            self._give_back(missing)      # the prefix is no longer buffered
        else:
            self.budget.force_reserve(len(body))
            self.held += len(body)
        if self.form is None:
            form = unframed_form(prefix)
            if form is not None:
                # No length prefix: these four bytes are the message's first, and are
                # held (and reserved) with the rest of it.
                self.form = form
                self.unframed_compact = form.protocol == "compact"
                self.budget.force_reserve(4)
                self.held += 4
                return self._start_unframed(prefix + bytes(body))
        size = _LENGTH.unpack(prefix)[0]
        self.tally = self._group() if size > SMALL_FRAME else self.share
        error = self._check_size(size, prefix)
        if error is not None:
            self.refusal = error
            if self.form is None and len(body) >= 2:
                self.form = framed_form(body[:2])   # so the refusal is in its form
            self.refused_call = _peek_call(body, self.form)
            self._give_back(self.held)
            self.advance(Event.REFUSED)
            return Event.REFUSED
        self.size = size
        self.tally.declared += size
        self.declared = size
        have = len(body)
        if have >= size:
            # Whole frame (and perhaps the start of the next one) already here; all of it
            # was reserved above.
            self.frame = bytes(body[:size])
            self.leftover = bytes(body[size:])
            self.pos = size
            self.advance(Event.FRAME_ADMITTED)
            self.advance(Event.FRAME_COMPLETE)
            if self.form is not FRAMED_BINARY:
                self._tag()
            return Event.FRAME_COMPLETE
        # Admitted with what arrived (already reserved): the buffer grows in frame_view().
        if size > SMALL_FRAME:
            # What arrived with the header is a large frame's: counted as such (the
            # header read took no more than the large room had free, see free_now).
            self.budget.count_large(have)
            self.large_held += have
        self.frame = bytearray(body)
        self.pos = have
        self.advance(Event.FRAME_ADMITTED)
        return Event.FRAME_ADMITTED

    def _check_size(self, size: int, prefix: bytes) -> Exception | None:
        if size <= 0 or size > self.max_frame_size or size > self.budget.capacity:
            kind = classify_prefix(prefix)
            if kind is not None:
                return NotThriftError(kind, prefix)
        if size < 0:
            return NotThriftError("a negative frame length (is the client using "
                                  "TFramedTransport?)", prefix)
        if size == 0:
            return NotThriftError("an empty frame", prefix)
        if size > self.max_frame_size:
            return FrameSizeError(size, self.max_frame_size, "the max frame size")
        if size > self.budget.capacity:
            return FrameSizeError(size, self.budget.capacity,
                                  "the server's whole read-buffer budget "
                                  "(max_read_buffer_bytes)")
        in_use = self.tally.declared
        if in_use + size > self.budget.peer_share:
            return PeerShareError(size, self.budget.peer_share, in_use)
        return None

    def memory_granted(self) -> None:
        """The budget reserved :attr:`need` for this parked frame (called by admit()):
        the buffer takes the frame's whole declared length."""
        self.advance(Event.MEMORY_GRANTED)
        assert isinstance(self.frame, bytearray)
        self.held += self.size - len(self.frame)
        if self.size > SMALL_FRAME:   # parked as large (frame_view): counted as such
            self.large_held += self.size - len(self.frame)
        grow_bytearray(self.frame, self.size)

    def frame_bytes_received(self, n: int) -> bool:
        """``n`` more bytes landed in :meth:`frame_view`; True once the frame is whole."""
        self.pos += n
        if self.scan is not None:
            return self._scanned()
        if self.pos >= self.size:
            self.advance(Event.FRAME_COMPLETE)
            if self.form is not FRAMED_BINARY:
                self._tag()
            return True
        return False

    # ----------------------------------------------------------------- other forms

    def _tag(self) -> None:
        """A frame is complete: the first one fixes the connection's form (forms.py);
        a frame of any form but framed binary travels as a Message."""
        form = self.form
        frame = self.frame
        assert frame is not None
        if form is None:
            form = self.form = framed_form(frame[:2])
        if form is not FRAMED_BINARY:
            self.frame = Message(frame, form)   # type: ignore[assignment]

    def message_limit(self) -> int:
        """The most bytes an unframed message may take: the max frame size, and never
        more than the whole read budget (as for a frame's declared length)."""
        return min(self.max_frame_size, self.budget.capacity)

    def _received_unframed(self, view: memoryview, reserved: bool) -> Event | None:
        """Bytes that start an unframed message (in READING_HEADER)."""
        if not view:
            return None
        if not reserved:
            self.budget.force_reserve(len(view))
            self.held += len(view)
        return self._start_unframed(bytes(view))

    def _start_unframed(self, data: bytes) -> Event:
        """Begin an unframed message with ``data`` (reserved, counted in ``held``): scan
        it; FRAME_COMPLETE if it is all there, else FRAME_ADMITTED (the selector reads
        on into :meth:`frame_view`)."""
        form = self.form
        assert form is not None
        limit = self.message_limit()
        if _scan_message is not None:
            # The common case, a whole small call in one read: C finds its end, or says
            # -1 and the Scanner (which decides, and explains refusals) takes over.
            end = _scan_message(data, form.protocol == "compact", limit)
            share = self.share
            if end > 0 and share.declared + end <= self.budget.peer_share:
                if end < len(data):
                    self.frame = Message(data[:end], form)  # type: ignore[assignment]
                    self.leftover = data[end:]
                else:
                    self.frame = Message(data, form)  # type: ignore[assignment]
                self.size = self.pos = end
                self.tally = share
                share.declared += end
                self.declared = end
                if self.state is _READING_HEADER:
                    # FRAME_ADMITTED then FRAME_COMPLETE in one step, as in whole_frame().
                    self.state = _ONE_READ_FRAME
                else:
                    self.advance(Event.FRAME_ADMITTED)     # raises: not READING_HEADER
                    self.advance(Event.FRAME_COMPLETE)
                return _FRAME_COMPLETE
        self.scan = Scanner(form.protocol, limit)
        self.frame = bytearray(data)
        self.pos = self.size = len(data)
        # Read over several reads, it may grow large: counted in the group.
        self.tally = self._group()
        self.tally.declared += len(data)
        self.declared = len(data)
        self.advance(Event.FRAME_ADMITTED)
        return Event.FRAME_COMPLETE if self._scanned() else Event.FRAME_ADMITTED

    def _scanned(self) -> bool:
        """Scan what arrived of the unframed message; True once it is complete (or
        refused: then it is complete as a Message carrying the error)."""
        scan = self.scan
        frame = self.frame
        assert scan is not None and isinstance(frame, bytearray)
        try:
            end = scan.feed(frame, self.pos)
        except RpcError as exc:           # ScanError or FrameSizeError
            self._fail_unframed(exc)
            return True
        if end is None:
            if self.tally.declared > self.budget.peer_share:
                self._fail_unframed(PeerShareError(self.declared, self.budget.peer_share,
                                                   self.tally.declared - self.declared))
                return True
            return False
        form = self.form
        assert form is not None
        # Bytes past the message are the next one's (kept reserved, as after a frame);
        # the buffer's unfilled room goes back to the budget.
        self.leftover = bytes(frame[end:self.pos])
        # Complete: what it holds now is a message being handled and the next one's
        # first bytes, not a large frame growing (so no longer in the large room).
        self._release_large()
        self._give_back(len(frame) - self.pos)
        del frame[end:]
        self.frame = Message(frame, form)    # type: ignore[assignment]
        self.size = self.pos = end
        self.tally.declared += end - self.declared
        self.declared = end
        self.scan = None
        self.advance(Event.FRAME_COMPLETE)
        return True

    def _fail_unframed(self, error: Exception) -> None:
        """The unframed message being scanned is refused: it completes as a Message
        carrying ``error`` (the dispatcher answers in the client's form), holding
        nothing, and the connection closes once that reply is out (its stream has no
        frame boundary to resume at)."""
        scan = self.scan
        assert scan is not None and self.form is not None
        self.frame = Message(b"", self.form, error, scan.name,  # type: ignore[assignment]
                             scan.seqid)
        self._release_large()
        self._give_back(self.held)
        self.leftover = b""
        self.size = self.pos = 0
        if self.declared:
            self.tally.declared -= self.declared
            self.declared = 0
        self.scan = None
        self.closing = True
        self.advance(Event.FRAME_COMPLETE)

    def error_reply(self, name: str, seqid: int, message: str,
                    code: int = AppErrorCode.PROTOCOL_ERROR) -> bytes:
        """A TApplicationException reply in this connection's form (framed binary
        until the first message fixed it), for a request refused before dispatch."""
        form = self.form or FRAMED_BINARY
        echo = theader.HeaderFrame(0, seqid, theader.PROTOCOL_BINARY, (), {}, b"") \
            if form is HEADER else None
        return forms.error_reply(form, name, seqid, message, code, echo)

    # ----------------------------------------------------------------- outcomes

    def request_done(self) -> None:
        """The request's outcome is back: free its frame, keep any pipelined bytes.
        A connection closed meanwhile already released everything."""
        if self.state is _CLOSED:
            return
        self.frame = None
        self._release_large()
        self._give_back(self.size)
        self.size = 0
        self.pos = 0
        if self.declared:
            self.tally.declared -= self.declared
            self.declared = 0

    def answered(self) -> None:
        """The request's reply was ready and went out whole: :meth:`request_done`,
        then REPLY_READY and REPLY_SENT (PROCESSING -> READING_HEADER) in one step, the
        common end of a request."""
        if self.state is not _PROCESSING:
            raise IllegalTransition(f"{self.state.name} has no transition on "
                                    f"{E.REPLY_READY.name} ({self.peer})")
        # request_done(), inlined: this runs once per call.
        self.frame = None
        size = self.size
        if size:
            self.held -= size
            self.budget.release(size)
        if self.large_held:
            self._release_large()
        self.size = 0
        self.pos = 0
        declared = self.declared
        if declared:
            self.tally.declared -= declared
            self.declared = 0
        self.state = _ANSWERED

    def close(self) -> int:
        """Close: unpark, release everything still held; return the bytes released."""
        if self.state is State.AWAITING_MEMORY:
            self.budget.unpark(self)
        released = self.held
        self._release_large()
        self._give_back(self.held)
        self.frame = None
        self.leftover = b""
        self.need = 0
        self.scan = None
        if self.declared:
            self.tally.declared -= self.declared
            self.declared = 0
        if self.group is not _UNJOINED:
            self.budget.leave_group(self.group)
            self.group = _UNJOINED
        if self.state is not State.CLOSED:
            self.advance(Event.CLOSE)
        return released

    def _give_back(self, n: int) -> None:
        if n:
            self.held -= n
            self.budget.release(n)

    def _release_large(self) -> None:
        """The large frame's bytes leave the large room (released, or about to be)."""
        if self.large_held:
            self.budget.release_large(self.large_held)
            self.large_held = 0

    def _group(self) -> ReadGroup:
        """The read group of :attr:`host`, joined at the first large frame."""
        group = self.group
        if group is _UNJOINED:
            group = self.group = self.budget.join_group(self.host)
        return group

    def refuse_parked(self, error: Exception) -> None:
        """A parked frame waited too long (park_timeout): leave the queue, release its
        bytes and go LINGERING with ``error`` as the refusal, as for a frame too large."""
        if self.state is not State.AWAITING_MEMORY:
            raise IllegalTransition(f"{self.state.name} has no transition on "
                                    f"{E.REFUSED.name} from a park timeout ({self.peer})")
        self.budget.unpark(self)
        frame = self.frame
        if self.scan is not None:
            self.refused_call = (self.scan.name, self.scan.seqid)
            self.scan = None
        else:
            if self.form is None and frame is not None and self.pos >= 2:
                self.form = framed_form(frame[:2])
            self.refused_call = _peek_call(memoryview(frame)[:self.pos] if frame else b"",
                                           self.form)
        self.refusal = error
        self.frame = None
        self.need = 0
        self._release_large()
        self._give_back(self.held)
        if self.declared:
            self.tally.declared -= self.declared
            self.declared = 0
        self.advance(Event.REFUSED)

    def received_in_frame(self) -> int:
        """Bytes of the frame in progress received so far, its length prefix included."""
        if self.state is State.READING_HEADER:
            return len(self.hdr)
        return self.pos if self.scan is not None else 4 + self.pos

    @property
    def mid_frame(self) -> bool:
        """True while a frame has started arriving but is not complete."""
        return bool(self.hdr) or self.state in (State.READING_FRAME, State.AWAITING_MEMORY)
