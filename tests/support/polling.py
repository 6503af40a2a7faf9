"""Waiting, in tests, for something another thread or process does: poll a check until
it returns something true, with a deadline that fails saying what was awaited."""

from __future__ import annotations

import threading
import time
from typing import Callable, TypeVar

T = TypeVar("T")


def wait_for_value(check: Callable[[], T], what: str, timeout: float,
                   every: float = 0.02) -> T:
    """Poll ``check`` every ``every`` seconds until it returns something true, and
    return that; after ``timeout`` seconds fail, saying what was awaited and what
    ``check`` last returned."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what} "
                                 f"(last: {value!r})")
        pause.wait(every)
