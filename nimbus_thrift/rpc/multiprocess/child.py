"""A multi-process server's child, from the fork to its exit (rpc/multiprocess/processes.py forks
it): build the server on the handoff channel, report ready, answer the parent's
requests for its metrics and per-method figures, and stop gracefully when told to, on
SIGTERM, or when the parent is gone, with its last figures as its last words (the
messages are in rpc/multiprocess/control.py).
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Callable
from typing import NoReturn, Protocol

import structlog

from .control import CONTROL_MAX, FINAL_SEQ, encode_methods, encode_snapshot, parse_seq
from .handoff import HandoffListener
from ..methodstats import MethodSnapshot
from ..metrics import MetricsSnapshot
from ..options import ServerOptions

log = structlog.get_logger(__name__)

#: The grace of a stop, as Server.stop's default.
DEFAULT_STOP_GRACE = 10.0
#: Seconds a child waits for room on its control channel to send an answer or its last
#: words: a parent that stopped reading (it gave up on a slow answer, or is gone) must
#: not keep the child from asking for the next request or from exiting.
SEND_TIMEOUT = 5.0


class ChildServer(Protocol):
    """What a child runs: a :class:`~nimbus_thrift.rpc.server.Server` (named by its
    methods, so that this package's lower modules do not import server.py)."""

    def start(self) -> tuple[str, int]: ...

    def stop(self, grace: float = ...) -> None: ...

    def metrics(self) -> MetricsSnapshot: ...

    def method_metrics(self) -> dict[str, MethodSnapshot]: ...


#: Builds a child's server: it accepts from the given listener (the child's end of its
#: handoff channel), with the child's options, and reports the given address.
ChildFactory = Callable[[socket.socket, ServerOptions, tuple[str, int]], ChildServer]


class _StopSignal(Exception):
    """Raised in a child's main thread by SIGTERM."""


def _raise_stop(signum: int, frame: object) -> None:
    raise _StopSignal


def _send(control: socket.socket, messages: list[bytes]) -> None:
    """Send ``messages`` (one answer), each waiting at most SEND_TIMEOUT for room. An
    answer the parent does not take is dropped: it has given up on it (and skips what
    it reads of it later), or it is gone (the next read sees that)."""
    control.settimeout(SEND_TIMEOUT)
    try:
        for message in messages:
            control.send(message)
    except OSError:
        pass
    finally:
        control.settimeout(None)


def _methods_answer(seq: int, figures: dict[str, MethodSnapshot], slot: int,
                    warned: list[bool]) -> list[bytes]:
    messages, omitted = encode_methods(seq, figures)
    if omitted and not warned:
        warned.append(True)   # once in the child's life: every request would say it
        log.warning("method_metrics_truncated", slot=slot, pid=os.getpid(),
                    methods=len(figures), omitted=omitted,
                    effect="the least called methods' figures are not updated")
    return messages


def child_main(slot: int, control: socket.socket, listener: HandoffListener,
               factory: ChildFactory, options: ServerOptions, address: tuple[str, int],
               before: Callable[[], None]) -> NoReturn:
    """A child's whole life; ``before`` closes what only the parent uses. It never
    returns into the parent's code, whatever happens: it ends in os._exit (status 0
    after a graceful stop, 1 if anything failed)."""
    code = 0
    try:
        # Ctrl-C reaches the whole process group; the parent stops the children.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, _raise_stop)
        # A parent that blocks signals in its threads (to sigwait for them in one)
        # would pass the mask on to a child forked from such a thread.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        before()
        server = factory(listener, options, address)
        server.start()
        control.settimeout(None)
        control.send(b"ready")
        grace, settle = DEFAULT_STOP_GRACE, 0.0
        warned: list[bool] = []
        try:
            while True:
                message = control.recv(CONTROL_MAX)
                if not message:
                    break  # the parent is gone: stop rather than serve unsupervised
                verb, _, arg = message.partition(b" ")
                seq = parse_seq(arg)
                if verb == b"metrics" and seq is not None:
                    _send(control, [encode_snapshot(b"metrics", server.metrics(), seq)])
                elif verb == b"methods" and seq is not None:
                    _send(control, _methods_answer(seq, server.method_metrics(), slot, warned))
                elif verb == b"stop":
                    grace_arg, _, settle_arg = arg.partition(b" ")
                    grace, settle = float(grace_arg), float(settle_arg or 0)
                    break
        except _StopSignal:
            pass
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        until = time.monotonic() + min(settle, grace)
        # Take every connection handed over before "end" (the selector does), then
        # give the newest their first call (see processes.RELOAD_SETTLE).
        listener.ended.wait(max(0.0, until - time.monotonic()))
        while settle and server.metrics().connections_open and time.monotonic() < until:
            time.sleep(0.005)  # polling the child's own counters, bounded by settle
        server.stop(max(0.0, grace - settle))
        # Last words: the final figures, kept by the parent so its sums never go down.
        figures = server.method_metrics()
        last = _methods_answer(FINAL_SEQ, figures, slot, warned) if figures else []
        _send(control, [*last, encode_snapshot(b"bye", server.metrics())])
    except BaseException:
        code = 1
        try:
            log.exception("child_failed", slot=slot, pid=os.getpid())
        except BaseException:
            pass
    finally:
        os._exit(code)
