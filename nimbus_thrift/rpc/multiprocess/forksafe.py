"""Forking a child from a parent whose other threads are logging.

A fork copies every lock as it is at that instant, and in the child no thread is left
to release a lock some other thread of the parent held. A child forked while another
thread of the parent was writing a log line keeps that line's locks held for good:
its first log line blocks its thread forever. In a child of a multi-process server
that thread is the selector (its first ``connection_opened``), so the child reports
ready, is handed connections, and answers none of them (issue 27, item 6: every call
handed to the new child of a rolling restart timed out).

The locks a log line holds, and who resets them in a child:

* logging's module lock and each stdlib handler's lock: reset by the logging module
  itself (``os.register_at_fork``);
* the lock inside the stream a handler writes to (``sys.stderr``'s buffer, a log
  file's): reset by nobody. Seen with pytest's log file handler: the supervisor
  logged ``child_stopped`` while the reload thread forked (ef8977e);
* structlog's lock per output file (``structlog._output.WRITE_LOCKS``), which its
  PrintLogger, WriteLogger and BytesLogger hold around every write and flush -- what
  structlog does when nobody configured it: reset by nobody. Caught by
  scripts/restart_stress.py ``--logging structlog``: 3 restarts in 200 lost 48 calls,
  each time a new child's selector stuck in ``PrintLogger.msg`` on that lock.

So the fork is made holding all of them: logging's module lock, every handler's lock
and every structlog file lock. No thread of the parent is then inside a log write
(which holds one of them for the whole write), so no stream lock is held either. In
the parent they are released after the fork; in the child, logging resets its own and
structlog's are released here.

The locks are taken with a timeout and never waited for while others are held: if
one is not free within LOCK_ATTEMPT seconds, all are released and taken again, so a
thread that holds one and waits for another cannot deadlock with the fork. After
FORK_LOCK_TIMEOUT in all, the fork is refused (:class:`ForkLockTimeout`) rather than
made with a lock held (which is what happened before: the fork went on without it):
a child that would hang on its first line is worse than no new child, and the
caller keeps the old child serving or tries again later.

Not covered: a thread writing to a stream outside logging (``print`` to a buffered
``sys.stderr``, a traceback of a dying thread) at the instant of the fork; the
library writes nothing so.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

#: Seconds the fork waits in all for the locks before it is refused (a line is
#: written in microseconds; this bounds the wait behind a stream that takes no bytes).
FORK_LOCK_TIMEOUT = 5.0
#: Seconds one attempt waits for each lock before it lets go of all and starts over.
LOCK_ATTEMPT = 0.05


class ForkLockTimeout(OSError):
    """The logging locks were not all free within the timeout: no fork was made."""

    def __init__(self, what: str, timeout: float) -> None:
        super().__init__(f"{what} was not free within {timeout}s: not forking a child "
                         "that would hang on its first log line")
        self.what = what
        self.timeout = timeout


def _handlers() -> list[logging.Handler]:
    """Every handler of every logger (each once)."""
    manager = logging.Logger.manager
    loggers = [logging.getLogger(),
               *(lg for lg in list(manager.loggerDict.values())
                 if isinstance(lg, logging.Logger))]
    found: dict[int, logging.Handler] = {}
    for lg in loggers:
        for handler in list(lg.handlers):
            found[id(handler)] = handler
    return list(found.values())


def _structlog_locks() -> list[Any]:
    """structlog's lock per output file (none if structlog is not loaded)."""
    try:
        from structlog import _output
    except ImportError:
        return []
    locks = getattr(_output, "WRITE_LOCKS", None)
    if locks is None:
        return []
    while True:
        try:
            return list(locks.values())
        except RuntimeError:   # a weak key died during the copy: copy again
            continue


def _logging_locks() -> tuple[list[tuple[str, Any]], list[tuple[str, Any]]]:
    """(the locks logging resets in a child itself, the locks nobody resets), in the
    order they are taken: the module lock first, as logging.basicConfig and
    logging.config take it before a handler's."""
    reset: list[tuple[str, Any]] = []
    module_lock = getattr(logging, "_lock", None)
    if module_lock is not None:
        reset.append(("logging's module lock", module_lock))
    for handler in _handlers():
        if handler.lock is not None:
            reset.append((f"the lock of log handler {handler!r}", handler.lock))
    kept = [(f"structlog's write lock #{n}", lock)
            for n, lock in enumerate(_structlog_locks())]
    return reset, kept


def _take_all(locks: list[tuple[str, Any]], deadline: float) -> list[Any]:
    """Take every lock, each within LOCK_ATTEMPT; on a miss release all and start over
    until ``deadline``. Returns them in the order taken.

    Raises:
        ForkLockTimeout: ``deadline`` passed.
    """
    while True:
        held: list[Any] = []
        missed = ""
        for what, lock in locks:
            wait = min(LOCK_ATTEMPT, max(0.0, deadline - time.monotonic()))
            if not lock.acquire(timeout=wait):
                missed = what
                break
            held.append(lock)
        if not missed:
            return held
        for lock in reversed(held):
            lock.release()
        if time.monotonic() >= deadline:
            raise ForkLockTimeout(missed, FORK_LOCK_TIMEOUT)
        time.sleep(0.001)   # let the holder finish its line before the next attempt


def fork_holding_log_locks(fork: Callable[[], int] = os.fork) -> int:
    """``os.fork()`` with every logging lock held across it (see the module
    docstring). Returns as ``os.fork()``: 0 in the child, whose copies of the locks are
    free, the child's pid in the parent.

    Raises:
        ForkLockTimeout: a lock was not free within FORK_LOCK_TIMEOUT; nothing forked.
        OSError: the fork failed.
    """
    reset, kept = _logging_locks()
    held = _take_all(reset + kept, time.monotonic() + FORK_LOCK_TIMEOUT)
    pid = -1
    try:
        pid = fork()
    finally:
        if pid == 0:
            # The child: logging has reset its own locks (at-fork hooks; one it did not
            # know of is still ours, and let go here); structlog's are released here
            # (a plain Lock may be released by any thread).
            for lock in reversed(held[len(reset):]):
                lock.release()
            for lock in reversed(held[:len(reset)]):
                owned = getattr(lock, "_is_owned", None)
                while owned is not None and owned():
                    lock.release()
        else:   # the parent, or a failed fork
            for lock in reversed(held):
                lock.release()
    return pid
