"""Shared fixtures: a demo server on a real socket, bound to port 0."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import nimbus_thrift
from nimbus_thrift.demo import CalculatorHandler, EchoHandler, demo_thrift


@pytest.fixture
def demo():
    """The thriftpy2 module of idl/demo.thrift."""
    return demo_thrift()


@pytest.fixture
def echo_handler() -> EchoHandler:
    return EchoHandler()


@pytest.fixture
def demo_server(demo, echo_handler) -> Iterator[nimbus_thrift.Server]:
    """The Echo service (default, unprefixed names) plus Echo and Calculator multiplexed,
    started on 127.0.0.1:<free port>. ``demo_server.address`` is (host, port)."""
    server = nimbus_thrift.make_server(
        demo.Echo, echo_handler, host="127.0.0.1", port=0,
        services={"Echo": (demo.Echo, echo_handler),
                  "Calculator": (demo.Calculator, CalculatorHandler())},
        worker_threads=8,
    )
    server.start()
    try:
        yield server
    finally:
        server.stop(grace=5.0)


@pytest.fixture
def logs():
    """Capture structlog events with the request context merged, as the CLI configures."""
    import structlog
    from structlog.testing import LogCapture

    from nimbus_thrift.rpc.context import merge_request_context
    capture = LogCapture()
    old = structlog.get_config()
    structlog.configure(processors=[merge_request_context, capture])
    try:
        yield capture.entries
    finally:
        structlog.configure(**old)


@pytest.fixture(autouse=True)
def _restore_logging():
    """Undo what a CLI command run in-process (CliRunner) configures: the CLI's
    structlog setup caches loggers on first use and adds a stderr handler, which would
    otherwise leak into every later test (a module logger first used afterwards keeps
    that configuration, and a capture installed later cannot see it)."""
    import logging

    import structlog
    config = structlog.get_config()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    structlog.configure(**config)
    for handler in root.handlers[:]:
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)


@pytest.fixture(scope="session", autouse=True)
def _route_logs_through_stdlib():
    """Send the server's structlog lines through stdlib logging, where pytest captures
    them per test (tests that assert on log lines install their own capture)."""
    import logging

    import structlog

    structlog.configure(
        processors=[structlog.stdlib.add_log_level, structlog.dev.ConsoleRenderer(colors=False)],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
    )
    logging.getLogger().setLevel(logging.DEBUG)
    yield
    structlog.reset_defaults()
