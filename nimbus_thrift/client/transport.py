"""The client's side of one framed TCP connection: connecting with bounded retries,
the exchange of one call (send one frame, read one reply frame, all within the call's
timeout) and exact reads against that deadline.

Why a socket is discarded after a timeout or a broken reply: the server may still
answer the abandoned call, and that late reply must never be read as the answer to
the next one. The next call connects afresh.

:class:`FramedTransport` is the base of :class:`~nimbus_thrift.client.NimbusClient`,
which checks the settings, encodes and numbers the calls, holds the lock that makes
them take turns, and decides what to retry. The bytes are the socket-free steps of
:mod:`nimbus_thrift.rpc.calls`.
"""

from __future__ import annotations

import socket
import time
from typing import Any, NoReturn

import structlog
from thriftpy2.thrift import TApplicationException

from ..rpc.calls import UnreadableReply, check_reply_length, decode_reply, parse_frame_refusal
from ..rpc.errors import AppErrorCode
from .errors import (BadReply, ConnectionLost, FrameRefused, NimbusClientError, NimbusTimeout,
                     NimbusUnavailable, ServerError, format_address)

log = structlog.get_logger(__name__)


class FramedTransport:
    """One connection to one server, framed TBinaryProtocol, one call at a time.

    Not thread-safe by itself: the subclass holds a lock for each whole call.
    """

    def __init__(self, host: str, port: int, *, timeout: float, connect_timeout: float,
                 connect_attempts: int, backoff_delays: list[float],
                 max_frame_size: int, decoded_size_factor: float) -> None:
        """Take settings already checked (NimbusClient checks what users pass);
        nothing is connected yet."""
        self.host = host
        self.port = port
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.connect_attempts = connect_attempts
        self.backoff_delays = backoff_delays
        self.max_frame_size = max_frame_size
        self.decoded_size_factor = decoded_size_factor
        self._sock: socket.socket | None = None

    @property
    def address(self) -> str:
        return format_address(self.host, self.port)

    @property
    def connected(self) -> bool:
        """Whether a connection is open now (it may since have been closed by the
        server; the next call finds out and reconnects)."""
        return self._sock is not None

    def _discard(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()

    def _ensure_connected(self) -> None:
        if self._sock is not None and _dropped(self._sock):
            # The server closed the idle connection (its idle_timeout, a restart).
            # Nothing has been sent on it yet, so reconnecting is safe for any method.
            log.debug("nimbus_connection_dropped", nimbus=self.address)
            self._discard()
        if self._sock is None:
            self._sock = self._open()

    def _open(self) -> socket.socket:
        started = time.monotonic()
        reason = "no attempt made"
        for attempt in range(1, self.connect_attempts + 1):
            try:
                sock = socket.create_connection((self.host, self.port),
                                                timeout=self.connect_timeout)
            except socket.gaierror as exc:
                reason = f"cannot resolve {self.host!r} ({exc.strerror})"
            except TimeoutError:
                reason = f"connect timed out after {self.connect_timeout} s"
            except ConnectionRefusedError:
                reason = "connection refused"
            except OSError as exc:
                reason = exc.strerror or str(exc)
            else:
                # A call is one frame written at once and then a wait for the reply:
                # nothing to coalesce, and Nagle would hold a frame's last segment back
                # until the previous one is acknowledged.
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                return sock
            log.debug("nimbus_connect_failed", nimbus=self.address, attempt=attempt,
                      reason=reason)
            if attempt < self.connect_attempts:
                time.sleep(self.backoff_delays[attempt - 1])
        raise NimbusUnavailable(self.host, self.port, reason, self.connect_attempts,
                                time.monotonic() - started)

    def _exchange(self, service: Any, method: str, seqid: int, frame: bytes) -> Any:
        """Send one frame on the open connection and return the decoded reply."""
        sock = self._sock
        assert sock is not None
        deadline = time.monotonic() + self.timeout
        send_error: OSError | None = None
        try:
            sock.settimeout(self.timeout)
            # sendall's timeout bounds the whole send (Python >= 3.5), not each chunk.
            sock.sendall(frame)
        except TimeoutError:
            self._fail_timeout(method)
        except OSError as exc:
            # The server may have refused the frame, answered and closed before taking
            # it all: read what it said before calling the connection lost.
            send_error = exc
        try:
            prefix = self._recv_exactly(sock, 4, deadline, method)
            try:
                size = check_reply_length(prefix, self.max_frame_size)
            except UnreadableReply as exc:
                self._discard()
                raise BadReply(self.host, self.port, method, str(exc)) from None
            payload = self._recv_exactly(sock, size, deadline, method)
        except ConnectionLost:
            if send_error is None:
                raise
            raise ConnectionLost(self.host, self.port, method,
                                 f"sending failed ({send_error.strerror or send_error})"
                                 ) from send_error
        if send_error is not None:
            self._discard()
        try:
            return decode_reply(service, method, seqid, payload, self.decoded_size_factor)
        except TApplicationException as exc:
            raise self._app_error(method, exc) from None
        except UnreadableReply as exc:
            self._discard()
            raise BadReply(self.host, self.port, method, str(exc)) from None

    def _app_error(self, method: str, exc: TApplicationException) -> NimbusClientError:
        message = exc.message or ""
        if exc.type == AppErrorCode.PROTOCOL_ERROR:
            refusal = parse_frame_refusal(message)
            if refusal is not None:
                # The server closes the connection after this reply.
                self._discard()
                return FrameRefused(self.host, self.port, method, refusal[0], refusal[1],
                                    "server", message)
        return ServerError(self.host, self.port, method, int(exc.type), message)

    def _recv_exactly(self, sock: socket.socket, n: int, deadline: float,
                      method: str) -> bytearray:
        # The buffer is made only after n was checked against max_frame_size.
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._fail_timeout(method)
            try:
                sock.settimeout(remaining)
                k = sock.recv_into(view[got:])
            except TimeoutError:
                self._fail_timeout(method)
            except OSError as exc:
                self._discard()
                raise ConnectionLost(self.host, self.port, method,
                                     exc.strerror or str(exc)) from None
            if k == 0:
                self._discard()
                reason = ("the server closed the connection without replying"
                          if got == 0 and n == 4 else
                          f"the server closed the connection {got} bytes into a "
                          f"{n}-byte read of the reply")
                raise ConnectionLost(self.host, self.port, method, reason)
            got += k
        return buf

    def _fail_timeout(self, method: str) -> NoReturn:
        # Discarded so the late reply, if it comes, is never read as another call's.
        self._discard()
        raise NimbusTimeout(self.host, self.port, method, self.timeout)


def _dropped(sock: socket.socket) -> bool:
    """Whether the peer closed (or reset) an idle connection, or sent bytes no call
    asked for: either way it cannot carry the next call."""
    try:
        sock.settimeout(0.0)
        sock.recv(1, socket.MSG_PEEK)  # b"" (closed) or stray bytes
    except BlockingIOError:
        return False  # nothing to read: still open
    except OSError:
        return True
    return True
