"""Fakes tier: rpc/forksafe.py, a fork made while another thread is writing a log line.

The stream below has a lock of its own, as sys.stderr's buffer has; a fork made while
another thread holds it leaves it held for good in the child.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from nimbus_thrift.rpc.multiprocess.forksafe import fork_holding_log_locks


class SlowStream:
    """A stream whose write holds its lock until ``go_on`` is set."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.writing = threading.Event()
        self.go_on = threading.Event()

    def write(self, text: str) -> None:
        with self.lock:
            self.writing.set()
            self.go_on.wait(10)

    def flush(self) -> None:
        with self.lock:
            pass


def test_a_child_forked_while_another_thread_logs_can_log() -> None:
    stream = SlowStream()
    handler = logging.StreamHandler(stream)  # type: ignore[arg-type]
    logger = logging.getLogger(f"{__name__}.slow")
    logger.addHandler(handler)
    logger.propagate = False
    writer = threading.Thread(target=logger.warning, args=("a line",))
    # What the writer holds the stream for: the fork must wait it out, not copy it.
    release = threading.Timer(0.2, stream.go_on.set)
    pid = -1
    try:
        writer.start()
        assert stream.writing.wait(5)
        release.start()
        pid = fork_holding_log_locks()
        if pid == 0:   # the child: log a line, then leave at once, whatever happens
            code = 1
            try:
                logger.warning("the child's line")
                code = 0
            finally:
                os._exit(code)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                assert os.waitstatus_to_exitcode(status) == 0
                pid = -1
                break
            time.sleep(0.01)
        assert pid == -1, "the child hangs on the stream lock it was forked with"
    finally:
        if pid > 0:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        stream.go_on.set()
        release.cancel()
        writer.join(5)
        logger.removeHandler(handler)
