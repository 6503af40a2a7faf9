"""Forking a child from a parent whose other threads are logging.

A fork copies every lock as it is at that instant, and in the child no thread is left
to release a lock some other thread of the parent held. The logging module resets its
handlers' locks in a new child, but not the lock inside the stream a handler writes
to (``sys.stderr``'s buffer, a log file's): a parent thread that was writing a line
when another thread forked leaves that lock held for good in the child, and the
child's first log line blocks its thread forever. Seen in
tests/sockets/test_server_processes.py (about 1 run in 8): in a rolling restart the
supervisor logs ``child_stopped`` while the reload thread forks the next child, whose
selector then hangs on its first ``connection_opened`` line (with its stack dumped,
in ``StreamHandler.flush``) and misses every call handed to it.

So the fork is made holding every handler's lock: no thread of the parent is then
inside a handler's write. A lock not free within FORK_LOCK_TIMEOUT (a stream stuck on
a full pipe) is not waited for longer: the fork goes on without it, as before.
"""

from __future__ import annotations

import logging
import os
import threading
import time

#: Seconds the fork waits in all for the handlers' locks (a line is written in
#: microseconds; this bounds the wait behind a stream that does not take its bytes).
FORK_LOCK_TIMEOUT = 1.0


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


def fork_holding_log_locks() -> int:
    """``os.fork()`` with every logging handler's lock held across it (see the module
    docstring). Returns as ``os.fork()``: 0 in the child, whose copies of the locks
    the logging module has reset, the child's pid in the parent.

    Raises:
        OSError: the fork failed.
    """
    held: list[threading.RLock] = []
    deadline = time.monotonic() + FORK_LOCK_TIMEOUT
    pid = -1
    try:
        for handler in _handlers():
            lock = handler.lock
            if lock is not None and \
                    lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
                held.append(lock)
        pid = os.fork()
    finally:
        if pid != 0:   # the parent (or a failed fork): the child's were reset
            for lock in reversed(held):
                lock.release()
    return pid
