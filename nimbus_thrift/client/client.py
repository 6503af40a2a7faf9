"""A Python client of the Nimbus service (``idl/nimbus.thrift``): framed transport,
binary protocol, one call at a time.

One call::

    call(name, args)
      | bind args to the IDL's argument names          TypeError
      | encode [length][CALL header][args struct]      FrameRefused (client side: nothing sent)
      | connect, if not connected (or the server       NimbusUnavailable (nothing sent)
      |   dropped the idle connection): attempts
      |   with bounded exponential back-off
      | send the frame, read one reply frame,          NimbusTimeout, ConnectionLost
      |   all within `timeout` seconds                   (the socket is discarded)
      | decode (bounds-checked, nimbus_thrift.rpc.binary)  BadReply (socket discarded)
      v
    REPLY     -> the IDL's result, or its declared exception raised as-is
    EXCEPTION -> FrameRefused (server side) or ServerError

Why a socket is discarded after a timeout or a broken reply: the server may still
answer the abandoned call, and that late reply must never be read as the answer to
the next one. The next call connects afresh.

Why only the pure getters are retried after a lost connection: a mutating call
(submitTopology, killTopology, uploadChunk, ...) may have reached the server and taken
effect before the connection broke; sending it again could submit twice, append a
chunk twice or report NotAliveException for a kill that worked. A caller who knows
the call is safe to repeat can catch :class:`ConnectionLost` and call again.

The protocol steps (binding, encoding, decoding, back-off delays, reading the
server's refusal message) are module functions without sockets, tested byte by byte.
"""

from __future__ import annotations

import math
import os
import re
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

import structlog
from thriftpy2.thrift import TApplicationException

from ..rpc import binary
from ..idl import NIMBUS_PORT, nimbus_idl
from ..rpc.errors import AppErrorCode, RpcError
# The server's default frame cap (Apache Thrift's TConfiguration default): a larger
# frame would be refused anyway, so it is refused here before it is sent. Also the
# largest reply frame read.
from ..rpc.options import DEFAULT_MAX_FRAME_SIZE

log = structlog.get_logger(__name__)


#: Seconds one call may take, sending included. Every Nimbus call is short (the
#: slowest moves one upload chunk); 30 s matches the server's own frame-read and
#: write timeouts, so a stuck peer surfaces in the same time on both sides.
DEFAULT_TIMEOUT = 30.0

#: Seconds one connection attempt may take. A live host answers a SYN in
#: milliseconds; a few seconds covers a loaded host or a lost first SYN.
DEFAULT_CONNECT_TIMEOUT = 5.0

#: Connection attempts per connect, so a Nimbus that is restarting (or briefly
#: over its connection limit) is waited for a little instead of failing at once.
DEFAULT_CONNECT_ATTEMPTS = 3

#: Back-off before the second attempt, multiplied by the factor before each further
#: one, never above the cap: with the defaults 0.1 s then 0.2 s (0.3 s in all), and
#: at most 2 s between any two attempts however many are configured.
DEFAULT_BACKOFF_INITIAL = 0.1
DEFAULT_BACKOFF_FACTOR = 2.0
DEFAULT_BACKOFF_MAX = 2.0


#: Bytes per uploadChunk: what Storm's StormSubmitter sends.
DEFAULT_CHUNK_SIZE = 307_200

#: Seconds to wait for a topology to run. A Spark application takes 10 to 60 s to
#: start its JVM, session and first micro-batch; five minutes covers a busy cluster
#: that must first free executors.
DEFAULT_WAIT_TIMEOUT = 300.0
#: Seconds between getTopologyInfo calls while waiting: the daemon's driver writes its
#: status about twice a second, so polling faster shows nothing new.
DEFAULT_POLL_INTERVAL = 0.5

#: Methods that only read, so sending one twice cannot change anything: the only
#: calls retried (once) after the connection is lost mid-call. beginFileDownload and
#: downloadChunk are not among them: they move a server-side download cursor.
READ_ONLY_METHODS = frozenset({
    "getNimbusConf", "getClusterInfo", "getTopologyInfo", "getTopologyConf",
    "getTopology", "getUserTopology", "getLeader", "isTopologyNameAllowed",
})

_MAX_SEQID = 0x7FFFFFFF


