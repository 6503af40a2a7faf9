"""The way back from the workers: what a worker does with a request it took from the
pool (decode, call, encode, write the reply) and the queue of outcomes it leaves for
the selector thread to book, with the wake-up that tells the selector to look.

:class:`HandBack` is that hand-back as an object of its own, as gunicorn's gthread
keeps its queue: the selector holds one (``Selector.back``), gives its
:meth:`~HandBack.run_task` to the worker pool, and drains :attr:`~HandBack.done`. The
state both sides touch lives here and nowhere else: the queue, its lock, the wake-up,
the unsent-reply counts that cap them, and the stop flag. A worker reaches it in one
attribute hop, as it did when this was a base class of the selector; the selector pays
one hop per pass (``back.done`` is a local of its loop), not per call.

Also :func:`send_now`, how a reply is written without waiting, by a worker or by the
selector. Imported by selector.py.
"""

from __future__ import annotations

import threading
from collections import deque
from time import perf_counter
from typing import Any

import structlog

from .channel import Channel
from .dispatch import Dispatcher, Reply, Status
from .fastio import send, sendmsg
from .inline import InlinePolicy, request_key
from .memory import MemoryBudget
from .wakeup import Wakeup

log = structlog.get_logger(__name__)

#: One booked outcome: (channel, unsent buffers, status, whether a reply was produced).
Outcome = tuple[Channel, Any, Status, bool]


class HandBack:
    """The worker side of a request, and the outcome queue it shares with the selector.

    Workers write :attr:`done` (and read the flags); the selector books and clears it.
    ``policy`` is the selector's :class:`~.inline.InlinePolicy`: workers time every call
    for it.
    """

    def __init__(self, dispatcher: Dispatcher, policy: InlinePolicy, budget: MemoryBudget,
                 max_unsent_reply_bytes: int) -> None:
        self.dispatcher = dispatcher
        self.policy = policy
        self._budget = budget
        self.wakeup = Wakeup()
        #: Outcomes queued by workers and booked by the selector.
        self.done: deque[Outcome] = deque()
        #: Guards ``done`` against the end of the selector (``finished``) and the waits
        #: for room below; the selector holds it while it closes what is left at stop.
        self.lock = threading.Lock()
        #: The selector has stopped: a worker closes its connection's socket itself.
        self.finished = False
        #: Reply bytes the selector holds for slow readers (it alone writes this; see
        #: Selector._hold_output) and the cap on them.
        self.unsent_bytes = 0
        self._unsent_cap = max_unsent_reply_bytes
        #: Reply bytes in ``done`` that the socket did not take, not yet booked. They
        #: count against the same cap: a worker that would pass it waits for the
        #: selector (which closes the slowest readers to make room) instead of piling
        #: up replies nobody reads (1,000 unread 900 KB replies held 190 of them here).
        self.queued_unsent = 0
        self._room = threading.Condition(self.lock)
        #: Set by Selector.request_stop (from any thread); read by the workers and the
        #: selector.
        self.stop_requested = False

    def run_task(self, task: tuple[Any, ...]) -> None:
        """Decode, call, encode -- and write the reply from this worker thread.

        Why the worker writes (the one place a thread other than the selector touches a
        socket): handing the reply back costs a socketpair write, an epoll wake-up and a
        GIL hand-off to the selector per batch, and delays every reply until the
        selector runs. Writing here sends it at once; the selector only books the
        outcome on its next pass, woken only when it has something to do (the reply did
        not fit the socket buffer, pipelined bytes wait, frames wait for memory, the
        server is stopping, or the connection must close). This is safe because while a
        connection is PROCESSING the selector neither writes to nor closes its socket
        (closing is deferred, see ``Lifetime.close``; ``Lifetime.finish`` coordinates
        through :attr:`lock`). Measured with scripts/bench.sh, see docs/benchmarks.md.
        """
        ch, frame = task
        conn = ch.conn
        key = request_key(frame) if self.policy.enabled else None
        started = perf_counter()
        try:
            reply, status = self.dispatcher.dispatch(frame, conn.peer, conn.principal)
        except BaseException:  # noqa: BLE001 - a bug must not strand the connection
            log.exception("dispatch_crashed", peer=conn.peer, effect="connection closed")
            reply, status = None, Status.CLOSE
        if key is not None:
            self.policy.ran(key, perf_counter() - started)
        self.deliver(ch, reply, status)

    def deliver(self, ch: Channel, reply: Reply | None, status: Status) -> None:
        """Write the reply of a request run outside the selector's pass and queue its
        outcome for the selector to book (a worker's way back; also that of a selector
        thread that was taken over in the middle of an inline call, inline.py)."""
        unsent: Any = None
        if reply is not None and status is not Status.CLOSE:
            unsent = send_now(ch.io, reply)
        with self.lock:
            if unsent and unsent is not WRITE_FAILED:
                self._wait_for_room(held_size(unsent))
            if self.finished:
                ch.sock.close()  # the selector is gone; nobody else will
                return
            self.done.append((ch, unsent, status, reply is not None))
        # Wake the selector only if it must act now. `interest is None`: it already saw
        # the client's next bytes (or EOF) and stopped polling the socket until this
        # outcome is booked. Each check is made after the append, and the selector
        # checks `done` after saying it sleeps, so no wake-up is lost.
        if unsent or ch.interest is None or ch.conn.leftover or status is Status.CLOSE \
                or self._budget.parked or self.stop_requested:
            self.wakeup.wake()

    def _wait_for_room(self, size: int) -> None:
        """With :attr:`lock` held: queue ``size`` more unsent reply bytes, first
        waiting while the queued and held ones are past the cap. Never waits while
        nothing else is queued, so one reply larger than the cap still goes out."""
        while self.queued_unsent and not self.finished and not self.stop_requested \
                and self.queued_unsent + self.unsent_bytes + size > self._unsent_cap:
            self.wakeup.wake()
            self._room.wait(0.5)
        self.queued_unsent += size

    def booked_unsent(self, size: int) -> None:
        """The selector took ``size`` queued unsent bytes off ``done`` (called rarely:
        only for replies the socket did not take)."""
        with self.lock:
            self.queued_unsent -= size
            self._room.notify_all()

    def shut(self) -> list[Outcome]:
        """With :attr:`lock` held, at the selector's end: from now on workers close
        their sockets themselves, and those waiting to queue a reply give up. Returns
        the outcomes that came back too late to be booked."""
        self.finished = True
        self._room.notify_all()
        late = list(self.done)
        self.done.clear()
        return late


