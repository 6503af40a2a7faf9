"""The selector thread's inline calls: running a method proven fast (inline.py) in the
selector thread itself, booking each at once, and handing the loop to a new thread when
one blocks after all.

:class:`InlineCalls` is an object the selector holds (``Selector.inline``). It owns the
inline state (the running call's start, the pass's calls, the claim token, the watch,
the count of leaders) and the hand-over protocol; the selector decides which calls run
here (``Selector._submit``), and gives it what they end in: ``book`` (its booking of
an outcome) and ``lead`` (its loop, for the thread that takes over).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from time import perf_counter, thread_time
from typing import Any

import structlog

from .channel import Channel
from .completion import HandBack, send_now
from .dispatch import Dispatcher, Status
from .inline import SLOW_SECS, InlinePolicy, InlineWatch, slow_on_cpu, thread_runnable
from .metrics import ServerState
from .workers import WorkerPool

log = structlog.get_logger(__name__)

_CLOSE = Status.CLOSE

#: The selector's booking of one outcome: (channel, unsent buffers, status, replied,
#: now, the pass's batch, stopping) -> the unsent reply bytes it held.
Book = Callable[[Channel, Any, Status, bool, float, list[tuple[Channel, Any]], bool], int]


class TakenOver(Exception):
    """Ends the loop in a thread whose inline call blocked (see InlineCalls._take_over)."""


class InlineCalls:
    """Run inline calls; take the loop over from a thread whose call blocked.

    ``back``: the workers' way back (a taken-over thread delivers its reply through it);
    ``pool``: where the rest of a blocked pass goes; ``book`` and ``lead``: the
    selector's booking of an outcome and its loop (see the module docstring)."""

    def __init__(self, dispatcher: Dispatcher, policy: InlinePolicy, back: HandBack,
                 pool: WorkerPool, state: ServerState, book: Book,
                 lead: Callable[[], None]) -> None:
        self._dispatcher = dispatcher
        self._policy = policy
        self._back = back
        self._pool = pool
        self._state = state
        self._book = book
        self._lead = lead
        #: When the running inline call began (perf_counter; 0 when none), the pass's
        #: inline calls, how many ran so far, and the watch that takes over when one
        #: blocks.
        self._since = 0.0
        self._calls: list[tuple[Channel, Any, bytes]] = []
        self.calls_run = 0
        self._watch: InlineWatch | None = None
        #: Holds the running inline call's index in _calls (see _take_over).
        self._claim: list[int] = []
        #: Threads that have led the loop, and the native id of the one leading now
        #: (set by the selector as a thread starts leading).
        self._leaders = 1
        self.leader_tid = 0

    def run(self, calls: list[tuple[Channel, Any, bytes]], now: float,
            batch: list[tuple[Channel, Any]], stopping: bool) -> None:
        """Run calls of methods proven fast here, in the selector thread, and book
        each at once (inline.py). Raises TakenOver when one blocked long enough for
        another thread to take the loop over: this thread is then a worker with one
        reply to deliver, and it leaves the rest of these calls to the pool."""
        dispatch = self._dispatcher.dispatch
        policy = self._policy
        claim = self._claim
        book = self._book
        self._calls = calls
        # The thread's CPU clock, read once per pass (a system call, ~0.2 µs) and again
        # only after a slow call: how much of the pass it spent off the CPU.
        pass_cpu, pass_wall = thread_time(), perf_counter()
        i = -1
        for ch, frame, key in calls:
            i += 1
            conn = ch.conn
            started = perf_counter()
            claim.append(i)                     # the call's place in calls: see _take_over
            self._since = started               # before the watch's `asleep` is read
            self.calls_run += 1
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
                self._back.deliver(ch, reply, status)   # the rest went to the pool already
                raise TakenOver from None
            self._since = 0.0
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
                unsent = send_now(ch.io, reply)
            book(ch, unsent, status, reply is not None, now, batch, stopping)

    def stop_watch(self) -> None:
        """The loop has ended: stop the watch's thread, if one was started."""
        if self._watch is not None:
            self._watch.stop()

    def _wake_watch(self) -> None:
        if self._watch is None:
            self._watch = InlineWatch(lambda: self._since,
                                      lambda: self.calls_run, self._take_over,
                                      lambda: thread_runnable(self.leader_tid))
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
        self._since = 0.0
        calls = self._calls
        key = calls[index][2]
        # The calls read in the same pass behind the blocked one: to the pool now, not
        # when (if ever) it returns.
        rest = [(ch, frame) for ch, frame, _ in calls[index + 1:]]
        self._leaders += 1
        self._state.selector_takeovers += 1
        if rest:
            self._pool.submit_many(rest)
        blocked = perf_counter() - since
        self._policy.demote(key, blocked)
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