# --------------------------------------------------------------------------- errors


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class NimbusClientError(Exception):
    """Base of every error the client raises itself (IDL exceptions such as
    ``NotAliveException`` are the server's answers and are raised as they are)."""

    def __init__(self, message: str, host: str, port: int) -> None:
        super().__init__(message)
        self.host = host
        self.port = port

    @property
    def address(self) -> str:
        """``host:port`` (``[v6]:port``) of the Nimbus concerned."""
        return _address(self.host, self.port)


class NimbusUnavailable(NimbusClientError):
    """No connection could be made. Nothing was sent, so any call may be repeated."""

    def __init__(self, host: str, port: int, reason: str, attempts: int,
                 elapsed: float) -> None:
        self.reason = reason
        self.attempts = attempts
        self.elapsed = elapsed
        plural = "attempt" if attempts == 1 else "attempts"
        super().__init__(f"no nimbus at {_address(host, port)}: {reason} "
                         f"(after {attempts} {plural} over {elapsed:.1f} s)", host, port)


class NimbusTimeout(NimbusClientError):
    """The call did not complete within ``timeout`` seconds. The server may still
    carry it out; the connection was discarded."""

    def __init__(self, host: str, port: int, method: str, timeout: float) -> None:
        self.method = method
        self.timeout = timeout
        super().__init__(f"timed out after {float(timeout)} s waiting for {method} from "
                         f"{_address(host, port)}", host, port)


class FrameRefused(NimbusClientError):
    """A request frame over a size limit.

    ``refused_by`` is ``"client"`` when it was larger than the client's
    ``max_frame_size`` and never sent (the connection is kept), ``"server"`` when the
    server answered that it exceeds its limit (the server then closes the connection).
    ``size`` is the frame's length without its 4-byte prefix, as both sides count it.
    """

    def __init__(self, host: str, port: int, method: str, size: int, limit: int,
                 refused_by: str, server_message: str | None = None) -> None:
        self.method = method
        self.size = size
        self.limit = limit
        self.refused_by = refused_by
        self.server_message = server_message
        if refused_by == "server":
            text = (f"server refused a frame of {size} bytes (limit {limit}): {method} "
                    f"to {_address(host, port)} (server said: {server_message})")
        else:
            text = (f"refused to send a frame of {size} bytes (limit {limit}, the "
                    f"client's max_frame_size): {method} to {_address(host, port)}")
        super().__init__(text, host, port)


class ConnectionLost(NimbusClientError):
    """The connection broke after the request was (at least partly) sent and before
    the whole reply arrived. A mutating call may or may not have taken effect."""

    def __init__(self, host: str, port: int, method: str, reason: str,
                 retried: bool = False) -> None:
        self.method = method
        self.reason = reason
        self.retried = retried
        if retried:
            note = "; failed again after reconnecting once"
        elif method in READ_ONLY_METHODS:
            note = ""
        else:
            note = (f"; not retried: {method} changes state and may already have "
                    f"taken effect")
        super().__init__(f"lost the connection to nimbus at {_address(host, port)} during "
                         f"{method}: {reason}{note}", host, port)


class ServerError(NimbusClientError):
    """The server answered with a ``TApplicationException`` (other than a frame-size
    refusal): an unknown method, arguments it could not decode, a handler crash, an
    overloaded server. ``code`` is the exception's type, ``server_message`` its text."""

    def __init__(self, host: str, port: int, method: str, code: int,
                 server_message: str) -> None:
        self.method = method
        self.code = code
        self.server_message = server_message
        try:
            name = AppErrorCode(code).name
        except ValueError:
            name = "UNKNOWN CODE"
        super().__init__(f"nimbus at {_address(host, port)} failed {method}: {name} "
                         f"({code}): {server_message}", host, port)


class BadReply(NimbusClientError):
    """The bytes that came back are not a reply to the call (not framed Thrift, a
    frame over ``max_frame_size``, undecodable, the wrong method or seqid). The
    connection was discarded."""

    def __init__(self, host: str, port: int, method: str, reason: str) -> None:
        self.method = method
        self.reason = reason
        super().__init__(f"bad reply to {method} from {_address(host, port)}: {reason}",
                         host, port)


# --------------------------------------------------------------------------- protocol
# No sockets below this line until NimbusClient.


def backoff_delays(attempts: int, initial: float, factor: float,
                   maximum: float) -> list[float]:
    """Seconds to wait before attempts 2..``attempts``: ``initial`` times ``factor``
    to the power of the attempt's index, capped at ``maximum``."""
    return [min(initial * factor ** i, maximum) for i in range(max(0, attempts - 1))]


