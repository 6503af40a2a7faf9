"""Our handler for Apache Thrift's ThriftTest service (test/ThriftTest.thrift), the service
every Apache cross-language test client calls. Each method does what the IDL's doc comment
says; where the comment says "prints", the handler logs instead (the server's log is where a
failing interop run is read).
"""

from __future__ import annotations

import threading
import time
from types import ModuleType
from typing import Any

import structlog
from thriftpy2.thrift import TApplicationException

log = structlog.get_logger(__name__)

#: testOneway sleeps as long as the client asks, but never longer than this: Apache's clients
#: ask for at most 1 s, and a bigger value would only hold a worker hostage.
MAX_ONEWAY_SLEEP_SECS = 5.0


class ThriftTestHandler:
    """``service ThriftTest``. Thread-safe: workers call it concurrently.

    Args:
        tt: the thriftpy2 module of ThriftTest.thrift (for its structs and exceptions).
    """

    def __init__(self, tt: ModuleType) -> None:
        self._tt = tt
        self._lock = threading.Lock()
        self._oneways: list[int] = []
        self._oneway_done = threading.Condition(self._lock)

    # --- echoes: each returns its argument ------------------------------------------------
    def testVoid(self) -> None:
        log.debug("testVoid")

    def testString(self, thing: str) -> str:
        return thing

    def testBool(self, thing: bool) -> bool:
        return thing

    def testByte(self, thing: int) -> int:
        return thing

    def testI32(self, thing: int) -> int:
        return thing

    def testI64(self, thing: int) -> int:
        return thing

    def testDouble(self, thing: float) -> float:
        return thing

    def testBinary(self, thing: bytes) -> bytes:
        return thing

    def testStruct(self, thing: Any) -> Any:
        return thing

    def testNest(self, thing: Any) -> Any:
        return thing

    def testMap(self, thing: dict[int, int]) -> dict[int, int]:
        return thing

    def testStringMap(self, thing: dict[str, str]) -> dict[str, str]:
        return thing

    def testSet(self, thing: set[int]) -> set[int]:
        return thing

    def testList(self, thing: list[int]) -> list[int]:
        return thing

    def testEnum(self, thing: int) -> int:
        return thing

    def testTypedef(self, thing: int) -> int:
        return thing

    # --- computed answers ------------------------------------------------------------------
    def testMapMap(self, hello: int) -> dict[int, dict[int, int]]:
        """The IDL's fixed answer, whatever ``hello`` is."""
        return {-4: {k: k for k in (-4, -3, -2, -1)}, 4: {k: k for k in (1, 2, 3, 4)}}

    def testInsanity(self, argument: Any) -> dict[int, dict[int, Any]]:
        """``{1: {TWO: argument, THREE: argument}, 2: {SIX: <empty Insanity>}}``; the empty
        one has an empty map and list (Node's client compares against those, not nulls)."""
        n = self._tt.Numberz
        empty = self._tt.Insanity(userMap={}, xtructs=[])
        return {1: {n.TWO: argument, n.THREE: argument}, 2: {n.SIX: empty}}

    def testMulti(self, arg0: int, arg1: int, arg2: int, arg3: dict[int, str], arg4: int,
                  arg5: int) -> Any:
        return self._tt.Xtruct(string_thing="Hello2", byte_thing=arg0, i32_thing=arg1,
                               i64_thing=arg2)

    # --- exceptions ------------------------------------------------------------------------
    def testException(self, arg: str) -> None:
        """Declared Xception for "Xception"; for "TException" an undeclared error, which a
        client sees as a TApplicationException (a TException); else nothing."""
        if arg == "Xception":
            raise self._tt.Xception(errorCode=1001, message=arg)
        if arg == "TException":
            raise TApplicationException(TApplicationException.INTERNAL_ERROR,
                                        "testException: the client asked for a TException")

    def testMultiException(self, arg0: str, arg1: str) -> Any:
        if arg0 == "Xception":
            raise self._tt.Xception(errorCode=1001, message="This is an Xception")
        if arg0 == "Xception2":
            raise self._tt.Xception2(
                errorCode=2002, struct_thing=self._tt.Xtruct(string_thing="This is an Xception2"))
        return self._tt.Xtruct(string_thing=arg1)

    # --- oneway ----------------------------------------------------------------------------
    def testOneway(self, secondsToSleep: int) -> None:
        """Sleeps ``secondsToSleep`` (bounded by :data:`MAX_ONEWAY_SLEEP_SECS`), then
        records the call, so a test can see that the oneway ran although nothing answered."""
        time.sleep(min(max(0, secondsToSleep), MAX_ONEWAY_SLEEP_SECS))
        with self._oneway_done:
            self._oneways.append(secondsToSleep)
            self._oneway_done.notify_all()

    def oneways(self) -> list[int]:
        """The arguments of the testOneway calls that have finished, in order."""
        with self._lock:
            return list(self._oneways)

    def wait_oneways(self, count: int, timeout: float) -> list[int]:
        """Wait until at least ``count`` testOneway calls have finished (or ``timeout``
        seconds pass); return the arguments seen."""
        with self._oneway_done:
            self._oneway_done.wait_for(lambda: len(self._oneways) >= count, timeout)
            return list(self._oneways)


class SecondServiceHandler:
    """``service SecondService``, the multiplexing partner of ThriftTest."""

    def secondtestString(self, thing: str) -> str:
        return f'testString("{thing}")'
