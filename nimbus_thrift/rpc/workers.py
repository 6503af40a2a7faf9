"""A fixed pool of worker threads with a bounded queue, in two lanes.

Theory of operation
-------------------
The selector submits a pass's worth of requests at once and wakes at most one sleeping
worker; a burst of fast calls is then drained by one thread without a context switch
per call (on one core every needless wake-up is a GIL hand-off). A slow handler must
not hold up the queue behind it, and there are two ways to see to that:

* unwatched (the default): a worker that takes a task while more are queued wakes one
  more before it starts. Simple, but a big batch of fast calls wakes every worker in
  turn, and they pass the GIL around: measured at 256 connections, 38k calls/s against
  65k without it;
* watched (the server's): the owner calls :meth:`claim_wake` with the time at least
  every :data:`STALL_SECS` while tasks are queued (the selector bounds its poll to
  that). Another worker is woken only when no task has started for that long, which
  is what a handler blocking (on I/O, a lock, a long computation) looks like.

A sleeping worker waits on an eventfd of its own (LIFO, so the warmest thread runs).
The selector may defer the wake-up (``submit_many(..., wake=False)`` then
:meth:`claim_wake`) and write the eventfd itself right after it releases the GIL to wait
in epoll: woken earlier, the worker would be scheduled only to block on the GIL the
selector still holds, two context switches for nothing.

The queue has two lanes: workers take from ``ahead`` before ``tasks``. The owner
decides which lane a task joins (the selector: a client address with few requests in
the pool goes ahead of one with many, so one client queueing a thousand requests
delays the others by a handful, not by a thousand). Both lanes count against
``queue_size``.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

import structlog

log = structlog.get_logger(__name__)

Task = tuple[Any, ...]

#: Watched pools: queued tasks wait at most about this long behind a handler that
#: blocks before another worker is woken for them.
STALL_SECS = 0.002


class WorkerPool:
    """``size`` threads running ``run(task)`` for tasks from a queue bounded at
    ``queue_size``. ``run`` must not raise (exceptions are logged and dropped).
    ``watched``: see the module docstring."""

    def __init__(self, size: int, queue_size: int, run: Callable[[Task], None],
                 name: str = "nimbus-worker", watched: bool = False) -> None:
        self.size = size
        self.queue_size = queue_size
        self.watched = watched
        self._run = run
        self._started = 0                       # tasks taken so far (watched pools)
        self._seen_started = 0                  # ... at the last stall check
        self._seen_at = 0.0                     # when the count last moved
        self._tasks: deque[Task] = deque()
        self._ahead: deque[Task] = deque()      # taken first (see the module docstring)
        self._mutex = threading.Lock()
        self._idle: list[int] = []             # parked workers' eventfds, LIFO (warm caches)
        self._waking = 0                        # woken but not yet running a task
        self._stopping = False
        self._threads = [threading.Thread(target=self._loop, name=f"{name}-{i}", daemon=True)
                         for i in range(size)]
        for thread in self._threads:
            thread.start()

    @property
    def depth(self) -> int:
        """Tasks queued and not yet taken by a worker."""
        return len(self._tasks) + len(self._ahead)

    @property
    def sleeping(self) -> int:
        """Workers parked, waiting for a wake-up."""
        return len(self._idle)

    def room(self) -> int:
        """How many more tasks the queue accepts now."""
        return self.queue_size - len(self._tasks) - len(self._ahead)

    def submit_many(self, tasks: Iterable[Task], wake: bool = True,
                    ahead: Iterable[Task] = ()) -> None:
        """Queue ``tasks``, and ``ahead`` in the lane taken first (the caller checked
        :meth:`room`), and wake one worker if needed. With ``wake=False`` the caller
        must call :meth:`claim_wake` soon and write the descriptor it returns."""
        self._ahead.extend(ahead)
        self._tasks.extend(tasks)
        if wake:
            self._wake_one()

    def claim_wake(self, now: float = 0.0) -> int:
        """The eventfd of a sleeping worker to wake for the queued tasks (the caller
        writes it, see :func:`wake_fd`), or -1 when none is needed. ``now``
        (``time.monotonic()``) is a watched pool's stall check."""
        # The selector asks every pass: skip the mutex when nothing is queued or nobody
        # sleeps. No wake-up is lost: a worker looks at the queue again, under the mutex,
        # before it parks.
        if not (self._tasks or self._ahead) or not self._idle:
            return -1
        if self.watched and len(self._idle) < self.size:
            # A worker is awake and will take the queue, unless a handler holds it up.
            if self._started != self._seen_started:
                self._seen_started = self._started
                self._seen_at = now
                return -1
            if now - self._seen_at < STALL_SECS:
                return -1
            self._seen_at = now
        with self._mutex:
            if self._waking or not self._idle or not (self._tasks or self._ahead):
                return -1
            self._waking += 1
            return self._idle.pop()

    def _wake_one(self) -> None:
        fd = self.claim_wake()
        if fd >= 0:
            wake_fd(fd)

    def _loop(self) -> None:
        me = os.eventfd(0, os.EFD_CLOEXEC)
        tasks = self._tasks
        ahead = self._ahead
        try:
            while True:
                try:
                    task = ahead.popleft() if ahead else tasks.popleft()
                except IndexError:
                    with self._mutex:
                        if self._stopping:
                            return
                        if tasks or ahead:
                            continue
                        self._idle.append(me)
                    os.eventfd_read(me)     # sleep until a wake-up or stop writes it
                    with self._mutex:
                        self._waking -= 1
                        if self._stopping and not (tasks or ahead):
                            return
                    continue
                self._started += 1
                if (tasks or ahead) and self._idle and not self.watched:
                    self._wake_one()
                try:
                    self._run(task)
                except BaseException:  # noqa: BLE001 - a worker must survive anything
                    log.exception("worker_task_crashed")
        finally:
            os.close(me)

    def discard_queued(self) -> list[Task]:
        """Take every task no worker has started (at stop, past the grace period)."""
        taken = []
        for lane in (self._ahead, self._tasks):
            while True:
                try:
                    taken.append(lane.popleft())
                except IndexError:
                    break
        return taken

    def stop(self, timeout: float | None = None) -> int:
        """Let queued tasks run, then end the threads; wait up to ``timeout`` seconds.
        Returns how many threads are still running a task (a handler that never ends)."""
        with self._mutex:
            self._stopping = True
            idle, self._idle = self._idle, []
            self._waking += len(idle)
            # Written under the mutex: a worker closes its eventfd only after taking it.
            for fd in idle:
                wake_fd(fd)
        end = None if timeout is None else time.monotonic() + timeout
        for thread in self._threads:
            thread.join(None if end is None else max(0.0, end - time.monotonic()))
        return sum(thread.is_alive() for thread in self._threads)


def wake_fd(fd: int) -> None:
    """Wake the worker sleeping on eventfd ``fd`` (from :meth:`WorkerPool.claim_wake`)."""
    os.eventfd_write(fd, 1)
