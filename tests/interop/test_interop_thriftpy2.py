"""Interoperability: thriftpy2's own client (pure-Python and Cython codecs) against the demo server.

Each test runs twice, once with thriftpy2's pure-Python framed transport and binary protocol
and once with its Cython ones (TCyFramedTransportFactory / TCyBinaryProtocolFactory), which
buffer and encode differently, so both must agree with our server byte for byte.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import Any

import pytest
from thriftpy2.protocol import (
    TBinaryProtocolFactory,
    TCyBinaryProtocolFactory,
    TMultiplexedProtocolFactory,
)
from thriftpy2.rpc import make_client
from thriftpy2.thrift import TApplicationException
from thriftpy2.transport import TCyFramedTransportFactory, TFramedTransportFactory

pytestmark = pytest.mark.interop

# Client socket timeout (ms): generous for a 1 MiB round trip on a loaded CI machine, short
# enough that a server which never answers fails the test instead of hanging it.
CLIENT_TIMEOUT_MS = 10_000

UNICODE = "h\u00e9llo w\u00f6rld \u65e5\u672c\u8a9e \u0416 \U0001f680"

CODECS = {
    "python": (TFramedTransportFactory, TBinaryProtocolFactory),
    "cython": (TCyFramedTransportFactory, TCyBinaryProtocolFactory),
}

ClientFactory = Callable[..., Any]


@pytest.fixture(params=sorted(CODECS))
def connect(request, demo_server) -> Iterator[ClientFactory]:
    """``connect(service, multiplexed_name=None)`` opens a thriftpy2 client to the demo server
    with this run's codecs; every client opened is closed after the test."""
    trans_factory, proto_factory = CODECS[request.param]
    host, port = demo_server.address
    opened: list[Any] = []
    lock = threading.Lock()

    def open_client(service: Any, multiplexed_name: str | None = None) -> Any:
        proto = proto_factory()
        if multiplexed_name is not None:
            proto = TMultiplexedProtocolFactory(proto, multiplexed_name)
        client = make_client(
            service, host, port, proto_factory=proto, trans_factory=trans_factory(),
            timeout=CLIENT_TIMEOUT_MS,
        )
        with lock:
            opened.append(client)
        return client

    yield open_client
    for client in opened:
        client.close()


def test_echo_strings(connect: ClientFactory, demo: ModuleType) -> None:
    client = connect(demo.Echo)
    assert client.echo("hello") == "hello"
    assert client.echo(UNICODE) == UNICODE
    assert client.echo("") == ""
    # 1 MiB of UTF-8 (with 3-byte characters), so the frame spans many socket reads.
    big = ("x" * 1021 + "\u65e5") * 1024
    assert len(big.encode("utf-8")) == 1024 * 1024
    assert client.echo(big) == big
    # The connection is still in step after the big frame.
    assert client.echo("after big") == "after big"


def test_echo_binary_all_byte_values(connect: ClientFactory, demo: ModuleType) -> None:
    client = connect(demo.Echo)
    data = bytes(range(256))
    assert client.echo_binary(data) == data
    assert client.echo_binary(b"") == b""
    # Bytes that are not valid UTF-8 must come back unchanged, not decoded or replaced.
    assert client.echo_binary(b"\xff\xfe\x00\xc3") == b"\xff\xfe\x00\xc3"


def test_ping(connect: ClientFactory, demo: ModuleType) -> None:
    client = connect(demo.Echo)
    assert client.ping() is None
    assert client.echo("after ping") == "after ping"


def test_oneway_then_events_in_order(connect: ClientFactory, demo: ModuleType) -> None:
    client = connect(demo.Echo)
    assert client.events() == []
    for name in ("first", "second", "third"):
        assert client.notify(name) is None      # no reply is read for a oneway call
    # Same connection: the oneway frames were processed, in order, before this call.
    assert client.events() == ["first", "second", "third"]
    assert client.echo("in step") == "in step"


def test_declared_exception(connect: ClientFactory, demo: ModuleType) -> None:
    client = connect(demo.Echo)
    with pytest.raises(demo.DemoError) as excinfo:
        client.fail("declared")
    assert excinfo.value.message == "declared failure"
    assert excinfo.value.code == 42
    assert client.echo("after declared") == "after declared"


def test_undeclared_exception_is_internal_error_and_connection_survives(
    connect: ClientFactory, demo: ModuleType,
) -> None:
    client = connect(demo.Echo)
    for attempt in range(3):
        with pytest.raises(TApplicationException) as excinfo:
            client.fail(f"boom-{attempt}")
        assert excinfo.value.type == TApplicationException.INTERNAL_ERROR
        # The very same client (same socket) still gets correct replies.
        assert client.echo(f"alive-{attempt}") == f"alive-{attempt}"
    assert client.sleep(1) == 1


def test_multiplexed_calculator_and_echo(connect: ClientFactory, demo: ModuleType) -> None:
    calc = connect(demo.Calculator, "Calculator")
    echo = connect(demo.Echo, "Echo")
    assert calc.add(40, 2) == 42
    assert calc.add(-7, 3) == -4
    # i64 at the edge: no truncation to 32 bits or to a double.
    assert calc.add(2**63 - 2, 1) == 2**63 - 1
    assert calc.add(-(2**62), -(2**62)) == -(2**63)
    assert echo.echo(UNICODE) == UNICODE
    assert echo.echo_binary(bytes(range(256))) == bytes(range(256))
    # Multiplexed Echo shares the handler with the default service.
    echo.notify("via-mux")
    assert connect(demo.Echo).events() == ["via-mux"]


def test_many_sequential_calls_on_one_connection(connect: ClientFactory, demo: ModuleType) -> None:
    client = connect(demo.Echo)
    for i in range(500):
        payload = f"call-{i}-" + "y" * (i % 97)
        assert client.echo(payload) == payload
    assert client.echo_binary(bytes([7]) * 4096) == bytes([7]) * 4096


def test_concurrent_clients_in_threads(connect: ClientFactory, demo: ModuleType) -> None:
    def session(n: int) -> list[str]:
        client = connect(demo.Echo)
        return [client.echo(f"thread-{n}-call-{i}") for i in range(50)]

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(session, range(8)))
    for n, replies in enumerate(results):
        assert replies == [f"thread-{n}-call-{i}" for i in range(50)]


def test_slow_calls_on_separate_connections_run_in_parallel(
    connect: ClientFactory, demo: ModuleType,
) -> None:
    # 4 x sleep(1000) one at a time would take 4 s; the server has 8 worker threads, so on
    # 4 connections they overlap (about 1 s). Under 3 s leaves a busy machine 2 s of
    # slack and still fails if the server runs handlers one at a time.
    clients = [connect(demo.Echo) for _ in range(4)]
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda c: c.sleep(1000), clients))
    elapsed = time.monotonic() - started
    assert results == [1000] * 4
    assert elapsed < 3.0, f"4 concurrent sleep(1000) calls took {elapsed:.2f}s"
