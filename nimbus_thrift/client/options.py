"""What a :class:`~nimbus_thrift.client.NimbusClient` is told: where the nimbus is, how to
reach it (TCP, TLS over TCP, a Unix domain socket) and how long to wait for it.

:class:`ClientOptions` declares each setting once, with its default and its check;
the checks run once, when the options are made, and the options are frozen after.
The transport and the client read them and check nothing again.

The order of the checks is the order the error a caller sees comes from, when several
settings are wrong: first whether TLS and a Unix socket are both asked for, then the
TLS settings (the certificate files are read there), then every other field in the
order it is declared below.
"""

from __future__ import annotations

import math
import os
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from ..rpc.backoff import backoff_delays
# The server's default frame cap (Apache Thrift's TConfiguration default): a larger
# frame would be refused anyway, so it is refused here before it is sent. Also the
# largest reply frame read. Replies decode within the server's own default budget.
from ..rpc.options import DEFAULT_DECODED_SIZE_FACTOR, DEFAULT_MAX_FRAME_SIZE
from .defaults import (DEFAULT_BACKOFF_FACTOR, DEFAULT_BACKOFF_INITIAL, DEFAULT_BACKOFF_MAX,
                       DEFAULT_CONNECT_ATTEMPTS, DEFAULT_CONNECT_TIMEOUT, DEFAULT_LEADER_WAIT,
                       DEFAULT_TIMEOUT)
from .errors import UNIX_PORT, format_address
from .tls import ClientTls, client_context

#: Bytes of a Unix socket path, its terminating NUL included (sockaddr_un's sun_path
#: on Linux): a longer one cannot be connected to at all.
_MAX_UNIX_PATH = 108

#: A field's check: its name, the value given, and the options being made (for the
#: checks that depend on another field); returns the value to keep.
Check = Callable[[str, Any, "ClientOptions"], Any]


def _number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float))


def positive_seconds(name: str, value: Any, _options: Any = None) -> float:
    """``value`` as a float when it is a finite number of seconds over 0.

    Raises:
        ValueError: it is not, in a sentence naming ``name``.
    """
    if not _number(value) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive number of seconds, not {value!r}.")
    return float(value)


