"""The selector thread: one thread that accepts, reads and writes every connection,
and hands complete frames to the worker pool that runs handlers.

    clients ──► [selector thread] ──tasks──► [worker pool: decode, call, encode]
                 epoll, framing,   ◄─done──  (results queued, selector woken
                 accounting, writes           through a socketpair only if asleep)

Only the selector thread touches sockets, the read-buffer budget and the counters
(workers write a finished reply themselves, see completion.py).
Each pass it handles every ready socket, submits the pass's complete frames to the pool
in one go, then writes up to ``_MAX_COMPLETIONS_PER_PASS`` finished replies, so neither
side can starve the other.

Read interest is withdrawn lazily: a connection whose request is being processed keeps
its registration until the kernel reports data for it (a pipelined frame, or EOF), and
only then is it unregistered. Closed-loop clients therefore cost no epoll_ctl calls per
request; a pipelining client costs one.

Reading, submitting and writing stay in :class:`Selector`: they call each other on
every path (a read completes a frame or refuses it and writes an error reply, a write
resumes reading or closes). The other jobs are objects it holds, each owning its state
in its own module: ``back``, the workers' way back (completion.py: the outcome queue,
its lock and the wake-up); ``life``, a connection's life outside its calls, from
accept and TLS handshake to the sweep of deadlines, the drain at stop and the close,
with the table of open connections and the epoll set (lifetime.py); ``inline``, the
calls run in this thread (inline_calls.py). What the selector holds of a connection is
a :class:`~.channel.Channel` (the socket and its I/O state) around the socket-free
:class:`~.connection.Connection`. Owned by server.py's Server.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from collections import deque
from typing import Any

import structlog

from .channel import Channel
from .completion import WRITE_FAILED, HandBack, held_size, send_now, unsent_part
from .connection import SCRATCH_SIZE, Connection
from .deadlines import ParkTimeoutError
from .dispatch import Dispatcher, Reply, Status
from .errors import AppErrorCode, FrameSizeError, NotThriftError, OverloadedError
from .fastio import poll, recv_frame, recv_into, sendmsg
from .inline import InlinePolicy, request_key
from .inline_calls import InlineCalls, TakenOver
from .lifetime import Lifetime
from .memory import MemoryBudget
from .metrics import ServerState
from .options import ServerOptions
from .peers import FAIR_SHARE
from .shared import split_held
from .states import Event, State
from .unixsock import UnixListener
from .workers import STALL_SECS, WorkerPool

log = structlog.get_logger(__name__)

_EPOLLIN = select.EPOLLIN
_EPOLLOUT = select.EPOLLOUT
_EPOLL_FAIL = select.EPOLLHUP | select.EPOLLERR

# Module-level names for the hot path (a global lookup instead of two attribute ones).
_READING_HEADER = State.READING_HEADER
_READING_FRAME = State.READING_FRAME
_CLOSED = State.CLOSED
_FRAME_COMPLETE = Event.FRAME_COMPLETE
_FAILED = Status.FAILED
_CLOSE = Status.CLOSE

_FAIR_SHARE = FAIR_SHARE

#: Replies written per selector pass before the loop polls sockets again.
_MAX_COMPLETIONS_PER_PASS = 1024
#: Events taken from epoll per pass.
_MAX_EVENTS = 1024
#: Buffers handed to one sendmsg() call (well under IOV_MAX).
_IOV_BATCH = 64


class Selector:
    """The selector thread's loop and all it does to sockets on a call's path. It
    holds :attr:`back` (:class:`~.completion.HandBack`, the workers' way back),
    :attr:`pool` (the workers), :attr:`life` (:class:`~.lifetime.Lifetime`: accept,
    handshake, sweep, drain, close) and :attr:`inline`
    (:class:`~.inline_calls.InlineCalls`: calls run in this thread)."""

    def __init__(self, listener: socket.socket, dispatcher: Dispatcher,
                 options: ServerOptions, budget: MemoryBudget, state: ServerState,
                 unix: UnixListener | None = None) -> None:
        self.options = options
        self.dispatcher = dispatcher
        self._budget = budget
        self._state = state
        #: Which methods are fast enough for this thread to run itself (inline.py);
        #: workers time every call for it.
        self.policy = InlinePolicy(enabled=options.inline_calls)
        self.back = HandBack(dispatcher, self.policy, budget, options.max_unsent_reply_bytes)
        # Watched: the selector checks for stalled handlers (see workers.py).
        self.pool = WorkerPool(options.worker_threads, options.worker_queue_size,
                               self.back.run_task, watched=True)
        self.life = Lifetime(listener, unix, options, budget, state, self.back, self.pool,
                             self._drop_output)
        self.inline = InlineCalls(dispatcher, self.policy, self.back, self.pool, state,
                                  self._book, self._lead)
        # Bound once: the paths that close a connection or change its interest call
        # them as often as before the split, without a hop to ``life``.
        self._close = self.life.close
        self._really_close = self.life.really_close
        self._set_interest = self.life.set_interest
        #: When the grace period of a stop ends (set by request_stop).
        self.stop_deadline = 0.0
        #: TLS connections with decrypted bytes waiting in the TLS layer, which epoll
        #: cannot report (tls.py): read on the next pass without waiting.
        self._tls_ready: list[Channel] = []
        #: The channels holding reply bytes (``back.unsent_bytes``), oldest first.
        self._writers: dict[Channel, None] = {}
        #: The shared bodies (rpc/shared.py) held replies point into, and how many
        #: replies hold each (by id; ``Channel.out_shared`` keeps them alive): each
        #: counts once in ``back.unsent_bytes``.
        self._shared_holders: dict[int, int] = {}
        #: Complete frames read this pass, submitted at its end (an attribute, not a
        #: local: a thread taking over the loop carries on with it, see
        #: ``InlineCalls._take_over``).
        self._batch: list[tuple[Channel, Any]] = []
        self._scratch = memoryview(bytearray(4 + SCRATCH_SIZE))
        self._draining = False
        self._all_done = threading.Event()

    @property
    def stop_requested(self) -> bool:
        """Whether :meth:`request_stop` was called."""
        return self.back.stop_requested

    def request_stop(self, deadline: float) -> None:
        """Stop accepting, drain until ``deadline`` (time.monotonic()), then close
        everything. Safe from any thread and more than once (the first deadline holds)."""
        back = self.back
        if not back.stop_requested:
            self.stop_deadline = deadline
            back.stop_requested = True
        back.wakeup.force()

    def run(self) -> None:
        """Serve until stopped. Returns once the loop has ended and everything is
        closed, in whichever thread the loop ended (see ``InlineCalls._take_over``)."""
        self.life.open().register(self.back.wakeup.fileno(), _EPOLLIN)
        self._lead()
        # Taken over: the loop goes on in another thread. Return when it has ended,
        # as the caller (Server._serve) expects.
        self._all_done.wait()

    def _lead(self) -> None:
        """Run the loop in this thread until the server stops (then close everything)
        or another thread takes it over."""
        self.inline.leader_tid = threading.get_native_id()
        try:
            self._loop()
        except TakenOver:
            return
        except BaseException:
            self._all_done.set()
            raise
        try:
            self.life.finish(self.stop_deadline)
        finally:
            self.inline.stop_watch()
            self._all_done.set()

    def _loop(self) -> None:  # noqa: C901 - the hot path is kept in one frame on purpose
        life = self.life
        back = self.back
        listener = life.listener
        unix = life.unix
        wakeup = back.wakeup
        pool = self.pool
        ep = life.ep
        listen_fd = listener.fileno()
        wake_fd = wakeup.fileno()
        unix_fd = unix.sock.fileno() if unix is not None else -1
        conns = life.conns
        done = back.done
        budget = self._budget
        timeouts = life.timeouts
        sweep_every = life.sweep_every
        next_sweep = time.monotonic() + sweep_every
        batch = self._batch
        now = time.monotonic()
        while True:
            # Sleep only when nothing is queued for us; workers then wake us (once).
            wakeup.sleeping = True
            # With no timers to run, nothing but an event or a worker's wake-up can give
            # the loop work, so it sleeps without a timeout (and a lost wake-up would
            # show as a hang in the tests, not as a hidden 0.5 s stall).
            if done or batch or self._tls_ready:
                timeout = 0.0
            elif self._draining:
                timeout = min(0.1, max(0.0, self.stop_deadline - time.monotonic()))
            elif (conns and timeouts) or life.lingering or life.paused_until:
                timeout = max(0.0, next_sweep - time.monotonic())
            else:
                timeout = -1
            if pool.depth and pool.sleeping and not 0 <= timeout <= STALL_SECS:
                # The pool is watched (see workers.py): look again soon, while there is
                # a worker to wake if the running ones have stalled.
                timeout = STALL_SECS
            # The wake-up for the tasks submitted last pass goes out inside poll, after
            # the GIL is released (see workers.py).
            events = poll(ep, timeout, _MAX_EVENTS, pool.claim_wake(now))
            wakeup.sleeping = False
            now = time.monotonic()

            # Outcomes back from the workers first, so a client's next request (often in
            # this very batch of events) finds its connection reading again.
            if done:
                self._complete(done, now, batch)

            for fd, mask in events:
                ch = conns.get(fd)
                if ch is not None:
                    st = ch.conn.state
                    if st is _READING_HEADER or st is _READING_FRAME:
                        self._read(ch, now, batch)    # the common event, one call less
                        if ch.tls is not None:
                            self._tls_check_pending(ch)
                    else:
                        self._on_event(ch, mask, now, batch)
                elif fd == listen_fd:
                    life.accept(listener, now)
                elif fd == unix_fd and unix is not None:
                    life.accept(unix.sock, now)
                elif fd == wake_fd:
                    wakeup.drain()

            if self._tls_ready:
                self._read_tls_ready(now, batch)

            if budget.parked:  # O(1) unless the head of the queue now fits
                self._admit_parked(now)

            if batch:
                self._submit(batch, now)

            if now >= next_sweep:
                next_sweep = now + sweep_every
                life.sweep(now, back.stop_requested, self._refuse)

            if back.stop_requested:
                if not self._draining:
                    self._draining = True
                    life.begin_drain(self.stop_deadline)
                if not conns or now >= self.stop_deadline:
                    break

    def _complete(self, done: deque[Any], now: float,
                  batch: list[tuple[Channel, Any]]) -> None:
        """Book the outcomes workers queued: release frames, move connections on."""
        stopping = self.back.stop_requested
        booked = 0
        for _ in range(min(len(done), _MAX_COMPLETIONS_PER_PASS)):
            ch, unsent, status, replied = done.popleft()
            booked += self._book(ch, unsent, status, replied, now, batch, stopping)
        if booked:
            # After _hold_output has counted (or refused) them: a waiting worker then
            # sees the held total, not a moment with the bytes counted nowhere.
            self.back.booked_unsent(booked)

    def _book(self, ch: Channel, unsent: Any, status: Status, replied: bool,
              now: float, batch: list[tuple[Channel, Any]], stopping: bool) -> int:
        """Book one request's outcome (from a worker or an inline call): release its
        frame and move its connection on. Returns the unsent reply bytes it held."""
        conn = ch.conn
        conn.share.busy -= 1
        state = self._state
        size = 0
        if unsent and unsent is not WRITE_FAILED:
            size = held_size(unsent)
        state.requests_completed += 1
        if status >= _FAILED:
            state.requests_failed += 1
        if conn.state is _CLOSED:
            return size  # closed at stop
        if replied and not unsent and status is not _CLOSE and not ch.peer_gone \
                and not conn.closing and not stopping:
            # The common case: the whole reply went out. What _reply_sent does, in one
            # step.
            conn.answered()
            conn.last_activity = now
            if conn.leftover or ch.interest != _EPOLLIN:
                self._resume_reading(ch, now, batch)
            return size
        conn.request_done()
        if status is Status.CLOSE or unsent is WRITE_FAILED or \
                (ch.peer_gone and not unsent):
            self._really_close(ch, "write failed" if unsent is WRITE_FAILED else None)
            return size
        if not replied:
            conn.advance(Event.NO_REPLY)
            self._resume_reading(ch, now, batch)
            return size
        conn.advance(Event.REPLY_READY)
        if unsent:
            self._hold_output(ch, unsent, now)
        else:
            self._reply_sent(ch, now, batch)
        return size

    # ----------------------------------------------------------------- events

    def _on_event(self, ch: Channel, mask: int, now: float,
                  batch: list[tuple[Channel, Any]]) -> None:
        st = ch.conn.state
        if st is State.READING_HEADER or st is State.READING_FRAME:
            self._read(ch, now, batch)
        elif st is State.WRITING or (st is State.LINGERING and ch.out):
            if mask & _EPOLL_FAIL and not mask & _EPOLLOUT:
                self._close(ch, "connection failed while writing the reply")
            else:
                self._flush(ch, now, batch)
        elif st is State.LINGERING:
            self.life.discard(ch, now)
        elif st is State.HANDSHAKING:
            if self.life.handshake(ch, now):
                self._tls_check_pending(ch)
        else:
            # PROCESSING or AWAITING_MEMORY: we are not reading. The kernel told us about
            # a pipelined frame or an EOF; stop listening until we want to read again.
            if mask & _EPOLL_FAIL:
                ch.peer_gone = True
            self._set_interest(ch, 0)

    def _read(self, ch: Channel, now: float,
              batch: list[tuple[Channel, Any]]) -> None:
        conn = ch.conn
        try:
            if conn.state is _READING_HEADER:
                limit = conn.header_read_limit()
                n, body = recv_frame(ch.io, self._scratch, limit)
                if n == 0:
                    self._eof(ch)
                    return
                conn.last_activity = now
                if not conn.hdr:
                    conn.frame_started = now
                if body is not None and conn.whole_frame(body) is _FRAME_COMPLETE:
                    conn.fresh = False
                    batch.append((ch, body))
                    return
                data = self._scratch[:n]
                if conn.unframed_compact is not None and \
                        conn.whole_message(data) is _FRAME_COMPLETE:
                    conn.fresh = False
                    batch.append((ch, conn.frame))
                    return
                event = conn.received(data)
                if event is _FRAME_COMPLETE:
                    conn.fresh = False
                    batch.append((ch, conn.frame))
                    return
                if event is Event.FRAME_ADMITTED:
                    # A short read left the socket dry: the buffer grows when the kernel
                    # says more came, so a client that declares a frame and sends nothing
                    # holds nothing.
                    if n < limit or not self._fill(ch, now):
                        return
                    event = Event.FRAME_COMPLETE
                if event is not None:
                    self._after_header(ch, event, now, batch)
            else:
                if self._fill(ch, now):
                    self._after_header(ch, Event.FRAME_COMPLETE, now, batch)
                else:
                    conn.last_activity = now
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._close(ch, f"read failed: {exc}")

    def _fill(self, ch: Channel, now: float) -> bool:
        """Read into the frame buffer until it is complete (True), the socket is dry or
        the frame parks for memory. Raises OSError on a connection error; closes on EOF
        (returns False)."""
        conn = ch.conn
        while conn.state is State.READING_FRAME:
            view = conn.frame_view()
            if view is None:
                self._parked(ch, now)
                return False
            try:
                n = recv_into(ch.io, view)
            except (BlockingIOError, InterruptedError):
                return False
            finally:
                view.release()   # the buffer may have to grow before the next read
            if n == 0:
                self._eof(ch)
                return False
            if conn.frame_bytes_received(n):
                return True
        return False

    def _after_header(self, ch: Channel, event: Event, now: float,
                      batch: list[tuple[Channel, Any]]) -> None:
        if event is Event.FRAME_COMPLETE:
            ch.conn.fresh = False
            batch.append((ch, ch.conn.frame))
        elif event is Event.REFUSED:
            self._refuse(ch, now)

    def _parked(self, ch: Channel, now: float) -> None:
        # Not polled while parked: a level-triggered socket with data would spin.
        conn = ch.conn
        conn.parked_at = now
        self._set_interest(ch, 0)
        log.debug("frame_parked", peer=conn.peer, size=conn.size, received=conn.pos,
                  reserved=self._budget.reserved, budget=self._budget.capacity)

    def _eof(self, ch: Channel) -> None:
        conn = ch.conn
        if conn.mid_frame:
            self._close(ch, f"client closed the connection mid-frame "
                            f"({conn.pos} of {conn.size} bytes received)")
        else:
            self._close(ch)

    def _refuse(self, ch: Channel, now: float) -> None:
        """A frame length we will not accept: log it, tell the client if it can read
        a Thrift reply, then linger-close."""
        conn = ch.conn
        error = conn.refusal
        self._state.frames_refused += 1
        reply = None
        if isinstance(error, FrameSizeError | ParkTimeoutError):
            name, seqid = conn.refused_call
            log.warning("frame_refused", peer=conn.peer, size=error.size, limit=error.limit,
                        limit_name=error.what, method=name or None, seqid=seqid,
                        effect="TApplicationException, then close")
            # In the client's own form (framed binary, compact, unframed, THeader).
            reply = conn.error_reply(name, seqid, str(error), AppErrorCode.PROTOCOL_ERROR)
        elif isinstance(error, NotThriftError):
            log.warning("not_framed_thrift", peer=conn.peer, detected=error.kind,
                        first_bytes=error.first_bytes.hex(), effect="connection closed")
        if reply is None:
            self._close(ch)
            return
        conn.closing = True
        self._queue_output(ch, reply, now)
        if not ch.out and conn.state is State.LINGERING:
            self.life.start_linger(ch, now)

    # ----------------------------------------------------------------- submit

    def _submit(self, batch: list[tuple[Channel, Any]], now: float) -> None:
        pool = self.pool
        tasks = batch[:]
        batch.clear()  # overload replies may complete pipelined frames: next pass's batch
        inline_keys = self.policy.inline
        inline: list[tuple[Channel, Any, bytes]] = []
        if inline_keys:
            queued = []
            for ch, frame in tasks:
                key = request_key(frame)
                if key in inline_keys:
                    inline.append((ch, frame, key))
                    ch.conn.share.busy += 1
                else:
                    queued.append((ch, frame))
            tasks = queued
        room = max(pool.room(), 0)
        over = tasks[room:] if len(tasks) > room else ()
        if over:
            del tasks[room:]
        if tasks:
            # Addresses with few requests in the pool go ahead of busy ones (peers.py).
            ahead: list[tuple[Channel, Any]] = []
            behind: list[tuple[Channel, Any]] = []
            for task in tasks:
                share = task[0].conn.share
                (ahead if share.busy < _FAIR_SHARE else behind).append(task)
                share.busy += 1
            self._state.requests_submitted += len(tasks)
            pool.submit_many(behind, wake=False, ahead=ahead)   # woken by the next poll
        for ch, frame in over:
            self._overloaded(ch, frame, now, batch)
        if inline:
            self._state.requests_submitted += len(inline)
            self.inline.run(inline, now, batch, self.back.stop_requested)

    def _overloaded(self, ch: Channel, frame: Any, now: float,
                    batch: list[tuple[Channel, Any]]) -> None:
        pool = self.pool
        conn = ch.conn
        self._state.requests_overloaded += 1
        error = OverloadedError(pool.depth, pool.queue_size)
        reply = self.dispatcher.overload_reply(frame, str(error))
        log.warning("overloaded", peer=conn.peer, queue_depth=pool.depth,
                    queue_size=pool.queue_size,
                    effect="TApplicationException" if reply else "oneway dropped")
        conn.request_done()
        conn.advance(Event.OVERLOADED)
        if reply is None:
            conn.advance(Event.REPLY_SENT)
            self._resume_reading(ch, now, batch)
        else:
            self._write(ch, reply, now, batch)

    # ----------------------------------------------------------------- writing

    def _write(self, ch: Channel, payload: Reply, now: float,
               batch: list[tuple[Channel, Any]]) -> None:
        self._queue_output(ch, payload, now)
        if not ch.out and ch.conn.state is not State.CLOSED:
            self._reply_sent(ch, now, batch)

    def _queue_output(self, ch: Channel, payload: Reply, now: float) -> None:
        """Try to send a framed payload at once; keep what the socket did not take."""
        unsent = send_now(ch.io, payload)
        if unsent is WRITE_FAILED:
            ch.conn.closing = True
            self._close(ch, "write failed: the client is gone")
        elif unsent:
            self._hold_output(ch, unsent, now)

    def _hold_output(self, ch: Channel, unsent: list[Any], now: float) -> None:
        """Keep a reply the socket did not take, counted against max_unsent_reply_bytes;
        past the cap, close the connections that have held theirs longest. A shared
        body (rpc/shared.py) counts once, however many replies hold it."""
        back = self.back
        ch.out = unsent
        ch.conn.write_started = now
        size, shared = split_held(unsent)
        ch.out_size = size
        if shared:
            ch.out_shared = shared
            holders = self._shared_holders
            for buf in shared:
                count = holders.get(id(buf))
                holders[id(buf)] = 1 if count is None else count + 1
                if count is None:
                    size += len(buf)
        back.unsent_bytes += size
        self._writers[ch] = None
        self._set_interest(ch, _EPOLLOUT)
        cap = self.options.max_unsent_reply_bytes
        while back.unsent_bytes > cap:
            oldest = next(iter(self._writers))
            if oldest is ch:
                break    # one reply alone may exceed the cap: it is what was asked for
            self._state.timeouts += 1
            self._close(oldest, f"reply bytes waiting for slow clients passed "
                                f"max_unsent_reply_bytes ({cap}); this client's had waited "
                                f"longest ({now - oldest.conn.write_started:.1f}s)")

    def _drop_output(self, ch: Channel) -> None:
        """The reply went out, or the connection closed: forget what it held."""
        ch.out = []
        if ch.out_size:
            self.back.unsent_bytes -= ch.out_size
            ch.out_size = 0
            self._writers.pop(ch, None)
        if ch.out_shared:
            holders = self._shared_holders
            for buf in ch.out_shared:
                count = holders.pop(id(buf)) - 1
                if count:
                    holders[id(buf)] = count
                else:
                    self.back.unsent_bytes -= len(buf)
            ch.out_shared = []
            self._writers.pop(ch, None)

    def _flush(self, ch: Channel, now: float,
               batch: list[tuple[Channel, Any]]) -> None:
        try:
            while ch.out:
                sent = sendmsg(ch.io, ch.out[:_IOV_BATCH])
                ch.out = unsent_part(ch.out, sent)
                if ch.out:
                    return
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._close(ch, f"write failed: {exc}")
            return
        self._drop_output(ch)
        if ch.conn.state is State.LINGERING:
            self.life.start_linger(ch, now)
        else:
            self._reply_sent(ch, now, batch)

    def _reply_sent(self, ch: Channel, now: float,
                    batch: list[tuple[Channel, Any]]) -> None:
        conn = ch.conn
        if conn.closing:
            if conn.state is State.LINGERING:
                self.life.start_linger(ch, now)
            else:
                self._close(ch)
            return
        conn.advance(Event.REPLY_SENT)
        conn.last_activity = now
        if self.back.stop_requested:
            self._close(ch)
            return
        self._resume_reading(ch, now, batch)

    def _resume_reading(self, ch: Channel, now: float,
                        batch: list[tuple[Channel, Any]]) -> None:
        """Back in READING_HEADER: first any bytes already read past the last frame."""
        conn = ch.conn
        conn.last_activity = now
        if conn.leftover:
            data, conn.leftover = conn.leftover, b""
            conn.frame_started = now
            event = conn.received(data, reserved=True)
            if event is Event.FRAME_COMPLETE or event is Event.REFUSED:
                self._after_header(ch, event, now, batch)
                return
        if ch.interest != _EPOLLIN:
            self._set_interest(ch, _EPOLLIN)
        if ch.tls is not None:
            self._tls_check_pending(ch)

    # ----------------------------------------------------------------- TLS

    def _tls_check_pending(self, ch: Channel) -> None:
        st = ch.conn.state
        # ch.io: ssl's C object (or the TLSStream), whose pending() is the same.
        io: Any = ch.io
        if (st is _READING_HEADER or st is _READING_FRAME) and io.pending():
            self._tls_ready.append(ch)

    def _read_tls_ready(self, now: float, batch: list[tuple[Channel, Any]]) -> None:
        ready, self._tls_ready = self._tls_ready, []
        for ch in ready:
            st = ch.conn.state
            if st is _READING_HEADER or st is _READING_FRAME:
                self._read(ch, now, batch)
                if ch.tls is not None:
                    self._tls_check_pending(ch)

    # ----------------------------------------------------------------- memory

    def _admit_parked(self, now: float) -> None:
        """Grant memory to parked frames in arrival order and start reading them."""
        budget = self._budget
        overcommits = budget.overcommits
        admitted = budget.admit()
        if not admitted:
            return
        log.debug("frames_admitted", count=len(admitted), still_parked=budget.parked)
        if budget.overcommits != overcommits:
            log.info("read_budget_overcommitted", reserved=budget.reserved,
                     budget=budget.capacity, parked=budget.parked,
                     reason="every reserved byte belonged to a frame waiting for more; "
                            "the oldest was admitted over the budget so one can finish")
        channel_of = self.life.channel_of
        for conn in admitted:
            assert isinstance(conn, Connection)
            # Waiting for memory was our doing, not theirs: the frame's clocks pause for
            # it (moved on by the wait, not restarted, see deadlines.py).
            waited = now - conn.parked_at
            conn.frame_started += waited
            conn.last_activity += waited      # and the progress rule's (deadlines.py)
            conn.opened_at += waited
            self._set_interest(channel_of[conn], _EPOLLIN)