def bind_args(service: Any, method: str, args: tuple[Any, ...],
              kwargs: dict[str, Any]) -> Any:
    """The ``<method>_args`` struct of ``service`` holding ``args`` (in IDL order) and
    ``kwargs`` (by IDL name). Every argument must be given; None sends it unset.

    Raises:
        AttributeError: the service has no such method.
        TypeError: too many, unknown, repeated or missing arguments.
    """
    if method not in service.thrift_services:
        raise AttributeError(f"the Nimbus service has no method {method!r}")
    args_cls = getattr(service, method + "_args")
    # thrift_spec keeps the IDL's declaration order (thriftpy2 builds it in order).
    names = [entry[1] for entry in args_cls.thrift_spec.values()]
    if len(args) > len(names):
        raise TypeError(f"{method}() takes {len(names)} arguments ({len(args)} given)")
    values = dict(zip(names, args))
    for key, value in kwargs.items():
        if key not in names:
            raise TypeError(f"{method}() got an unexpected keyword argument {key!r}")
        if key in values:
            raise TypeError(f"{method}() got multiple values for argument {key!r}")
        values[key] = value
    missing = [name for name in names if name not in values]
    if missing:
        raise TypeError(f"{method}() missing argument(s): {', '.join(missing)}")
    return args_cls(**values)


def encode_call(method: str, seqid: int, args: Any) -> bytes:
    """The payload of one CALL frame (strict header + args struct), without the
    4-byte length prefix.

    Raises:
        TypeError: an argument does not match its IDL type (thriftpy2's message).
    """
    try:
        return binary.encode_message(method, binary.CALL, seqid, args)
    except Exception as exc:  # thriftpy2 raises TDecodeException, struct.error, ...
        raise TypeError(f"arguments of {method} do not match the IDL: {exc}") from None


class UnreadableReply(Exception):
    """A reply payload that is not a reply to the call; the text says why."""


def check_reply_length(prefix: bytes | bytearray, max_frame_size: int) -> int:
    """The length in a reply frame's 4-byte prefix, checked before any buffer is made.

    Raises:
        UnreadableReply: not a positive length within ``max_frame_size``.
    """
    size = int.from_bytes(prefix, "big", signed=True)
    if 0 < size <= max_frame_size:
        return size
    what = (f"a reply frame of {size} bytes exceeds max_frame_size {max_frame_size}"
            if size > 0 else f"a reply frame length of {size}")
    if all(32 <= b < 127 for b in prefix):
        # Text where a length should be: something other than framed Thrift answered
        # (an HTTP server, for instance, replies "HTTP/1.1 400 ...").
        what += f" (the reply starts with {prefix.decode('ascii')!r}: not framed Thrift)"
    raise UnreadableReply(what)


def decode_reply(service: Any, method: str, seqid: int,
                 payload: bytes | bytearray) -> Any:
    """Decode the reply payload to a call of ``method`` with ``seqid``.

    Returns the result (None for a void method).

    Raises:
        the IDL exception the server declared (e.g. ``NotAliveException``), as is.
        TApplicationException: the server answered with one (EXCEPTION message).
        UnreadableReply: undecodable, not a reply, or a reply to another call.
    """
    try:
        header = binary.read_message_header(payload)
        if header.type == binary.EXCEPTION:
            # Not matched against method/seqid: a server refusing an oversized frame
            # may answer before it has read the call's header (name "", seqid 0), and
            # one call at a time per connection means it can only be about ours.
            app_error, _ = binary.decode_struct(TApplicationException, payload, header.end)
            raise app_error
        if header.type != binary.REPLY:
            raise UnreadableReply(f"message type {header.type} where a REPLY (2) was "
                                  f"expected")
        if header.name != method or header.seqid != seqid:
            raise UnreadableReply(f"it answers {header.name or '?'} #{header.seqid}, not "
                                  f"{method} #{seqid}")
        result_cls = getattr(service, method + "_result")
        result, _ = binary.decode_struct(result_cls, payload, header.end)
    except RpcError as exc:
        raise UnreadableReply(str(exc)) from None
    spec = result_cls.thrift_spec
    if 0 in spec and result.success is not None:
        return result.success
    for entry in spec.values():
        error = getattr(result, entry[1])
        if entry[1] != "success" and error is not None:
            raise error
    if 0 in spec:
        raise UnreadableReply("it carries neither a result nor a declared exception")
    return None


