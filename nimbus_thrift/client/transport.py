"""The client's side of one framed connection (TCP, TLS over TCP, or a Unix domain
socket): connecting with bounded retries, the exchange of one call (send one frame,
read one reply frame, all within the call's timeout) and exact reads against that
deadline.

Why a TLS refusal is not retried while a refused TCP connection is: a daemon that is
restarting refuses connections for a moment, but a certificate refused now is refused
the same way a moment later (see :mod:`.tls` for how a refusal is recognised).

Why a socket is discarded after a timeout or a broken reply: the server may still
answer the abandoned call, and that late reply must never be read as the answer to
the next one. The next call connects afresh.

:class:`FramedTransport` is held by :class:`~nimbus_thrift.client.NimbusClient`,
which encodes and numbers the calls, holds the lock that makes them take turns, and
decides what to retry; the settings come checked, as :class:`.options.ClientOptions`.
The bytes are the socket-free steps of :mod:`nimbus_thrift.rpc.codec.calls`.
"""

from __future__ import annotations

import socket
import ssl
import time
from typing import Any, NoReturn

import structlog
from thriftpy2.thrift import TApplicationException

from ..rpc.codec.calls import UnreadableReply, check_reply_length, decode_reply, parse_frame_refusal
from ..rpc.errors import AppErrorCode
from .errors import (BadReply, ConnectionLost, FrameRefused, NimbusClientError, NimbusTimeout,
                     NimbusUnavailable, ServerError, TlsError, format_address)
from .options import ClientOptions
from .tls import ClientTls, classify

log = structlog.get_logger(__name__)


