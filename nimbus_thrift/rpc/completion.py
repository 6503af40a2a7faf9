"""The way back from the workers: what a worker does with a request it took from the
pool (decode, call, encode, write the reply) and the queue of outcomes it leaves for
the selector thread to book, with the wake-up that tells the selector to look.

:class:`Completion` holds the state both sides touch, and
:class:`~nimbus_thrift.rpc.selector.Selector` extends it: the selector and the workers
reach that state as attributes of one object, as they did when both were methods of
the server, so the split costs neither side's per-call path an attribute hop (a
separate object would add one to every reply, on both sides).

Also :func:`send_now`, how a reply is written without waiting, by a worker or by the
selector. Imported by selector.py.
"""

from __future__ import annotations

import threading
from collections import deque
from time import perf_counter
from typing import Any

import structlog

from .connection import Connection
from .dispatch import Dispatcher, Reply, Status
from .fastio import send, sendmsg
from .inline import InlinePolicy, request_key
from .memory import MemoryBudget
from .wakeup import Wakeup

log = structlog.get_logger(__name__)


class Completion:
    """The worker side of a request, and the outcome queue it shares with the selector.

    Workers write :attr:`done` (and read the flags); the selector books and clears it.
    """

    def __init__(self, dispatcher: Dispatcher, budget: MemoryBudget,
                 max_unsent_reply_bytes: int, inline_calls: bool = True) -> None:
        self.dispatcher = dispatcher
        #: Which methods are fast enough for the selector to run itself (inline.py);
        #: workers time every call for it.
        self.policy = InlinePolicy(enabled=inline_calls)
        self._budget = budget
        self.wakeup = Wakeup()
        #: (connection, unsent buffers, status, whether a reply was produced), queued by
        #: workers and booked by the selector.
        self.done: deque[tuple[Connection, Any, Status, bool]] = deque()
        self._finish_lock = threading.Lock()
        self._finished = False
        #: Reply bytes the selector holds for slow readers (it alone writes this; see
        #: Selector._hold_output) and the cap on them.
        self.unsent_bytes = 0
        self._unsent_cap = max_unsent_reply_bytes
        #: Reply bytes in ``done`` that the socket did not take, not yet booked. They
        #: count against the same cap: a worker that would pass it waits for the
        #: selector (which closes the slowest readers to make room) instead of piling
        #: up replies nobody reads (1,000 unread 900 KB replies held 190 of them here).
        self.queued_unsent = 0
        self._room = threading.Condition(self._finish_lock)
        #: Set by Server.stop (from any thread); read by the workers and the selector.
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
        (closing is deferred, see ``Selector._close``; ``Lifetime._finish`` coordinates
        through ``_finish_lock``). Measured with scripts/bench.sh, see the README.
        """
        conn, frame = task
        key = request_key(frame) if self.policy.enabled else None
        started = perf_counter()
        try:
            reply, status = self.dispatcher.dispatch(frame, conn.peer, conn.principal)
        except BaseException:  # noqa: BLE001 - a bug must not strand the connection
            log.exception("dispatch_crashed", peer=conn.peer, effect="connection closed")
            reply, status = None, Status.CLOSE
        if key is not None:
            self.policy.ran(key, perf_counter() - started)
        self.deliver(conn, reply, status)

    def deliver(self, conn: Connection, reply: Reply | None, status: Status) -> None:
        """Write the reply of a request run outside the selector's pass and queue its
        outcome for the selector to book (a worker's way back; also that of a selector
        thread that was taken over in the middle of an inline call, inline.py)."""
        unsent: Any = None
        if reply is not None and status is not Status.CLOSE:
            unsent = send_now(conn.io, reply)
        with self._finish_lock:
            if unsent and unsent is not WRITE_FAILED:
                self._wait_for_room(held_size(unsent))
            if self._finished:
                assert conn.sock is not None    # set when the connection was accepted
                conn.sock.close()  # the selector is gone; nobody else will
                return
            self.done.append((conn, unsent, status, reply is not None))
        # Wake the selector only if it must act now. `interest is None`: it already saw
        # the client's next bytes (or EOF) and stopped polling the socket until this
        # outcome is booked. Each check is made after the append, and the selector
        # checks `done` after saying it sleeps, so no wake-up is lost.
        if unsent or conn.interest is None or conn.leftover or status is Status.CLOSE \
                or self._budget.parked or self.stop_requested:
            self.wakeup.wake()

    def _wait_for_room(self, size: int) -> None:
        """With ``_finish_lock`` held: queue ``size`` more unsent reply bytes, first
        waiting while the queued and held ones are past the cap. Never waits while
        nothing else is queued, so one reply larger than the cap still goes out."""
        while self.queued_unsent and not self._finished and not self.stop_requested \
                and self.queued_unsent + self.unsent_bytes + size > self._unsent_cap:
            self.wakeup.wake()
            self._room.wait(0.5)
        self.queued_unsent += size

    def booked_unsent(self, size: int) -> None:
        """The selector took ``size`` queued unsent bytes off ``done`` (called rarely:
        only for replies the socket did not take)."""
        with self._finish_lock:
            self.queued_unsent -= size
            self._room.notify_all()


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
