"""The selector thread's inline calls: running a method proven fast (inline.py) in the
selector thread itself, booking each at once, and handing the loop to a new thread when
one blocks after all.

:class:`InlineCalls` sits between :class:`~.lifetime.Lifetime` and
:class:`~.selector.Selector` in one object's class chain, for the reason given in
selector.py (no attribute hop on the per-call path). It owns the inline state declared
in Selector's ``__init__`` and the hand-over protocol; the selector decides which calls
run here (``_submit``) and books them (``_book``).
"""

from __future__ import annotations

import threading
from time import perf_counter, thread_time
from typing import Any

import structlog

from .completion import send_now
from .connection import Connection
from .dispatch import Status
from .inline import SLOW_SECS, InlineWatch, slow_on_cpu, thread_runnable
from .lifetime import Lifetime

log = structlog.get_logger(__name__)

_CLOSE = Status.CLOSE


class TakenOver(Exception):
    """Ends the loop in a thread whose inline call blocked (see InlineCalls._take_over)."""


class InlineCalls(Lifetime):
    """Run inline calls; take the loop over from a thread whose call blocked."""

    #: When the running inline call began (perf_counter; 0 when none), the pass's
    #: inline calls, how many ran so far, and the watch that takes over when one blocks.
    _inline_since: float
    _inline_batch: list[tuple[Connection, Any, bytes]]
    inline_calls: int
    _watch: InlineWatch | None
    #: Holds the running inline call's index in _inline_batch (see _take_over).
    _claim: list[int]
    #: Threads that have led the loop, and the native id of the one leading now.
    _leaders: int
    _leader_tid: int

    # The selector's own paths, which these end in.
    def _lead(self) -> None:
        raise NotImplementedError

    def _book(self, conn: Connection, unsent: Any, status: Status, replied: bool,
              now: float, batch: list[tuple[Connection, Any]], stopping: bool) -> int:
        raise NotImplementedError

    def _run_inline(self, calls: list[tuple[Connection, Any, bytes]], now: float,
                    batch: list[tuple[Connection, Any]]) -> None:
        """Run calls of methods proven fast here, in the selector thread, and book
        each at once (inline.py). Raises TakenOver when one blocked long enough for
        another thread to take the loop over: this thread is then a worker with one
        reply to deliver, and it leaves the rest of these calls to the pool."""
        dispatch = self.dispatcher.dispatch
        policy = self.policy
        claim = self._claim
        self._inline_batch = calls
        stopping = self.stop_requested
        # The thread's CPU clock, read once per pass (a system call, ~0.2 µs) and again
        # only after a slow call: how much of the pass it spent off the CPU.
        pass_cpu, pass_wall = thread_time(), perf_counter()
        i = -1
        for conn, frame, key in calls:
            i += 1
            started = perf_counter()
            claim.append(i)                     # the call's place in calls: see _take_over
            self._inline_since = started        # before the watch's `asleep` is read
            self.inline_calls += 1
            watch = self._watch
            if watch is None or watch.asleep:
                self._wake_watch()
            try:
                reply, status = dispatch(frame, conn.peer, conn.principal)
            except BaseException:  # noqa: BLE001 - a bug must not stop the selector
                log.exception("dispatch_crashed", peer=conn.peer, effect="connection closed")
                reply, status = None, _CLOSE
            try:
                claim.pop()
            except IndexError:                  # the watch took the loop over
                self.deliver(conn, reply, status)   # the rest went to the pool already
                raise TakenOver from None
            self._inline_since = 0.0
            took = perf_counter() - started
            if took >= SLOW_SECS:
                off_cpu = (perf_counter() - pass_wall) - (thread_time() - pass_cpu)
                if slow_on_cpu(took, off_cpu):
                    policy.ran_inline(key, took)
                else:
                    log.debug("inline_call_preempted", method=key.decode("utf-8", "replace"),
                              call_ms=round(took * 1000, 3),
                              off_cpu_ms=round(off_cpu * 1000, 3))
            unsent: Any = None
            if reply is not None and status is not _CLOSE:
                unsent = send_now(conn.io, reply)
            self._book(conn, unsent, status, reply is not None, now, batch, stopping)

    def _wake_watch(self) -> None:
        if self._watch is None:
            self._watch = InlineWatch(lambda: self._inline_since,
                                      lambda: self.inline_calls, self._take_over,
                                      lambda: thread_runnable(self._leader_tid))
        self._watch.wake()

    def _take_over(self, since: float) -> None:
        """Called by the watch when the inline call that began at ``since`` still runs:
        the loop continues in a new thread, the method goes back to the pool.

        Who owns the loop is settled by one atomic step on each side, not a lock (one
        per inline call cost more than the rest of its bookkeeping): the selector puts
        a token in ``_claim`` before each inline call and pops it after; whoever pops
        it first wins. Popped here, the selector finds the list empty when its call
        returns and becomes a worker; popped there first, the list is empty here and
        nothing happens. (A call that began between the watch's look and its pop is
        the one taken over: rare, and harmless.) The blocked thread touches none of
        what is read below until its own pop fails."""
        try:
            index = self._claim.pop()
        except IndexError:
            return              # that call ended meanwhile
        self._inline_since = 0.0
        calls = self._inline_batch
        key = calls[index][2]
        # The calls read in the same pass behind the blocked one: to the pool now, not
        # when (if ever) it returns.
        rest = [(conn, frame) for conn, frame, _ in calls[index + 1:]]
        self._leaders += 1
        self._state.selector_takeovers += 1
        if rest:
            self.pool.submit_many(rest)
        blocked = perf_counter() - since
        self.policy.demote(key, blocked)
        log.warning("inline_call_blocked", method=key.decode("utf-8", "replace"),
                    blocked_ms=round(blocked * 1000, 1),
                    effect="a new selector thread carries on; the method goes back to "
                           "the worker pool")
        threading.Thread(target=self._lead_taken_over, name=f"nimbus-selector-{self._leaders}",
                         daemon=True).start()

    def _lead_taken_over(self) -> None:
        """The loop in a thread started by a take-over. A crash there is logged as the
        first thread's is (by Server._serve), not left to threading's excepthook."""
        try:
            self._lead()
        except BaseException:  # noqa: BLE001 - logged; _lead has ended the server
            log.exception("selector_crashed", thread=threading.current_thread().name)
