"""Socket tier: the locks a log line holds, at the fork of a multi-process server's
child (rpc/multiprocess/forksafe.py; issue 27, item 6).

A child forked while another thread of the parent holds such a lock keeps it held for
good and hangs on its first log line; a new child of a rolling restart then reports
ready and answers no call handed to it. Each test below holds one of them in another
thread at the fork, with real forks.
"""

from __future__ import annotations

import logging
import os
import threading
import time

import pytest
import structlog

from nimbus_thrift.rpc.multiprocess import forksafe
from nimbus_thrift.rpc.multiprocess.forksafe import ForkLockTimeout, fork_holding_log_locks

from support.rawthrift import wait_for
from test_server_processes import pid_of_call, serve


class SlowStream:
    """A stream whose write blocks until ``go_on`` is set, so a writer holds whatever
    lock its logger takes around the write for as long as the test wants."""

    def __init__(self) -> None:
        self.writing = threading.Event()
        self.go_on = threading.Event()
        self.lines: list[str] = []

    def write(self, text: str) -> None:
        self.writing.set()
        self.go_on.wait(10)
        self.lines.append(text)

    def flush(self) -> None:
        pass


def exit_code_within(pid: int, timeout: float) -> int | None:
    """The child's exit code, or None if it has not exited within ``timeout`` (it is
    then killed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)   # polling a child's exit, bounded by the deadline
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return None


def fork_while_writing(write_line) -> int | None:
    """Fork while another thread is inside ``write_line()`` (held 0.2 s more); the
    child calls ``write_line()`` itself. The child's exit code (0: it wrote its line)
    or None (it hung)."""
    writer = threading.Thread(target=write_line)
    stream = write_line.stream
    release = threading.Timer(0.2, stream.go_on.set)
    try:
        writer.start()
        assert stream.writing.wait(5)
        release.start()
        pid = fork_holding_log_locks()
        if pid == 0:   # the child: write a line, then leave at once, whatever happens
            code = 1
            try:
                stream.go_on.set()
                write_line()
                code = 0
            finally:
                os._exit(code)
        return exit_code_within(pid, 5.0)
    finally:
        stream.go_on.set()
        release.cancel()
        writer.join(5)


def test_a_child_forked_while_a_structlog_printlogger_writes_can_log() -> None:
    """structlog unconfigured prints through PrintLogger, which holds its lock per
    file around each write: found holding it in a hung child by restart_stress.py."""
    stream = SlowStream()
    logger = structlog.PrintLogger(file=stream)  # type: ignore[arg-type]

    def write_line() -> None:
        logger.msg("a line")
    write_line.stream = stream  # type: ignore[attr-defined]

    assert fork_while_writing(write_line) == 0, "the child hangs on structlog's lock"


def test_a_child_forked_while_a_stdlib_handler_writes_can_log() -> None:
    stream = SlowStream()
    handler = logging.StreamHandler(stream)  # type: ignore[arg-type]
    logger = logging.getLogger(f"{__name__}.slow")
    logger.addHandler(handler)
    logger.propagate = False

    def write_line() -> None:
        logger.warning("a line")
    write_line.stream = stream  # type: ignore[attr-defined]

    try:
        assert fork_while_writing(write_line) == 0, "the child hangs on the stream lock"
    finally:
        logger.removeHandler(handler)


def test_a_lock_held_past_the_timeout_refuses_the_fork_and_holds_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Forking anyway (what the code did) would give a child that hangs on its first
    line; refused, nothing is forked and every lock taken is given back."""
    monkeypatch.setattr(forksafe, "FORK_LOCK_TIMEOUT", 0.3)
    handler = logging.StreamHandler(SlowStream())  # type: ignore[arg-type]
    logger = logging.getLogger(f"{__name__}.stuck")
    logger.addHandler(handler)
    forks: list[int] = []
    handler.acquire()    # held by this thread: the forking thread below cannot take it
    try:
        outcome: list[BaseException] = []

        def forker() -> None:
            try:
                fork_holding_log_locks(fork=lambda: forks.append(1) or 1)
            except BaseException as exc:  # noqa: BLE001 - the test looks at it
                outcome.append(exc)

        thread = threading.Thread(target=forker)
        started = time.monotonic()
        thread.start()
        thread.join(5)
        assert len(outcome) == 1 and isinstance(outcome[0], ForkLockTimeout)
        assert "log handler" in str(outcome[0])
        assert 0.3 <= time.monotonic() - started < 3
        assert forks == []
    finally:
        handler.release()
        logger.removeHandler(handler)
    # Every other lock was given back: logging's own, and the root's handlers'.
    taken = []

    def take() -> None:
        taken.append(logging._lock.acquire(timeout=1))  # type: ignore[attr-defined]
        logging._lock.release()  # type: ignore[attr-defined]
        for h in logging.getLogger().handlers:
            if h.lock is not None:   # a NullHandler has none
                taken.append(h.lock.acquire(timeout=1))
                h.release()
    other = threading.Thread(target=take)
    other.start()
    other.join(5)
    assert taken and all(taken)


def test_a_reload_that_cannot_fork_keeps_the_old_children_serving(
        demo, logs, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forksafe, "FORK_LOCK_TIMEOUT", 0.3)
    server = serve(demo)
    handler = logging.StreamHandler(SlowStream())  # type: ignore[arg-type]
    logger = logging.getLogger(f"{__name__}.stuck-reload")
    logger.addHandler(handler)
    try:
        before = server.children()
        handler.acquire()   # the reload thread cannot take it
        try:
            server.reload()
            wait_for(lambda: any(e["event"] == "reload_done" for e in logs), timeout=10,
                     what="the reload")
            refused = [e for e in logs if e["event"] == "child_not_forked"]
            assert [e["slot"] for e in refused] == [0, 1]
            assert "log handler" in refused[0]["error"]
            assert server.children() == before
            assert {pid_of_call(demo, server.address) for _ in range(10)} <= set(before)
        finally:
            handler.release()
        # Once the lock is free, the next reload forks as usual.
        server.reload()
        wait_for(lambda: len(server.children()) == 2
                 and not set(server.children()) & set(before), timeout=30,
                 what="both children replaced")
        assert pid_of_call(demo, server.address) in server.children()
    finally:
        logger.removeHandler(handler)
        server.stop(grace=5.0)
