"""How the server commands (demo, nimbus) run in the foreground: until SIGINT or SIGTERM,
and, for the daemon, SIGHUP; and how a command that reads on (``logs --follow``) is
stopped."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Any, Iterator


def on_stop_signals(hangup: bool = False) -> "threading.Event":
    """Make SIGINT and SIGTERM (and SIGHUP, with ``hangup``) set the returned event.
    Installed *before* the server starts, so a signal right after the banner still
    stops it gracefully.

    Why SIGHUP stops rather than reloads: it is what a closed terminal or a dropped
    SSH session sends, and its default action kills the process on the spot, leaving
    the data directory's lock and the Unix socket behind and cutting off calls in
    flight. A reload would have to re-read settings that the listeners, TLS and the
    state store were built from; stopping is the one safe meaning (a supervisor
    restarts the daemon). The demo command keeps SIGHUP for its multi-process rolling
    restart (demo.reload_on_hangup)."""
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    if hangup:
        signal.signal(signal.SIGHUP, on_signal)
    return stop


def wait(stop: "threading.Event") -> None:
    while not stop.wait(3600):
        pass


@contextmanager
def stopping_on_signals() -> Iterator["threading.Event"]:
    """An event that SIGINT (Ctrl-C) and SIGTERM set while the block runs, for a
    command that reads on until stopped (``logs --follow``) and then ends quietly
    with status 0; the handlers before it are put back after it."""
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    saved = {number: signal.signal(number, on_signal)
             for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for number, handler in saved.items():
            signal.signal(number, handler)
