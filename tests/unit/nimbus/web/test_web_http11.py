"""The HTTP side's protocol layer, bytes in and bytes out (no sockets): whole requests
from bytes fed in any pieces, the size limits (431, 413) and their error responses,
keep-alive, HEAD, and the routing table's 404 and 405."""

from __future__ import annotations

import json

import pytest

from nimbus_thrift.nimbus.web.http11 import Closed, Http11
from nimbus_thrift.nimbus.web.limits import HttpLimits
from nimbus_thrift.nimbus.web.messages import HttpError, Request, Response
from nimbus_thrift.nimbus.web.routes import Route, Router

LIMITS = HttpLimits(max_header_bytes=1024, max_body_bytes=100)
GET = b"GET /api/v1/topology/wc%2F1-1-1?window=600 HTTP/1.1\r\nHost: a\r\nX-A: 1\r\nx-a: 2\r\n\r\n"


def feed(http: Http11, data: bytes, step: int | None = None) -> Request | None:
    request = None
    for i in range(0, len(data), step or len(data)):
        http.receive(data[i:i + (step or len(data))])
        request = http.next_request()
        if request is not None:
            break
    return request


def test_a_request_fed_one_byte_at_a_time_is_read_whole() -> None:
    http = Http11(LIMITS, peer="127.0.0.1:5", principal="alice", scheme="https")
    request = None
    for i, byte in enumerate(GET):
        http.receive(bytes([byte]))
        request = http.next_request()
        assert (request is None) == (i < len(GET) - 1)
    assert request is not None
    assert (request.method, request.path, request.query) == (
        "GET", "/api/v1/topology/wc%2F1-1-1", {"window": "600"})
    # Percent-decoded per segment: an id may hold a "/".
    assert request.segments == ["api", "v1", "topology", "wc/1-1-1"]
    assert request.headers["x-a"] == "1, 2"
    assert (request.peer, request.principal, request.scheme) == ("127.0.0.1:5", "alice",
                                                                  "https")


def test_a_body_is_read_whole_and_kept_alive_for_the_next_request() -> None:
    http = Http11(LIMITS)
    post = b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello"
    http.receive(post + GET)
    request = http.next_request()
    assert request is not None and request.body == b"hello"
    wire = http.response_bytes(Response.json({"ok": 1}), head_only=False)
    assert wire.startswith(b"HTTP/1.1 200 OK\r\n") and wire.endswith(b'{"ok": 1}')
    assert b"content-length: 9" in wire.lower() and b"x-frame-options: deny" in wire.lower()
    assert http.next_cycle()
    # The pipelined GET was kept, not lost.
    assert http.next_request() is not None


def test_head_gets_the_length_without_the_body() -> None:
    http = Http11(LIMITS)
    assert feed(http, b"HEAD / HTTP/1.1\r\nHost: a\r\n\r\n") is not None
    wire = http.response_bytes(Response(200, b"x" * 50), head_only=True)
    assert b"content-length: 50" in wire.lower()
    assert wire.endswith(b"\r\n\r\n")