class FramedTransport:
    """One connection to one server, framed TBinaryProtocol, one call at a time.

    Not thread-safe by itself: its owner holds a lock for each whole call.
    """

    def __init__(self, options: ClientOptions) -> None:
        """Take settings already checked; nothing is connected yet."""
        self.options = options
        self.host = options.host        # named in every error: kept at hand
        self.port = options.port
        self._sock: socket.socket | None = None
        #: Whether a whole reply has come on this connection: a plaintext connection
        #: closed before any did may have reached a TLS-only port.
        self._answered = False

    @property
    def address(self) -> str:
        return format_address(self.host, self.port)

    @property
    def tls(self) -> ClientTls | None:
        return self.options.tls

    @property
    def connected(self) -> bool:
        """Whether a connection is open now (it may since have been closed by the
        server; the next call finds out and reconnects)."""
        return self._sock is not None

    def discard(self) -> None:
        """Close the connection, if open; the next call connects afresh."""
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()

    def ensure_connected(self) -> None:
        """Connect unless a connection the server has not dropped is open.

        Raises:
            NimbusUnavailable: every attempt failed.
            TlsError: a certificate was refused.
        """
        if self._sock is not None and self._dropped(self._sock):
            # The server closed the idle connection (its idle_timeout, a restart).
            # Nothing has been sent on it yet, so reconnecting is safe for any method.
            log.debug("nimbus_connection_dropped", nimbus=self.address)
            self.discard()
        if self._sock is None:
            self._sock = self._open()
            self._answered = False

    def _open(self) -> socket.socket:
        started = time.monotonic()
        reason = "no attempt made"
        for attempt in range(1, self.options.connect_attempts + 1):
            try:
                return self._connect_once()
            except _AttemptFailed as exc:
                reason = exc.reason
            log.debug("nimbus_connect_failed", nimbus=self.address, attempt=attempt,
                      reason=reason)
            if attempt < self.options.connect_attempts:
                time.sleep(self.options.backoff_delays[attempt - 1])
        raise NimbusUnavailable(self.host, self.port, reason,
                                self.options.connect_attempts,
                                time.monotonic() - started)

    def _connect_once(self) -> socket.socket:
        """One attempt: a connected (and, with TLS, handshaken) socket.

        Raises:
            _AttemptFailed: the attempt failed in a way the next one may not.
            TlsError: a certificate or TLS refusal (not worth another attempt).
        """
        if self.options.unix_socket is not None:
            return _connect_unix(self.options.unix_socket, self.options.connect_timeout)
        try:
            sock = socket.create_connection((self.host, self.port),
                                            timeout=self.options.connect_timeout)
        except socket.gaierror as exc:
            raise _AttemptFailed(f"cannot resolve {self.host!r} ({exc.strerror})") from None
        except TimeoutError:
            raise _AttemptFailed(f"connect timed out after "
                                 f"{self.options.connect_timeout} s") from None
        except ConnectionRefusedError:
            raise _AttemptFailed("connection refused") from None
        except OSError as exc:
            raise _AttemptFailed(exc.strerror or str(exc)) from None
        # A call is one frame written at once and then a wait for the reply: nothing
        # to coalesce, and Nagle would hold a frame's last segment back until the
        # previous one is acknowledged.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.tls is None:
            return sock
        try:
            # The handshake runs within connect_timeout (the socket's timeout).
            return self.tls.context.wrap_socket(sock, server_hostname=self.host)
        except ssl.SSLError as exc:
            sock.close()
            failure = self._tls_error(exc)
            if failure is not None:
                raise failure from None
            if isinstance(exc, ssl.SSLEOFError):
                # A plaintext server closes on a ClientHello; so may a TLS server that
                # is restarting or full, which is why this one is retried.
                raise _AttemptFailed("the server closed the connection during the TLS "
                                     "handshake (does this port speak TLS?)") from None
            raise _AttemptFailed(f"the TLS handshake broke off ({exc.reason or exc})") \
                from None
        except TimeoutError:
            sock.close()
            raise _AttemptFailed(f"the TLS handshake timed out after "
                                 f"{self.options.connect_timeout} s") from None
        except OSError as exc:
            sock.close()
            raise _AttemptFailed(f"the TLS handshake broke off "
                                 f"({exc.strerror or exc})") from None

    def _dropped(self, sock: socket.socket) -> bool:
        try:
            return _dropped(sock)
        except ssl.SSLError as exc:
            # A TLS 1.3 server refuses this client's certificate after the client's
            # handshake is over: the refusal can be what is waiting on an idle
            # connection (connect() and then a call), and must not pass for a close.
            self.discard()
            failure = self._tls_error(exc)
            if failure is not None:
                raise failure from None
            return True

    def _tls_error(self, exc: ssl.SSLError) -> TlsError | None:
        assert self.tls is not None
        verdict = classify(exc, self.host, self.tls)
        if verdict is None:
            return None
        refused, cause, reason = verdict
        return TlsError(self.host, self.port, refused, cause, reason)

    def exchange(self, service: Any, method: str, seqid: int, frame: bytes) -> Any:
        """Send one frame on the open connection and return the decoded reply."""
        sock = self._sock
        assert sock is not None
        deadline = time.monotonic() + self.options.timeout
        send_error: OSError | None = None
        try:
            sock.settimeout(self.options.timeout)
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
                size = check_reply_length(prefix, self.options.max_frame_size)
            except UnreadableReply as exc:
                self.discard()
                raise BadReply(self.host, self.port, method, str(exc)) from None
            payload = self._recv_exactly(sock, size, deadline, method)
            self._answered = True
        except ConnectionLost:
            if send_error is None:
                raise
            raise ConnectionLost(self.host, self.port, method,
                                 f"sending failed ({send_error.strerror or send_error})"
                                 ) from send_error
        if send_error is not None:
            self.discard()
        try:
            return decode_reply(service, method, seqid, payload,
                                self.options.decoded_size_factor)
        except TApplicationException as exc:
            raise self._app_error(method, exc) from None
        except UnreadableReply as exc:
            self.discard()
            raise BadReply(self.host, self.port, method, str(exc)) from None

    def _app_error(self, method: str, exc: TApplicationException) -> NimbusClientError:
        message = exc.message or ""
        if exc.type == AppErrorCode.PROTOCOL_ERROR:
            refusal = parse_frame_refusal(message)
            if refusal is not None:
                # The server closes the connection after this reply.
                self.discard()
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
            except ssl.SSLError as exc:
                # With TLS 1.3 the server's refusal of this client's certificate is
                # the first thing read after the handshake.
                self.discard()
                failure = self._tls_error(exc)
                if failure is not None:
                    raise failure from None
                raise ConnectionLost(self.host, self.port, method,
                                     f"TLS failed ({exc.reason or exc})") from None
            except OSError as exc:
                self.discard()
                reason = exc.strerror or str(exc)
                if isinstance(exc, ConnectionResetError):
                    reason = self._maybe_tls_only(reason, got, n)
                raise ConnectionLost(self.host, self.port, method, reason) from None
            if k == 0:
                self.discard()
                reason = ("the server closed the connection without replying"
                          if got == 0 and n == 4 else
                          f"the server closed the connection {got} bytes into a "
                          f"{n}-byte read of the reply")
                raise ConnectionLost(self.host, self.port, method, reason)
            got += k
        return buf

    def _maybe_tls_only(self, reason: str, got: int, n: int) -> str:
        # A TLS-only nimbus closes a plaintext connection at its first bytes, unread,
        # so the kernel resets it: say what that may be, on a connection that never
        # had a reply (a server that took the request and then closed is not this).
        if self._answered or got or n != 4 or self.tls is not None \
                or self.options.unix_socket is not None:
            return reason
        return f"{reason} (a nimbus that speaks only TLS does this to plaintext " \
               f"clients: give this one the CA certificate that signed the server's)"

    def _fail_timeout(self, method: str) -> NoReturn:
        # Discarded so the late reply, if it comes, is never read as another call's.
        self.discard()
        raise NimbusTimeout(self.host, self.port, method, self.options.timeout)


