"""HTTP/1.1 on one connection, without sockets: bytes in, whole requests out, bytes of
responses back. h11 parses and frames; this adds the HTTP side's limits (header and
body sizes) and turns h11's protocol errors into statuses.

Theory of operation: the I/O shell (:mod:`.httpserver`) feeds whatever it read to
:meth:`Http11.receive` and asks :meth:`Http11.next_request`, which returns a whole
request (head and body), None (more bytes needed), or raises :class:`HttpError` (answer
it, then close) or :class:`Closed` (the client went away). After a response is sent,
:meth:`Http11.next_cycle` says whether the connection may carry another request
(keep-alive) and readies it.
"""

from __future__ import annotations

import h11

from .limits import HttpLimits
from .messages import SECURITY_HEADERS, HttpError, Request, Response, reason


class Closed(Exception):
    """The client closed the connection (between requests, or in the middle of one)."""


class Http11:
    """One server-side HTTP/1.1 connection's protocol state."""

    def __init__(self, limits: HttpLimits, *, peer: str = "", principal: str | None = None,
                 scheme: str = "http"):
        self.limits = limits
        self.peer = peer
        self.principal = principal
        self.scheme = scheme
        # h11 refuses (431) a head it has buffered this much of without completing it.
        self._conn = h11.Connection(h11.SERVER,
                                    max_incomplete_event_size=limits.max_header_bytes)
        self._head: h11.Request | None = None
        self._body = bytearray()
        # Bytes fed to h11, and how many of them came before this request: h11 bounds
        # a head it is still waiting for, not one that arrived whole in one read, so
        # the size of a complete head is checked here.
        self._fed = 0
        self._request_start = 0

    @property
    def waiting_idle(self) -> bool:
        """True while no byte of the next request has arrived (the idle timeout
        applies, not the header timeout)."""
        return self._head is None and self._conn.their_state is h11.IDLE \
            and not self._conn.trailing_data[0]

    def receive(self, data: bytes) -> None:
        """Bytes read from the client (b"" at end of stream)."""
        self._conn.receive_data(data)
        self._fed += len(data)

    def next_request(self) -> Request | None:
        """The next whole request, or None until more bytes arrive.

        Raises:
            HttpError: a malformed request (400), headers over the limit (431), a body
                over the limit (413). Answer with :meth:`error_bytes`, then close.
            Closed: the client closed the connection.
        """
        while True:
            try:
                event = self._conn.next_event()
            except h11.RemoteProtocolError as exc:
                status = exc.error_status_hint
                if status == 431:
                    raise self._headers_too_large() from None
                raise HttpError(status, f"malformed HTTP request: {exc}") from None
            if event is h11.NEED_DATA:
                return None
            if isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
                # PAUSED: h11 waits for us to answer; cannot happen while reading.
                raise Closed()
            if isinstance(event, h11.Request):
                self._head = event
                self._body.clear()
                if self._consumed() - self._request_start > self.limits.max_header_bytes:
                    raise self._headers_too_large()
                self._check_declared_length(event)
            elif isinstance(event, h11.Data):
                if len(self._body) + len(event.data) > self.limits.max_body_bytes:
                    raise self._too_large()
                self._body += event.data
            elif isinstance(event, h11.EndOfMessage):
                head = self._head
                assert head is not None
                self._head = None
                self._request_start = self._consumed()
                headers: dict[str, str] = {}
                for name, value in head.headers:
                    key = name.decode("latin-1")
                    text = value.decode("latin-1")
                    headers[key] = f"{headers[key]}, {text}" if key in headers else text
                return Request(head.method.decode("ascii"), head.target.decode("latin-1"),
                               headers, bytes(self._body), self.peer, self.principal,
                               self.scheme)

    def _consumed(self) -> int:
        """Bytes h11 has parsed so far (fed, less what it still buffers)."""
        return self._fed - len(self._conn.trailing_data[0])

    def _headers_too_large(self) -> HttpError:
        return HttpError(431, f"the request line and headers are over "
                              f"{self.limits.max_header_bytes} bytes")

    def _check_declared_length(self, head: h11.Request) -> None:
        for name, value in head.headers:
            if name == b"content-length" and int(value) > self.limits.max_body_bytes:
                # Refused before any of the body is read.
                raise self._too_large()

    def _too_large(self) -> HttpError:
        return HttpError(413, f"the request body is over {self.limits.max_body_bytes} bytes")

    def response_bytes(self, response: Response, *, head_only: bool,
                       keep_alive: bool = True) -> bytes:
        """``response`` on the wire (without its body for HEAD: Content-Length still
        says how long it is)."""
        headers = [(name, value) for name, value in response.headers]
        headers.extend(SECURITY_HEADERS)
        headers.append(("Content-Length", str(len(response.body))))
        if not keep_alive:
            headers.append(("Connection", "close"))
        out = self._conn.send(h11.Response(status_code=response.status, headers=headers,
                                           reason=reason(response.status).encode()))
        assert out is not None
        if response.body and not head_only:
            data = self._conn.send(h11.Data(data=response.body))
            assert data is not None
            out += data
        end = self._conn.send(h11.EndOfMessage())
        assert end is not None
        return out + end

    def error_bytes(self, error: HttpError) -> bytes:
        """The response to a request that could not be read, or b"" when no response
        can be sent on this connection any more; the connection is closed after it."""
        if self._conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return b""
        try:
            return self.response_bytes(error.response(), head_only=False, keep_alive=False)
        except h11.LocalProtocolError:
            return b""

    def next_cycle(self) -> bool:
        """After a response: True when the connection carries on (keep-alive), with the
        protocol state reset for the next request."""
        if self._conn.our_state is h11.DONE and self._conn.their_state is h11.DONE:
            self._conn.start_next_cycle()
            return True
        return False