#: Numbers in a refusal message ("16384000", "16,384,000").
_NUMBER = re.compile(r"\d(?:[\d,_]*\d)?")


def parse_frame_refusal(message: str | None) -> tuple[int, int] | None:
    """``(size, limit)`` from a server's PROTOCOL_ERROR message about an oversized
    frame, or None when the message is about something else.

    This server says "frame of N bytes refused: the max frame size is M bytes" (or
    "... the server's whole read-buffer budget (max_read_buffer_bytes) is M bytes");
    other Thrift servers say e.g. "Frame size (N) larger than max length (M)!". So:
    the message mentions a frame, its first number is the size, its last the limit,
    and the size is over the limit.
    """
    if not message or "frame" not in message.lower():
        return None
    numbers = [int(n.replace(",", "").replace("_", "")) for n in _NUMBER.findall(message)]
    if len(numbers) < 2 or numbers[0] <= numbers[-1]:
        return None
    return numbers[0], numbers[-1]


# --------------------------------------------------------------------------- client


def _seconds(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive number of seconds, not {value!r}.")
    return float(value)


def _count(name: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer of at least {minimum}, not {value!r}.")
    return value


class NimbusClient:
    """A connection to one Nimbus, with every method of the Nimbus IDL.

    Each IDL method is a method here with the IDL's argument names (positional or
    keyword); it returns the IDL's struct (or str, bytes, bool, None) and raises the
    IDL's declared exceptions (``NotAliveException``, ``AlreadyAliveException``,
    ``InvalidTopologyException``, ``AuthorizationException``, classes of
    :func:`nimbus_idl`) as they are, besides the :class:`NimbusClientError` family.

    Connects on the first call (or :meth:`connect`, or entering ``with``); reconnects
    on the next call after a timeout or a lost connection. Thread-safe: calls from
    several threads take turns (a lock held for the whole call, reconnection
    included), because one connection carries one call at a time.

    Use it as a context manager, or call :meth:`close`.
    """

    def __init__(self, host: str = "localhost", port: int = NIMBUS_PORT, *,
                 timeout: float = DEFAULT_TIMEOUT,
                 connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
                 connect_attempts: int = DEFAULT_CONNECT_ATTEMPTS,
                 backoff_initial: float = DEFAULT_BACKOFF_INITIAL,
                 backoff_factor: float = DEFAULT_BACKOFF_FACTOR,
                 backoff_max: float = DEFAULT_BACKOFF_MAX,
                 max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        """Set the client up; nothing is connected yet.

        Args:
            host, port: where Nimbus listens.
            timeout: seconds one call may take, from sending to the whole reply.
            connect_timeout: seconds one connection attempt may take.
            connect_attempts: attempts per connect before NimbusUnavailable.
            backoff_initial, backoff_factor, backoff_max: seconds before the second
                attempt, its multiplier per further attempt, and the cap.
            max_frame_size: largest frame sent or read (without the 4-byte prefix).

        Raises:
            ValueError: an argument out of range, in a sentence naming it.
        """
        if not isinstance(host, str) or not host:
            raise ValueError(f"host must be a non-empty string, not {host!r}.")
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise ValueError(f"port must be an integer from 1 to 65535, not {port!r}.")
        self.host = host
        self.port = port
        self.timeout = _seconds("timeout", timeout)
        self.connect_timeout = _seconds("connect_timeout", connect_timeout)
        self.connect_attempts = _count("connect_attempts", connect_attempts)
        if isinstance(backoff_initial, bool) or not isinstance(backoff_initial, (int, float)) \
                or not math.isfinite(backoff_initial) or backoff_initial < 0:
            raise ValueError(f"backoff_initial must be a number of seconds of at least 0, "
                             f"not {backoff_initial!r}.")
        if isinstance(backoff_factor, bool) or not isinstance(backoff_factor, (int, float)) \
                or not math.isfinite(backoff_factor) or backoff_factor < 1:
            raise ValueError(f"backoff_factor must be a number of at least 1, "
                             f"not {backoff_factor!r}.")
        if isinstance(backoff_max, bool) or not isinstance(backoff_max, (int, float)) \
                or not math.isfinite(backoff_max) or backoff_max < backoff_initial:
            raise ValueError(f"backoff_max must be a number of seconds of at least "
                             f"backoff_initial ({backoff_initial!r}), not {backoff_max!r}.")
        self.backoff_delays = backoff_delays(self.connect_attempts, float(backoff_initial),
                                             float(backoff_factor), float(backoff_max))
        self.max_frame_size = _count("max_frame_size", max_frame_size)
        self._sock: socket.socket | None = None
        self._closed = False
        self._seqid = 0
        self._lock = threading.Lock()

    # ----------------------------------------------------------------- lifecycle

    @property
    def idl(self) -> ModuleType:
        """The Nimbus IDL module (see :func:`nimbus_idl`): structs and exceptions."""
        return nimbus_idl()

    @property
    def address(self) -> str:
        return _address(self.host, self.port)

    @property
    def connected(self) -> bool:
        """Whether a connection is open now (it may since have been closed by the
        server; the next call finds out and reconnects)."""
        return self._sock is not None

    def connect(self) -> None:
        """Connect now unless connected (calls connect by themselves when needed).

        Raises:
            NimbusUnavailable: every attempt failed; the message has the last reason.
            NimbusClientError: the client is closed.
        """
        with self._lock:
            self._check_open()
            self._ensure_connected()

    def close(self) -> None:
        """Close the connection. The client cannot be used afterwards."""
        with self._lock:
            self._closed = True
            self._discard()

    def __enter__(self) -> "NimbusClient":
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "connected" if self._sock else "idle"
        return f"<NimbusClient {self.address} {state}>"

    # ----------------------------------------------------------------- calls

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call the IDL method ``method`` with its arguments (positional in IDL order,
        or by IDL name) and return its result.

        Raises:
            the method's declared IDL exceptions, as the server raised them.
            NimbusUnavailable: could not connect (nothing was sent).
            NimbusTimeout: no complete reply within ``timeout``.
            FrameRefused: the request is over the client's or the server's frame limit.
            ConnectionLost: the connection broke mid-call (read-only methods were
                retried once on a new connection first).
            ServerError: the server answered with a TApplicationException.
            BadReply: the answer is not a reply to this call.
            AttributeError, TypeError: no such method, or arguments that do not fit.
            NimbusClientError: the client is closed.
        """
        service = nimbus_idl().Nimbus
        args_struct = bind_args(service, method, args, kwargs)
        with self._lock:
            self._check_open()
            self._seqid = self._seqid % _MAX_SEQID + 1
            seqid = self._seqid
            payload = encode_call(method, seqid, args_struct)
            if len(payload) > self.max_frame_size:
                raise FrameRefused(self.host, self.port, method, len(payload),
                                   self.max_frame_size, "client")
            frame = binary.frame_header(len(payload)) + payload
            retried = False
            while True:
                self._ensure_connected()
                try:
                    return self._exchange(service, method, seqid, frame)
                except ConnectionLost as lost:
                    if method not in READ_ONLY_METHODS:
                        raise
                    if retried:
                        raise ConnectionLost(self.host, self.port, method, lost.reason,
                                             retried=True) from lost
                    retried = True
                    log.info("nimbus_call_retried", nimbus=self.address, method=method,
                             reason=lost.reason)

    def _check_open(self) -> None:
        if self._closed:
            raise NimbusClientError(f"the client of nimbus at {self.address} is closed",
                                    self.host, self.port)

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
            return decode_reply(service, method, seqid, payload)
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

    # ----------------------------------------------------------------- files

    def upload_file(self, path: str | os.PathLike[str], chunk_size: int = DEFAULT_CHUNK_SIZE,
                    progress: Callable[[int, int], None] | None = None) -> str:
        """Upload a file (beginFileUpload, uploadChunk per chunk, finishFileUpload) and
        return its location on the server, for submitTopology's uploadedJarLocation.

        Args:
            path: the file to send.
            chunk_size: bytes per uploadChunk call.
            progress: called as ``progress(bytes_sent, total)`` after each chunk the
                server accepted (``total`` is the size when the upload began).

        Raises:
            OSError: the file cannot be read (checked before anything is sent).
            ValueError: chunk_size is not a positive integer.
            and what :meth:`call` raises.
        """
        chunk_size = _count("chunk_size", chunk_size)
        with open(path, "rb") as source:
            total = os.fstat(source.fileno()).st_size
            location: str = self.beginFileUpload()
            sent = 0
            while chunk := source.read(chunk_size):
                self.uploadChunk(location, chunk)
                sent += len(chunk)
                if progress is not None:
                    progress(sent, total)
        self.finishFileUpload(location)
        return location

    def download_file(self, file: str, dest_path: str | os.PathLike[str]) -> int:
        """Download ``file`` (a topology id or an upload location) to ``dest_path``
        and return the number of bytes written.

        The bytes go to a temporary file beside ``dest_path`` (mode 0600), renamed
        over it once complete, so ``dest_path`` never holds a partial download.

        Raises:
            OSError: the destination cannot be written.
            and what :meth:`call` raises (the temporary file is then removed).
        """
        dest = Path(dest_path)
        session: str = self.beginFileDownload(file)
        fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.",
                                        suffix=".part")
        try:
            size = 0
            with os.fdopen(fd, "wb") as out:
                while chunk := self.downloadChunk(session):
                    out.write(chunk)
                    size += len(chunk)
                out.flush()
                os.fsync(out.fileno())  # complete on disk before it takes dest's name
            os.replace(tmp_name, dest)
        except BaseException:
            os.unlink(tmp_name)
            raise
        return size

    # ----------------------------------------------------------------- topologies

    def submit_topology(self, topology: Any, name: str | None = None,
                        conf: dict[str, Any] | None = None, *,
                        class_name: str | None = None, inactive: bool = False,
                        wait: bool = False, timeout: float = DEFAULT_WAIT_TIMEOUT,
                        poll_interval: float = DEFAULT_POLL_INTERVAL,
                        progress: Callable[[int, int], None] | None = None,
                        on_status: Callable[[str], None] | None = None) -> str:
        """Package a topology's code, check it, upload it, submit it; return its id.

        Everything that can be checked locally is, before anything is sent: the file
        imports, the topology is well formed, every component's ``module.Class`` is in
        the code zip, the configuration and name are valid (the daemon's own checks).

        Args:
            topology: a topology ``.py`` file, or a Topology subclass (its project
                root is derived from its module). The project root (the file's
                directory, or the one above its top package) is zipped: ``*.py`` and
                package data (see :mod:`nimbus_thrift.topology.package`).
            name: topology name; default the class's ``name`` attribute, else the
                file's stem.
            conf: topology configuration over the class's ``config``.
            class_name: the Topology class, when the file defines several.
            inactive: submit with its spouts paused (status INACTIVE).
            wait: after submitting, poll until it runs (see :meth:`wait_for_topology`).
            timeout: seconds ``wait`` waits in all.
            poll_interval: seconds between polls while waiting.
            progress: ``progress(bytes_sent, total)`` after each uploaded chunk.
            on_status: called with each new ``sched_status`` while waiting.

        Raises:
            PackageError (nimbus_thrift.topology.package): the file cannot be loaded,
                packaged or would be refused; nothing was sent.
            AlreadyAliveException: the name is taken; nothing was uploaded.
            SubmitError: the code is over the daemon's upload cap; nothing uploaded.
            TopologyFailed, TopologyNotScheduled, TopologyWaitTimeout: with ``wait``,
                see :meth:`wait_for_topology` (the topology stays submitted).
            and what :meth:`call` raises.
        """
        from .submit import submit_topology
        return submit_topology(self, topology, name, conf, class_name=class_name,
                               inactive=inactive, wait=wait, timeout=timeout,
                               poll_interval=poll_interval, progress=progress,
                               on_status=on_status)

    def wait_for_topology(self, topology_id: str, *, inactive: bool = False,
                          timeout: float = DEFAULT_WAIT_TIMEOUT,
                          poll_interval: float = DEFAULT_POLL_INTERVAL,
                          on_status: Callable[[str], None] | None = None) -> Any:
        """Poll getTopologyInfo until the topology runs; return its TopologyInfo.

        Its ``sched_status`` starts with a state word: ``running`` (or ``finished``;
        ``paused`` too when ``inactive``) ends the wait; ``starting`` and the like keep
        it going.

        Raises:
            TopologyFailed: its state is ``failed`` or ``stopped``, it was killed or
                removed, or the daemon recorded an error of its own for it.
            TopologyNotScheduled: the daemon runs nothing (launcher ``none``; state
                ``unscheduled``): raised at once rather than waiting forever.
            TopologyWaitTimeout: not running within ``timeout`` (a NimbusTimeout);
                ``status`` is the last sched_status.
            and what :meth:`call` raises.
        """
        from .submit import wait_for_topology
        return wait_for_topology(self, topology_id, inactive=inactive, timeout=timeout,
                                 poll_interval=poll_interval, on_status=on_status)

    # ----------------------------------------------------------------- the IDL
    # One method per Nimbus method, in IDL order, with the IDL's argument names.

    def submitTopology(self, name: str, uploadedJarLocation: str, jsonConf: str,
                       topology: Any) -> None:
        """Submit ``topology`` (a StormTopology) as ``name``, running the code uploaded
        to ``uploadedJarLocation``; ``jsonConf`` is a JSON object.
        Raises AlreadyAliveException, InvalidTopologyException, AuthorizationException."""
        return self.call("submitTopology", name, uploadedJarLocation, jsonConf, topology)

    def submitTopologyWithOpts(self, name: str, uploadedJarLocation: str, jsonConf: str,
                               topology: Any, options: Any) -> None:
        """submitTopology with SubmitOptions (initial status).
        Raises AlreadyAliveException, InvalidTopologyException, AuthorizationException."""
        return self.call("submitTopologyWithOpts", name, uploadedJarLocation, jsonConf,
                         topology, options)

    def killTopology(self, name: str) -> None:
        """Kill the topology ``name``. Raises NotAliveException, AuthorizationException."""
        return self.call("killTopology", name)

    def killTopologyWithOpts(self, name: str, options: Any) -> None:
        """Kill with KillOptions (wait_secs).
        Raises NotAliveException, AuthorizationException."""
        return self.call("killTopologyWithOpts", name, options)

    def activate(self, name: str) -> None:
        """Activate ``name``. Raises NotAliveException, AuthorizationException."""
        return self.call("activate", name)

    def deactivate(self, name: str) -> None:
        """Deactivate ``name``. Raises NotAliveException, AuthorizationException."""
        return self.call("deactivate", name)

    def rebalance(self, name: str, options: Any) -> None:
        """Rebalance ``name`` with RebalanceOptions. Raises NotAliveException,
        InvalidTopologyException, AuthorizationException."""
        return self.call("rebalance", name, options)

    def beginFileUpload(self) -> str:
        """Start an upload; returns its location. Raises AuthorizationException."""
        return self.call("beginFileUpload")

    def uploadChunk(self, location: str, chunk: bytes) -> None:
        """Append ``chunk`` to the upload at ``location``. Raises AuthorizationException."""
        return self.call("uploadChunk", location, chunk)

    def finishFileUpload(self, location: str) -> None:
        """Complete the upload at ``location``. Raises AuthorizationException."""
        return self.call("finishFileUpload", location)

    def beginFileDownload(self, file: str) -> str:
        """Start downloading ``file`` (a topology id or upload location); returns a
        session id for downloadChunk. Raises AuthorizationException."""
        return self.call("beginFileDownload", file)

    def downloadChunk(self, id: str) -> bytes:
        """The next chunk of download session ``id``; empty at the end.
        Raises AuthorizationException."""
        return self.call("downloadChunk", id)

    def getNimbusConf(self) -> str:
        """Nimbus's configuration, a JSON object. Raises AuthorizationException."""
        return self.call("getNimbusConf")

    def getClusterInfo(self) -> Any:
        """A ClusterSummary. Raises AuthorizationException."""
        return self.call("getClusterInfo")

    def getTopologyInfo(self, id: str) -> Any:
        """A TopologyInfo. Raises NotAliveException, AuthorizationException."""
        return self.call("getTopologyInfo", id)

    def getTopologyConf(self, id: str) -> str:
        """The topology's configuration, a JSON object.
        Raises NotAliveException, AuthorizationException."""
        return self.call("getTopologyConf", id)

    def getTopology(self, id: str) -> Any:
        """The StormTopology as run. Raises NotAliveException, AuthorizationException."""
        return self.call("getTopology", id)

    def getUserTopology(self, id: str) -> Any:
        """The StormTopology as submitted.
        Raises NotAliveException, AuthorizationException."""
        return self.call("getUserTopology", id)

    def getLeader(self) -> Any:
        """The leader's NimbusSummary. Raises AuthorizationException."""
        return self.call("getLeader")

    def isTopologyNameAllowed(self, name: str) -> bool:
        """Whether ``name`` may be submitted. Raises AuthorizationException."""
        return self.call("isTopologyNameAllowed", name)


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
