"""The HTTP side's default bounds (nimbus/web/limits.py), which the daemon uses (it
builds its server without limits) and the other tests replace with their own: their
values, that a server built without limits takes them, and, bytes in, where the
default header and body limits fall (no sockets)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nimbus_thrift.nimbus.web import HttpServer, limits, make_web_server
from nimbus_thrift.nimbus.web.http11 import Http11
from nimbus_thrift.nimbus.web.limits import HttpLimits
from nimbus_thrift.nimbus.web.messages import HttpError, Request, Response

from support.web import WebEnv

#: The defaults as limits.py documents them, written out here so that a changed value
#: fails a test (and is then changed here, on purpose).
DOCUMENTED = {"max_connections": 256, "max_connections_per_address": 32,
              "handshake_timeout": 5.0, "first_bytes_timeout": 5.0,
              "max_header_bytes": 16384, "max_body_bytes": 65536,
              "header_timeout": 10.0, "idle_timeout": 30.0, "write_timeout": 30.0,
              "request_threads": 4}


def test_the_defaults_are_the_documented_values() -> None:
    assert vars(HttpLimits()) == DOCUMENTED
    assert (limits.MAX_CONNECTIONS, limits.MAX_CONNECTIONS_PER_ADDRESS,
            limits.HANDSHAKE_TIMEOUT, limits.FIRST_BYTES_TIMEOUT,
            limits.MAX_HEADER_BYTES, limits.MAX_BODY_BYTES,
            limits.HEADER_TIMEOUT, limits.IDLE_TIMEOUT, limits.WRITE_TIMEOUT,
            limits.REQUEST_THREADS) == tuple(DOCUMENTED.values())
    assert limits.BACKLOG == 128


def not_found(request: Request) -> Response:
    raise HttpError(404, "nothing here")


def test_a_server_built_without_limits_uses_the_defaults(tmp_path: Path) -> None:
    # Built, not started: no socket is bound.
    assert vars(HttpServer(not_found, host="127.0.0.1", port=0).limits) == DOCUMENTED
    # The daemon's way (nimbus/daemon.py passes no limits).
    env = WebEnv(tmp_path / "data")
    try:
        server = make_web_server(env.handler, lambda: None, host="127.0.0.1", port=0,
                                 ssl_context=None)
        assert vars(server.limits) == DOCUMENTED
    finally:
        env.close()


def head_of(size: int) -> bytes:
    """A request line and headers of exactly ``size`` bytes."""
    start = b"POST / HTTP/1.1\r\nHost: a\r\nX-Pad: "
    end = b"\r\n\r\n"
    return start + b"p" * (size - len(start) - len(end)) + end


@pytest.mark.parametrize("size, refused", [(16384, False), (16385, True)])
def test_the_default_header_limit_is_16_kib(size: int, refused: bool) -> None:
    http = Http11(HttpServer(not_found, host="127.0.0.1", port=0).limits)
    wire = head_of(size)
    assert len(wire) == size
    http.receive(wire)
    if refused:
        with pytest.raises(HttpError) as caught:
            http.next_request()
        assert caught.value.status == 431
        assert caught.value.message == "the request line and headers are over 16384 bytes"
    else:
        request = http.next_request()
        assert request is not None and request.method == "POST"


@pytest.mark.parametrize("length, refused", [(65536, False), (65537, True)])
def test_the_default_body_limit_is_64_kib(length: int, refused: bool) -> None:
    http = Http11(HttpServer(not_found, host="127.0.0.1", port=0).limits)
    http.receive(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n" % length)
    if refused:
        # Refused on the declared length, before any of the body is read.
        with pytest.raises(HttpError) as caught:
            http.next_request()
        assert caught.value.status == 413
        assert b"the request body is over 65536 bytes" in http.error_bytes(caught.value)
        return
    assert http.next_request() is None            # waiting for the body
    http.receive(b"b" * length)
    request = http.next_request()
    assert request is not None and len(request.body) == length
