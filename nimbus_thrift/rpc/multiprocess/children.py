"""What a multi-process server's parent knows of its children: its record of each
child, and what it hears over their control channels (rpc/multiprocess/control.py has the
messages): the figures it asks for, the last words of a child that stops, and the
totals of the children gone, which ``metrics()`` and ``method_metrics()`` add to the
serving children's.

Why the parent keeps a child's per-method figures between requests: they only grow,
and a sum that left out a child that is slow to answer, stopping or gone would go
back down. So each child counts with its latest answer until its last words (or, if
it crashed, its latest answer) join the retired totals; every change only adds.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Protocol

from .control import CONTROL_MAX, Farewell, MethodsReply, SnapshotReply
from ..methodstats import MethodSnapshot
from ..metrics import MetricsSnapshot
from .supervision import (TRANSITIONS, ChildState, add_retired, newer_stats, sum_methods,
                          sum_snapshots)

#: Seconds a child has to answer a request before it is left out of the sum.
CONTROL_TIMEOUT = 5.0


class Child:
    """The parent's record of one child process."""

    def __init__(self, slot: int, pid: int, control: socket.socket, handoff: socket.socket,
                 pidfd: int) -> None:
        self.slot = slot
        self.pid = pid
        self.control = control
        self.handoff = handoff
        self.pidfd = pidfd
        self.started = time.monotonic()
        self.state = ChildState.STARTING
        #: Held for each request and its answer on the control channel.
        self.lock = threading.Lock()
        #: Held while a connection is handed over, so "end" goes after the last one.
        self.handoff_lock = threading.Lock()
        self.exited = threading.Event()
        self.status: int | None = None
        #: Its last words, read by whichever reader of the control channel meets them.
        self.farewell = Farewell()

    def move(self, new: ChildState) -> None:
        if new not in TRANSITIONS[self.state]:
            raise RuntimeError(f"child {self.pid}: {self.state.value} -> {new.value} "
                               "is not a transition")
        self.state = new


class _Reply(Protocol):
    """What a request's answer is fed to (control.SnapshotReply, MethodsReply)."""

    complete: bool

    def feed(self, message: bytes) -> bool: ...


class Tally:
    """The children's figures as the parent knows them, and its requests for them.

    Lock order: a child's ``lock`` (its control channel) before this one's.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seq = 0
        #: Cumulative counters of the children that stopped gracefully.
        self._retired: dict[str, int] = {}
        #: Per-method figures of the children gone, and each other child's latest.
        self._retired_methods: dict[str, MethodSnapshot] = {}
        self._methods: dict[Child, dict[str, MethodSnapshot]] = {}

    def metrics(self, serving: list[Child]) -> MetricsSnapshot:
        """The ``serving`` children's snapshots summed (one that does not answer
        within CONTROL_TIMEOUT is left out), plus the cumulative counters of the
        children that stopped gracefully."""
        snaps = [s for s in (self._ask_metrics(c) for c in serving) if s is not None]
        with self._lock:
            retired = dict(self._retired)
        return sum_snapshots(snaps, retired)

    def method_metrics(self, serving: list[Child]) -> dict[str, MethodSnapshot]:
        """Ask the ``serving`` children for their per-method figures, then sum what
        every child not yet gone last reported (a child that does not answer within
        CONTROL_TIMEOUT counts with its previous answer) and the retired figures."""
        for child in serving:
            self._ask_methods(child)
        with self._lock:
            return sum_methods(list(self._methods.values()), self._retired_methods)

    # ------------------------------------------------------------- requests

    def _next_seq(self) -> int:
        with self._lock:
            self._seq += 1
            return self._seq

    def _ask_metrics(self, child: Child) -> MetricsSnapshot | None:
        reply = SnapshotReply(self._next_seq())
        with child.lock:
            self._exchange(child, b"metrics %d" % reply.seq, reply)
        return reply.snapshot

    def _ask_methods(self, child: Child) -> None:
        reply = MethodsReply(self._next_seq())
        with child.lock:
            # Booked with the channel held: of two concurrent requests, the later
            # answer (the larger figures) is booked last.
            if self._exchange(child, b"methods %d" % reply.seq, reply) and \
                    reply.figures is not None:
                with self._lock:
                    # Not once child_gone has retired its figures (it runs after the
                    # reap, with the channel held too).
                    if not child.exited.is_set():
                        self._methods[child] = newer_stats(self._methods.get(child, {}),
                                                           reply.figures)

    def _exchange(self, child: Child, request: bytes, reply: _Reply) -> bool:
        """Send ``request`` and feed what comes back to ``reply`` until it is complete
        (call with ``child.lock`` held). False if the child did not answer within
        CONTROL_TIMEOUT, is gone, or said its last words instead. Other messages (late
        answers to earlier requests, unreadable ones) are skipped."""
        if child.farewell.said:
            return False
        try:
            child.control.send(request)
            deadline = time.monotonic() + CONTROL_TIMEOUT
            while not reply.complete:
                child.control.settimeout(max(0.001, deadline - time.monotonic()))
                message = child.control.recv(CONTROL_MAX)
                if not message:
                    return False
                if not reply.feed(message):
                    self._hear(child, message)
                    if child.farewell.said:
                        return False   # it is stopping: no answer will come
            return True
        except OSError:
            return False

    # ------------------------------------------------------------- children leaving

    def collect_farewell(self, child: Child, deadline: float) -> None:
        """Read a stopping child's last words until ``deadline`` (its figures join the
        retired totals)."""
        self._read_farewell(child, deadline)

    def child_gone(self, child: Child) -> None:
        """For a child just reaped, before its channels close: read whatever it sent
        and no one read (a child stopped by a SIGTERM of its own says its last words
        unasked), then retire its per-method figures. Those of a crashed child are its
        latest answer: what it counted after that is lost with it."""
        self._read_farewell(child, None)
        with self._lock:
            self._retire_methods(child, {})

    def _read_farewell(self, child: Child, deadline: float | None) -> None:
        """Hear ``child`` until its last words are in: until ``deadline``, or, with
        None, only what is already waiting."""
        with child.lock:
            try:
                if deadline is None:
                    child.control.setblocking(False)
                while not child.farewell.said:
                    if deadline is not None:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            return
                        child.control.settimeout(left)
                    message = child.control.recv(CONTROL_MAX)
                    if not message:
                        return
                    self._hear(child, message)
            except OSError:
                return

    def _hear(self, child: Child, message: bytes) -> None:
        """Take ``message`` if it is part of the child's last words; once they are
        complete, its figures join the retired totals (once: later messages are not
        last words)."""
        if not child.farewell.feed(message) or not child.farewell.said:
            return
        assert child.farewell.snapshot is not None
        with self._lock:
            add_retired(self._retired, child.farewell.snapshot)
            self._retire_methods(child, child.farewell.methods.figures or {})

    def _retire_methods(self, child: Child, last: dict[str, MethodSnapshot]) -> None:
        """Move a child's figures to the retired totals: ``last`` (its last words)
        where it has them, its latest answer for the rest (call with the lock held)."""
        figures = newer_stats(self._methods.pop(child, {}), last)
        self._retired_methods = sum_methods([figures], self._retired_methods)
