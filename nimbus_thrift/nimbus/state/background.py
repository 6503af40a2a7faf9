"""Launcher operations run in the background, in order per topology.

A launcher call can take long (stopping a Spark application waits up to
``stop_grace_secs`` + 5 s; rebalancing stops it first). The handler commits the intent,
queues the call here and answers the client (an RPC waits a short, configured moment,
so a quick launcher's outcome is still in the reply); the outcome shows in the
topology's status and errors. Each topology's calls run one at a time, in the order they
were queued (pause before stop, rebalance before a later resume), on a thread that
exists only while the topology has calls pending; different topologies never wait for
each other.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Callable

import structlog

log = structlog.get_logger(__name__)


class Job:
    """One queued call; ``done`` is set once it ran (or was dropped at close)."""

    __slots__ = ("func", "what", "done")

    def __init__(self, func: Callable[[], object], what: str):
        self.func = func
        self.what = what
        self.done = threading.Event()

    def wait(self, timeout: float) -> bool:
        """True when the job finished within ``timeout`` seconds."""
        return self.done.wait(timeout) if timeout > 0 else self.done.is_set()


class SerialQueues:
    """Per-key FIFO queues, each drained by its own short-lived thread."""

    def __init__(self, thread_prefix: str = "nimbus-launcher"):
        self._prefix = thread_prefix
        self._cond = threading.Condition()
        self._queues: dict[str, deque[Job]] = {}
        self._closed = False

    def submit(self, key: str, func: Callable[[], object], what: str = "") -> Job:
        """Queue ``func`` behind ``key``'s pending calls; return its job."""
        job = Job(func, what)
        with self._cond:
            if self._closed:
                log.warning("background_call_dropped", key=key, call=what,
                            reason="the daemon is stopping")
                job.done.set()
                return job
            queue = self._queues.get(key)
            start = queue is None
            if queue is None:
                queue = self._queues[key] = deque()
            queue.append(job)
        if start:
            threading.Thread(target=self._drain, args=(key,), daemon=True,
                             name=f"{self._prefix}-{key[:40]}").start()
        return job

    def busy(self, key: str) -> bool:
        """True while ``key`` has calls queued or running."""
        with self._cond:
            return key in self._queues

    def pending(self) -> int:
        """Calls queued or running, over every key."""
        with self._cond:
            return sum(len(q) for q in self._queues.values())

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until no call is queued or running; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._queues, timeout)

    def close(self, timeout: float) -> None:
        """Run nothing new; wait up to ``timeout`` for the calls running now. Calls still
        queued are dropped: their intent is committed, and a restarted daemon redoes it
        (``recover`` launches every topology and re-arms every timer)."""
        with self._cond:
            self._closed = True
            dropped = 0
            for queue in self._queues.values():
                while len(queue) > 1:
                    queue.pop().done.set()
                    dropped += 1
        if dropped:
            log.info("background_calls_dropped", count=dropped, reason="daemon stopping")
        if not self.wait_idle(timeout):
            log.warning("background_calls_still_running", count=self.pending())

    def _drain(self, key: str) -> None:
        while True:
            with self._cond:
                queue = self._queues[key]
                if not queue:
                    del self._queues[key]
                    self._cond.notify_all()
                    return
                job = queue[0]
            try:
                job.func()
            except Exception:  # noqa: BLE001 - one failed call must not stop the queue
                log.exception("background_call_failed", key=key, call=job.what)
            finally:
                with self._cond:
                    queue.popleft()
                    job.done.set()
                    self._cond.notify_all()