def held_size(unsent: list[Any]) -> int:
    """Bytes kept alive by the unsent ``buffers``: the whole of each buffer a view
    points into, not just the view."""
    size = 0
    for buf in unsent:
        size += memoryview(buf.obj).nbytes if isinstance(buf, memoryview) else len(buf)
    return size


#: Marks an outcome whose reply could not be written (the peer is gone). Truthy, so a
#: worker holding it wakes the selector.
WRITE_FAILED: list[Any] = [b"write failed"]


def send_now(io: Any, reply: Reply) -> list[Any]:
    """Send the frame ``reply`` (see :data:`~nimbus_thrift.rpc.dispatch.Reply`) on a
    nonblocking socket without waiting: return what the socket did not take ([] when
    all went), or :data:`WRITE_FAILED`."""
    if isinstance(reply, list):
        try:
            sent = sendmsg(io, reply)
        except (BlockingIOError, InterruptedError):
            return reply
        except OSError:
            return WRITE_FAILED
        return unsent_part(reply, sent)
    try:
        sent = send(io, reply)
    except (BlockingIOError, InterruptedError):
        return [reply]
    except OSError:
        return WRITE_FAILED
    return [] if sent == len(reply) else [memoryview(reply)[sent:]]


def unsent_part(buffers: list[Any], sent: int) -> list[Any]:
    """What is left of ``buffers`` after the first ``sent`` bytes went out."""
    rest: list[Any] = []
    for buf in buffers:
        size = len(buf)
        if sent >= size:
            sent -= size
            continue
        rest.append(memoryview(buf)[sent:])
        sent = 0
    return rest