def positive_count(name: str, value: Any, _options: Any = None) -> int:
    """``value`` when it is an integer of at least 1.

    Raises:
        ValueError: it is not, in a sentence naming ``name``.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer of at least 1, not {value!r}.")
    return value


def _tcp_host(name: str, value: Any, options: ClientOptions) -> Any:
    if options.unix_socket is not None:
        return value                    # ignored: the socket's path takes its place
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string, not {value!r}.")
    return value


def _tcp_port(name: str, value: Any, options: ClientOptions) -> Any:
    if options.unix_socket is not None:
        return value
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 65536:
        raise ValueError(f"{name} must be an integer from 1 to 65535, not {value!r}.")
    return value


def _unix_path(name: str, value: Any, _options: ClientOptions) -> str | None:
    if value is None:
        return None
    text = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
    if not isinstance(text, str) or not text:
        raise ValueError(f"{name} must be a path, not {value!r}.")
    if len(os.fsencode(text)) >= _MAX_UNIX_PATH:
        raise ValueError(f"{name} {text} is {len(os.fsencode(text))} bytes long; a Unix "
                         f"socket path must be under {_MAX_UNIX_PATH} bytes.")
    return text


def _backoff_initial(name: str, value: Any, _options: ClientOptions) -> Any:
    if not _number(value) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a number of seconds of at least 0, not {value!r}.")
    return value


def _at_least_one(name: str, value: Any, _options: ClientOptions) -> Any:
    # Also refuses nan and inf (1 <= nan is false).
    if not _number(value) or not 1 <= value < math.inf:
        raise ValueError(f"{name} must be a number of at least 1, not {value!r}.")
    return value


def _backoff_max(name: str, value: Any, options: ClientOptions) -> Any:
    if not _number(value) or not math.isfinite(value) or value < options.backoff_initial:
        raise ValueError(f"{name} must be a number of seconds of at least backoff_initial "
                         f"({options.backoff_initial!r}), not {value!r}.")
    return value


def _setting(default: Any, check: Check | None = None) -> Any:
    return field(default=default, metadata={"check": check} if check else {})


@dataclass(frozen=True, kw_only=True)
class ClientOptions:
    """A client's settings, checked when made (see :class:`NimbusClient`'s arguments).

    Fields:
        unix_socket: connect to the Unix domain socket at this path instead of TCP;
            the daemon sees the client as its OS user. No TLS there. With it, ``host``
            is the path and ``port`` :data:`~.errors.UNIX_PORT`.
        host, port: where Nimbus listens (ignored with ``unix_socket``).
        timeout: seconds one call may take, from sending to the whole reply.
        connect_timeout: seconds one connection attempt may take.
        connect_attempts: attempts per connect before NimbusUnavailable.
        backoff_initial, backoff_factor, backoff_max: seconds before the second
            attempt, its multiplier per further attempt, and the cap.
        max_frame_size: largest frame sent or read (without the 4-byte prefix).
        decoded_size_factor: memory a reply may decode to, per byte of its frame (at
            least 1 MiB in all); past it the reply is a BadReply.
        ssl_context: speak TLS with this client context (its certificate, the CAs it
            trusts, its host name check); the server's name is ``host``.
        cert_file, key_file, ca_file: speak TLS with a context made of these files
            (PEM): the server's certificate is verified against ``ca_file`` (the
            system's CAs without it) and must name ``host``; ``cert_file`` and
            ``key_file`` are the client's certificate, presented to a server that
            asks (mutual TLS). TLS 1.2 at least.
        leader_wait: with several nimbus seeds, seconds a state change waits for a
            leader to be elected before NoLeader.

    Made from them: ``tls`` (the context, or None for plaintext) and
    ``backoff_delays`` (the seconds before attempts 2, 3, ...).

    Raises:
        ValueError: a setting out of range, a certificate file that cannot be used, or
            settings that exclude each other, in a sentence naming it.
    """

    # Checked in this order, after the TLS settings (see the module docstring).
    # Given as a path of any kind; kept as a str.
    unix_socket: str | None = _setting(None, _unix_path)
    # No defaults: NimbusClient's arguments have them (the one place they are said).
    host: str = field(metadata={"check": _tcp_host})
    port: int = field(metadata={"check": _tcp_port})
    timeout: float = _setting(DEFAULT_TIMEOUT, positive_seconds)
    connect_timeout: float = _setting(DEFAULT_CONNECT_TIMEOUT, positive_seconds)
    connect_attempts: int = _setting(DEFAULT_CONNECT_ATTEMPTS, positive_count)
    backoff_initial: float = _setting(DEFAULT_BACKOFF_INITIAL, _backoff_initial)
    backoff_factor: float = _setting(DEFAULT_BACKOFF_FACTOR, _at_least_one)
    backoff_max: float = _setting(DEFAULT_BACKOFF_MAX, _backoff_max)
    max_frame_size: int = _setting(DEFAULT_MAX_FRAME_SIZE, positive_count)
    decoded_size_factor: float = _setting(DEFAULT_DECODED_SIZE_FACTOR, _at_least_one)
    ssl_context: ssl.SSLContext | None = _setting(None)
    cert_file: str | os.PathLike[str] | None = _setting(None)
    key_file: str | os.PathLike[str] | None = _setting(None)
    ca_file: str | os.PathLike[str] | None = _setting(None)
    leader_wait: float = _setting(DEFAULT_LEADER_WAIT, positive_seconds)

    tls: ClientTls | None = field(init=False, default=None, repr=False, compare=False)
    backoff_delays: tuple[float, ...] = field(init=False, default=(), repr=False,
                                              compare=False)

    def __post_init__(self) -> None:
        if self.unix_socket is not None and any(
                v is not None for v in (self.ssl_context, self.cert_file, self.key_file,
                                        self.ca_file)):
            raise ValueError("unix_socket and TLS settings exclude each other: on the Unix "
                             "socket the kernel tells the daemon who is calling, no "
                             "certificate is used.")
        self._set("tls", _tls_of(self))
        for f in fields(self):
            check = f.metadata.get("check")
            if check is not None:
                self._set(f.name, check(f.name, getattr(self, f.name), self))
        if self.unix_socket is not None:
            # Errors and logs name the socket by its path (format_address).
            self._set("host", self.unix_socket)
            self._set("port", UNIX_PORT)
        self._set("backoff_delays", tuple(backoff_delays(
            self.connect_attempts, float(self.backoff_initial), float(self.backoff_factor),
            float(self.backoff_max))))

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)   # only while the options are being made

    @property
    def address(self) -> str:
        """``host:port``, ``[v6]:port`` or ``unix:PATH``: how errors name the nimbus."""
        return format_address(self.host, self.port)


def _tls_of(options: ClientOptions) -> ClientTls | None:
    """The TLS the settings ask for (None: plaintext); certificate files are read here."""
    files = {"cert_file": options.cert_file, "key_file": options.key_file,
             "ca_file": options.ca_file}
    for name, value in files.items():
        if value is not None and (not isinstance(value, (str, os.PathLike))
                                  or not os.fspath(value)):
            raise ValueError(f"{name} must be a path, not {value!r}.")
    given = [name for name, value in files.items() if value is not None]
    context = options.ssl_context
    if context is not None:
        if not isinstance(context, ssl.SSLContext):
            raise ValueError(f"ssl_context must be an ssl.SSLContext, not {context!r}.")
        if given:
            raise ValueError(f"give either ssl_context or {', '.join(given)}, not both: "
                             f"the context already says which certificates to use.")
        return ClientTls(context)
    if not given:
        return None
    return client_context(options.cert_file, options.key_file, options.ca_file)
