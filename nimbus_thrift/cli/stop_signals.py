"""How the server commands (demo, nimbus) run in the foreground: until SIGINT or SIGTERM."""

from __future__ import annotations

import signal
import threading
from typing import Any


def on_stop_signals() -> "threading.Event":
    """Make SIGINT and SIGTERM set the returned event. Installed *before* the server
    starts, so a signal right after the banner still stops it gracefully."""
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    return stop


def wait(stop: "threading.Event") -> None:
    while not stop.wait(3600):
        pass