class _AttemptFailed(Exception):
    """One connection attempt failed; ``reason`` says how (the last one is reported)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _connect_unix(path: str, timeout: float) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(path)
    except FileNotFoundError:
        sock.close()
        raise _AttemptFailed("no such socket file (is the daemon running?)") from None
    except ConnectionRefusedError:
        sock.close()
        raise _AttemptFailed("nothing listens on the socket (a daemon that stopped "
                             "without removing it?)") from None
    except PermissionError:
        sock.close()
        raise _AttemptFailed("permission denied (the socket is open to the daemon's user "
                             "and group)") from None
    except TimeoutError:
        sock.close()
        raise _AttemptFailed(f"connect timed out after {timeout} s") from None
    except OSError as exc:
        sock.close()
        raise _AttemptFailed(exc.strerror or str(exc)) from None
    return sock


def _dropped(sock: socket.socket) -> bool:
    """Whether the peer closed (or reset) an idle connection, or sent bytes no call
    asked for: either way it cannot carry the next call."""
    if isinstance(sock, ssl.SSLSocket):
        return _tls_dropped(sock)
    try:
        sock.settimeout(0.0)
        sock.recv(1, socket.MSG_PEEK)  # b"" (closed) or stray bytes
    except BlockingIOError:
        return False  # nothing to read: still open
    except OSError:
        return True
    return True


def _tls_dropped(sock: ssl.SSLSocket) -> bool:
    # TLS cannot peek, and an idle TLS connection is readable without any data for the
    # caller: TLS 1.3 servers send session tickets after the handshake. A non-blocking
    # read consumes those records and says which it was.
    # Other TLS errors (an alert) are raised for the caller to read.
    try:
        sock.settimeout(0.0)
        sock.recv(1)  # b"" (closed) or a stray byte: the connection is done either way
    except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
        return False  # only TLS records, or nothing: still open
    except ssl.SSLError:
        raise
    except OSError:
        return True
    return True