def test_connection_close_ends_the_cycle() -> None:
    http = Http11(LIMITS)
    assert feed(http, b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n") is not None
    http.response_bytes(Response(200, b"x"), head_only=False)
    assert not http.next_cycle()


def test_headers_over_the_limit_are_431_even_if_never_finished() -> None:
    http = Http11(LIMITS)
    http.receive(b"GET / HTTP/1.1\r\nHost: a\r\nX-Big: " + b"a" * 2000)
    with pytest.raises(HttpError) as caught:
        http.next_request()
    assert caught.value.status == 431
    wire = http.error_bytes(caught.value)
    assert wire.startswith(b"HTTP/1.1 431 ")
    body = json.loads(wire.split(b"\r\n\r\n", 1)[1])
    assert body == {"error": "431 Request Header Fields Too Large",
                    "errorMessage": "the request line and headers are over 1024 bytes"}


def test_a_declared_body_over_the_limit_is_413_before_it_is_read() -> None:
    http = Http11(LIMITS)
    http.receive(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 101\r\n\r\n")
    with pytest.raises(HttpError) as caught:
        http.next_request()
    assert caught.value.status == 413
    assert http.error_bytes(caught.value).startswith(b"HTTP/1.1 413 ")


def test_a_chunked_body_over_the_limit_is_413() -> None:
    http = Http11(LIMITS)
    chunk = b"40\r\n" + b"a" * 64 + b"\r\n"
    http.receive(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                 + chunk + chunk)
    with pytest.raises(HttpError) as caught:
        http.next_request()
    assert caught.value.status == 413


def test_a_body_at_the_limit_is_taken() -> None:
    http = Http11(LIMITS)
    request = feed(http, b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n"
                   + b"b" * 100)
    assert request is not None and len(request.body) == 100


@pytest.mark.parametrize("wire", [
    b"GARBAGE\r\n\r\n",
    b"GET / HTTP/1.1\r\n\r\n",                     # HTTP/1.1 without Host
    b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: x\r\n\r\n",
])
def test_malformed_requests_are_400(wire: bytes) -> None:
    http = Http11(LIMITS)
    http.receive(wire)
    with pytest.raises(HttpError) as caught:
        http.next_request()
    assert caught.value.status == 400
    assert http.error_bytes(caught.value).startswith(b"HTTP/1.1 400 ")


def test_end_of_stream_is_closed() -> None:
    http = Http11(LIMITS)
    assert http.waiting_idle
    http.receive(b"")
    with pytest.raises(Closed):
        http.next_request()


def test_waiting_idle_ends_with_the_first_byte() -> None:
    http = Http11(LIMITS)
    http.receive(b"G")
    assert http.next_request() is None
    assert not http.waiting_idle


# --- routing -------------------------------------------------------------------------

def _router() -> Router:
    def answer(name: str):  # type: ignore[no-untyped-def]
        return lambda request, params: Response.json({"route": name, **params})
    return Router([Route("GET", "/api/v1/topology/:id", answer("topology")),
                   Route("POST", "/api/v1/topology/:id/kill/:wait", answer("kill")),
                   Route("GET", "/api/v1/topology/summary", answer("summary"))])


def _request(method: str, target: str) -> Request:
    return Request(method, target, {"host": "a"})


def test_routes_bind_segments_and_head_is_get() -> None:
    router = _router()
    route, params = router.resolve(_request("HEAD", "/api/v1/topology/wc%2F1"))
    assert params == {"id": "wc/1"}
    route, params = router.resolve(_request("POST", "/api/v1/topology/t/kill/30"))
    assert params == {"id": "t", "wait": "30"}


def test_an_unknown_path_is_404_and_a_wrong_method_405_with_allow() -> None:
    router = _router()
    with pytest.raises(HttpError) as caught:
        router.resolve(_request("GET", "/api/v1/nope"))
    assert caught.value.status == 404
    with pytest.raises(HttpError) as caught:
        router.resolve(_request("GET", "/api/v1/topology/t/kill/30"))
    assert caught.value.status == 405
    assert dict(caught.value.headers) == {"Allow": "POST"}
    with pytest.raises(HttpError) as caught:
        router.resolve(_request("DELETE", "/api/v1/topology/t"))
    assert dict(caught.value.headers) == {"Allow": "GET, HEAD"}


def test_an_empty_segment_binds_nothing() -> None:
    with pytest.raises(HttpError) as caught:
        _router().resolve(_request("GET", "/api/v1/topology/"))
    assert caught.value.status == 404



def test_a_whole_head_over_the_limit_is_431_too() -> None:
    # h11 bounds only a head it is still waiting for; one that arrives whole in one
    # read must be refused as well.
    http = Http11(LIMITS)
    http.receive(b"GET / HTTP/1.1\r\nHost: a\r\nX-Big: " + b"a" * 2000 + b"\r\n\r\n")
    with pytest.raises(HttpError) as caught:
        http.next_request()
    assert caught.value.status == 431


def test_the_head_limit_is_per_request_on_a_kept_alive_connection() -> None:
    http = Http11(LIMITS)
    head = b"GET / HTTP/1.1\r\nHost: a\r\nX-Pad: " + b"p" * 900 + b"\r\n\r\n"
    assert len(head) < LIMITS.max_header_bytes
    for _ in range(3):
        http.receive(head)
        assert http.next_request() is not None
        http.response_bytes(Response(200), head_only=False)
        assert http.next_cycle()
