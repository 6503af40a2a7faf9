"""The demo service (idl/demo.thrift): what `nimbus-thrift demo` serves, and what the
tests, the interoperability clients and the benchmark call."""

from __future__ import annotations

import signal
import threading
import time
from types import ModuleType

import structlog

from . import idl
from .rpc.multiprocess.processes import ProcessServer

log = structlog.get_logger(__name__)


def demo_thrift() -> ModuleType:
    """The thriftpy2 module of idl/demo.thrift."""
    return idl.load("demo.thrift")


class EchoHandler:
    """Handler for ``service Echo``. Thread-safe: workers call it concurrently.

    Served with ``processes=N``, each child has its own copy (made by the fork), so
    ``events()`` answers with the events that child recorded."""

    def __init__(self) -> None:
        self._events: list[str] = []
        self._lock = threading.Lock()

    def echo(self, s: str) -> str:
        return s

    def echo_binary(self, data: bytes) -> bytes:
        return data

    def ping(self) -> None:
        return None

    def notify(self, event: str) -> None:
        with self._lock:
            self._events.append(event)

    def events(self) -> list[str]:
        with self._lock:
            return list(self._events)

    def fail(self, kind: str) -> str:
        if kind == "declared":
            raise demo_thrift().DemoError(message="declared failure", code=42)
        raise RuntimeError(f"undeclared failure ({kind!r})")

    def sleep(self, millis: int) -> int:
        time.sleep(max(0, millis) / 1000.0)
        return millis


class CalculatorHandler:
    """Handler for ``service Calculator`` (the multiplexing partner of Echo)."""

    def add(self, a: int, b: int) -> int:
        return a + b


def reload_on_hangup(server: object) -> None:
    """Make SIGHUP restart a multi-process server's children one by one (each new one
    serving before the old one stops; see rpc/multiprocess/processes.py); nothing for one process.
    Call it in the main thread."""
    if isinstance(server, ProcessServer):
        reload = server.reload
        signal.signal(signal.SIGHUP, lambda signum, frame: reload())
