"""The errors the client raises itself: :class:`NimbusClientError` and its family,
each carrying the Nimbus's address and what it says of the call.

Imported by the transport, :class:`~nimbus_thrift.client.NimbusClient` and the submit
shortcuts; it imports no socket code and nothing of them.
"""

from __future__ import annotations

from ..rpc.errors import AppErrorCode
from .defaults import READ_ONLY_METHODS


#: The port of a client on a Unix domain socket, whose ``host`` is the socket's path
#: (no TCP connection can be made to port 0, so the two cannot be confused).
UNIX_PORT = 0


def format_address(host: str, port: int) -> str:
    """``host:port``, ``[host]:port`` for an IPv6 address, ``unix:PATH`` for a Unix
    socket (``port`` :data:`UNIX_PORT`, ``host`` the path)."""
    if port == UNIX_PORT:
        return f"unix:{host}"
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
        return format_address(self.host, self.port)


class NimbusUnavailable(NimbusClientError):
    """No connection could be made. Nothing was sent, so any call may be repeated."""

    def __init__(self, host: str, port: int, reason: str, attempts: int,
                 elapsed: float) -> None:
        self.reason = reason
        self.attempts = attempts
        self.elapsed = elapsed
        plural = "attempt" if attempts == 1 else "attempts"
        super().__init__(f"no nimbus at {format_address(host, port)}: {reason} "
                         f"(after {attempts} {plural} over {elapsed:.1f} s)", host, port)


class TlsError(NimbusClientError):
    """The TLS handshake failed, or the server refused this client's certificate right
    after it (TLS 1.3 says so on the first read). Never retried: the same certificates
    fail the same way. Nothing the server acted on was sent.

    ``refused`` is ``"server"`` when this client refused the server's certificate,
    ``"client"`` when the server refused this client's (or its absence), None when the
    two could not speak TLS at all. ``cause`` names why: ``unknown_ca``, ``expired``,
    ``not_yet_valid``, ``revoked``, ``hostname``, ``no_client_cert``, ``bad_cert``,
    ``handshake_failure``, ``not_tls``, ``protocol`` or ``other``.
    """

    def __init__(self, host: str, port: int, refused: str | None, cause: str,
                 reason: str) -> None:
        self.refused = refused
        self.cause = cause
        self.reason = reason
        super().__init__(f"TLS with nimbus at {format_address(host, port)} failed: {reason}",
                         host, port)


class NimbusTimeout(NimbusClientError):
    """The call did not complete within ``timeout`` seconds. The server may still
    carry it out; the connection was discarded."""

    def __init__(self, host: str, port: int, method: str, timeout: float) -> None:
        self.method = method
        self.timeout = timeout
        super().__init__(f"timed out after {float(timeout)} s waiting for {method} from "
                         f"{format_address(host, port)}", host, port)


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
                    f"to {format_address(host, port)} (server said: {server_message})")
        else:
            text = (f"refused to send a frame of {size} bytes (limit {limit}, the "
                    f"client's max_frame_size): {method} to {format_address(host, port)}")
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
        super().__init__(f"lost the connection to nimbus at {format_address(host, port)} "
                         f"during {method}: {reason}{note}", host, port)


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
        super().__init__(f"nimbus at {format_address(host, port)} failed {method}: {name} "
                         f"({code}): {server_message}", host, port)


class DownloadTooLarge(NimbusClientError):
    """``download_file`` stopped: the server sent more than the caller's cap. The
    partial file was removed; the connection is fine for further calls."""

    def __init__(self, host: str, port: int, file: str, received: int,
                 limit: int) -> None:
        self.file = file
        self.received = received
        self.limit = limit
        super().__init__(f"download of {file!r} from {format_address(host, port)} "
                         f"stopped: the server sent more than {limit:,} bytes (the "
                         f"download's max_bytes; {received:,} bytes had arrived); the "
                         f"partial file was removed", host, port)


class BadReply(NimbusClientError):
    """The bytes that came back are not a reply to the call (not framed Thrift, a
    frame over ``max_frame_size``, undecodable, the wrong method or seqid). The
    connection was discarded."""

    def __init__(self, host: str, port: int, method: str, reason: str) -> None:
        self.method = method
        self.reason = reason
        super().__init__(f"bad reply to {method} from {format_address(host, port)}: "
                         f"{reason}", host, port)


def _tried(reasons: dict[str, str]) -> str:
    return "; ".join(f"{address}: {reason}" for address, reason in reasons.items())


class NoNimbusAnswered(NimbusUnavailable):
    """A client of several nimbus seeds could connect to none of them (nothing was
    sent). ``reasons`` maps each address tried (``host:port``) to why it failed;
    ``host`` and ``port`` are the first seed's."""

    def __init__(self, host: str, port: int, reasons: dict[str, str], rounds: int,
                 elapsed: float) -> None:
        self.reason = _tried(reasons)
        self.reasons = dict(reasons)
        self.attempts = rounds
        self.elapsed = elapsed
        plural = "round" if rounds == 1 else "rounds"
        NimbusClientError.__init__(
            self, f"no nimbus answered among the seeds {', '.join(reasons)} (after "
                  f"{rounds} {plural} over {elapsed:.1f} s): {self.reason}", host, port)


class NoLeader(NimbusClientError):
    """A state change found no leader to send it to within the client's
    ``leader_wait``: every seed that answered said none is elected, or named one that
    could not be reached. Nothing was carried out. ``reasons`` maps each address asked
    to its last answer."""

    def __init__(self, host: str, port: int, method: str, reasons: dict[str, str],
                 tries: int, waited: float) -> None:
        self.method = method
        self.reasons = dict(reasons)
        self.tries = tries
        self.waited = waited
        plural = "time" if tries == 1 else "times"
        super().__init__(f"no nimbus leader to send {method} to: asked the seeds "
                         f"{tries} {plural} over {waited:.1f} s (leader_wait); "
                         f"{_tried(reasons)}", host, port)


class LeaderChanged(NimbusClientError):
    """A state change (or an operation of several calls, such as an upload and its
    submit) was refused for not reaching the leader after the client had already
    followed the leader once, or midway through an operation that cannot run twice
    (an upload from a stream). Nothing of the refused call was carried out;
    ``host``/``port`` are the nimbus that refused it, ``leader`` the ``host:port`` it
    named (None: no leader is elected)."""

    def __init__(self, host: str, port: int, what: str, leader: str | None,
                 followed: str | None) -> None:
        self.what = what
        self.leader = leader
        named = f"names {leader} as the leader" if leader else "says no leader is elected"
        where = format_address(host, port)
        if followed is None:
            text = (f"{what} was refused midway for not reaching the leader: nimbus at "
                    f"{where} {named}; not run again (what it sends is read only once)")
        else:
            text = (f"{what} was refused twice for not reaching the leader: after "
                    f"following the leader to {followed}, nimbus at {where} {named}; "
                    f"not retried again")
        super().__init__(text, host, port)
