"""A Python client of the Nimbus service (``idl/nimbus.thrift``): framed transport,
binary protocol, one call at a time.

One call::

    call(name, args)
      | bind args to the IDL's argument names          TypeError
      | encode [length][CALL header][args struct]      FrameRefused (client side: nothing sent)
      | connect, if not connected (or the server       NimbusUnavailable (nothing sent)
      |   dropped the idle connection): attempts
      |   with bounded exponential back-off
      | with TLS, the handshake (in each attempt)      TlsError: a certificate refused,
      |                                                  at once, never retried
      | send the frame, read one reply frame,          NimbusTimeout, ConnectionLost
      |   all within `timeout` seconds                   (the socket is discarded)
      | decode (bounds-checked, nimbus_thrift.rpc.codec.binary,  BadReply (socket discarded)
      |   within the decoded-size budget a server
      |   applies to requests)
      v
    REPLY     -> the IDL's result, or its declared exception raised as-is
    EXCEPTION -> FrameRefused (server side) or ServerError

Why only the pure getters are retried after a lost connection: a mutating call
(submitTopology, killTopology, uploadChunk, ...) may have reached the server and taken
effect before the connection broke; sending it again could submit twice, append a
chunk twice or report NotAliveException for a kill that worked. A caller who knows
the call is safe to repeat can catch :class:`ConnectionLost` and call again.

The protocol steps (binding, encoding, decoding, back-off delays, reading the
server's refusal message) are the socket-free functions of
:mod:`nimbus_thrift.rpc.codec.calls`, tested byte by byte; the socket work is
:mod:`.transport`'s; submitting a topology is :mod:`.submit`'s, which the
shortcuts here call.
"""

from __future__ import annotations

import math
import os
import ssl
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import structlog

from ..idl import NIMBUS_PORT, nimbus_idl
from ..rpc.codec import binary
from ..rpc.codec.calls import backoff_delays, bind_args, encode_call
# The server's default frame cap (Apache Thrift's TConfiguration default): a larger
# frame would be refused anyway, so it is refused here before it is sent. Also the
# largest reply frame read. Replies decode within the server's own default budget.
from ..rpc.options import DEFAULT_DECODED_SIZE_FACTOR, DEFAULT_MAX_FRAME_SIZE
from .defaults import (DEFAULT_BACKOFF_FACTOR, DEFAULT_BACKOFF_INITIAL, DEFAULT_BACKOFF_MAX,
                       DEFAULT_CHUNK_SIZE, DEFAULT_CONNECT_ATTEMPTS, DEFAULT_CONNECT_TIMEOUT,
                       DEFAULT_MAX_DOWNLOAD_BYTES, DEFAULT_POLL_INTERVAL, DEFAULT_TIMEOUT,
                       DEFAULT_WAIT_TIMEOUT, READ_ONLY_METHODS)
from .errors import (UNIX_PORT, ConnectionLost, DownloadTooLarge, FrameRefused,
                     NimbusClientError)
from .storm2 import StormTwoMethods
from .submit import submit_topology, wait_for_topology
from .tls import ClientTls, client_context
from .transport import FramedTransport

log = structlog.get_logger(__name__)

_MAX_SEQID = 0x7FFFFFFF
#: Bytes of a Unix socket path, its terminating NUL included (sockaddr_un's sun_path
#: on Linux): a longer one cannot be connected to at all.
_MAX_UNIX_PATH = 108


def _seconds(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive number of seconds, not {value!r}.")
    return float(value)


def _count(name: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer of at least {minimum}, not {value!r}.")
    return value


def _tls_of(ssl_context: ssl.SSLContext | None, cert_file: Any, key_file: Any,
            ca_file: Any) -> ClientTls | None:
    files = {"cert_file": cert_file, "key_file": key_file, "ca_file": ca_file}
    for name, value in files.items():
        if value is not None and (not isinstance(value, (str, os.PathLike))
                                  or not os.fspath(value)):
            raise ValueError(f"{name} must be a path, not {value!r}.")
    given = [name for name, value in files.items() if value is not None]
    if ssl_context is not None:
        if not isinstance(ssl_context, ssl.SSLContext):
            raise ValueError(f"ssl_context must be an ssl.SSLContext, not {ssl_context!r}.")
        if given:
            raise ValueError(f"give either ssl_context or {', '.join(given)}, not both: "
                             f"the context already says which certificates to use.")
        return ClientTls(ssl_context)
    if not given:
        return None
    return client_context(cert_file, key_file, ca_file)


def _unix_path(path: Any) -> str:
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise ValueError(f"unix_socket must be a path, not {path!r}.")
    text = os.fspath(path)
    if not isinstance(text, str):
        raise ValueError(f"unix_socket must be a path, not {path!r}.")
    if len(os.fsencode(text)) >= _MAX_UNIX_PATH:
        raise ValueError(f"unix_socket {text} is {len(os.fsencode(text))} bytes long; a Unix "
                         f"socket path must be under {_MAX_UNIX_PATH} bytes.")
    return text


class NimbusClient(FramedTransport, StormTwoMethods):
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

    Over TCP (plain, or TLS with ``ssl_context`` or certificate files) or a Unix
    domain socket (``unix_socket``). A refused certificate is a :class:`TlsError`,
    raised at once, never retried.

    Use it as a context manager, or call :meth:`close`.
    """

    def __init__(self, host: str = "localhost", port: int = NIMBUS_PORT, *,
                 timeout: float = DEFAULT_TIMEOUT,
                 connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
                 connect_attempts: int = DEFAULT_CONNECT_ATTEMPTS,
                 backoff_initial: float = DEFAULT_BACKOFF_INITIAL,
                 backoff_factor: float = DEFAULT_BACKOFF_FACTOR,
                 backoff_max: float = DEFAULT_BACKOFF_MAX,
                 max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
                 decoded_size_factor: float = DEFAULT_DECODED_SIZE_FACTOR,
                 ssl_context: ssl.SSLContext | None = None,
                 cert_file: str | os.PathLike[str] | None = None,
                 key_file: str | os.PathLike[str] | None = None,
                 ca_file: str | os.PathLike[str] | None = None,
                 unix_socket: str | os.PathLike[str] | None = None) -> None:
        """Set the client up; nothing is connected yet (certificate files are read now).

        Args:
            host, port: where Nimbus listens (ignored with ``unix_socket``).
            timeout: seconds one call may take, from sending to the whole reply.
            connect_timeout: seconds one connection attempt may take.
            connect_attempts: attempts per connect before NimbusUnavailable.
            backoff_initial, backoff_factor, backoff_max: seconds before the second
                attempt, its multiplier per further attempt, and the cap.
            max_frame_size: largest frame sent or read (without the 4-byte prefix).
            decoded_size_factor: memory a reply may decode to, per byte of its frame
                (at least 1 MiB in all); past it the reply is a BadReply.
            ssl_context: speak TLS with this client context (its certificate, the CAs
                it trusts, its host name check); the server's name is ``host``.
            cert_file, key_file, ca_file: speak TLS with a context made of these
                files (PEM): the server's certificate is verified against ``ca_file``
                (the system's CAs without it) and must name ``host``; ``cert_file``
                and ``key_file`` are this client's certificate, presented to a server
                that asks (mutual TLS). TLS 1.2 at least.
            unix_socket: connect to the Unix domain socket at this path instead of
                TCP; the daemon sees this client as its OS user. No TLS there.

        Raises:
            ValueError: an argument out of range, a certificate file that cannot be
                used, or settings that exclude each other, in a sentence naming it.
        """
        if unix_socket is not None and any(
                v is not None for v in (ssl_context, cert_file, key_file, ca_file)):
            raise ValueError("unix_socket and TLS settings exclude each other: on the Unix "
                             "socket the kernel tells the daemon who is calling, no "
                             "certificate is used.")
        tls = _tls_of(ssl_context, cert_file, key_file, ca_file)
        if unix_socket is not None:
            host, port = _unix_path(unix_socket), UNIX_PORT
        elif not isinstance(host, str) or not host:
            raise ValueError(f"host must be a non-empty string, not {host!r}.")
        elif isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise ValueError(f"port must be an integer from 1 to 65535, not {port!r}.")
        timeout = _seconds("timeout", timeout)
        connect_timeout = _seconds("connect_timeout", connect_timeout)
        connect_attempts = _count("connect_attempts", connect_attempts)
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
        delays = backoff_delays(connect_attempts, float(backoff_initial),
                                float(backoff_factor), float(backoff_max))
        max_frame_size = _count("max_frame_size", max_frame_size)
        if isinstance(decoded_size_factor, bool) \
                or not isinstance(decoded_size_factor, (int, float)) \
                or not 1 <= decoded_size_factor < math.inf:
            raise ValueError(f"decoded_size_factor must be a number of at least 1, "
                             f"not {decoded_size_factor!r}.")
        super().__init__(host, port, timeout=timeout, connect_timeout=connect_timeout,
                         connect_attempts=connect_attempts, backoff_delays=delays,
                         max_frame_size=max_frame_size,
                         decoded_size_factor=decoded_size_factor, tls=tls,
                         unix_socket=host if port == UNIX_PORT else None)
        self._closed = False
        self._seqid = 0
        self._lock = threading.Lock()

    # ----------------------------------------------------------------- lifecycle

    @property
    def idl(self) -> ModuleType:
        """The Nimbus IDL module (see :func:`nimbus_idl`): structs and exceptions."""
        return nimbus_idl()

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
        tls = " tls" if self.tls is not None else ""
        return f"<NimbusClient {self.address}{tls} {state}>"

    # ----------------------------------------------------------------- calls

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call the IDL method ``method`` with its arguments (positional in IDL order,
        or by IDL name) and return its result.

        Raises:
            the method's declared IDL exceptions, as the server raised them.
            NimbusUnavailable: could not connect (nothing was sent).
            TlsError: a certificate was refused, by this client or by the server
                (nothing the server acted on was sent).
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

    def download_file(self, file: str, dest_path: str | os.PathLike[str],
                      max_bytes: int = DEFAULT_MAX_DOWNLOAD_BYTES) -> int:
        """Download ``file`` (a topology id or an upload location) to ``dest_path``
        and return the number of bytes written.

        The bytes go to a temporary file beside ``dest_path`` (mode 0600), renamed
        over it once complete, so ``dest_path`` never holds a partial download.

        Args:
            max_bytes: the most this download may bring; a server sending more is
                stopped before the chunk that would cross it is written.

        Raises:
            DownloadTooLarge: the server sent more than ``max_bytes``.
            OSError: the destination cannot be written.
            ValueError: max_bytes is not a positive integer.
            and what :meth:`call` raises (the temporary file is then removed).
        """
        max_bytes = _count("max_bytes", max_bytes)
        dest = Path(dest_path)
        session: str = self.beginFileDownload(file)
        fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.",
                                        suffix=".part")
        try:
            size = 0
            with os.fdopen(fd, "wb") as out:
                while chunk := self.downloadChunk(session):
                    if len(chunk) > max_bytes - size:
                        raise DownloadTooLarge(self.host, self.port, file,
                                               size + len(chunk), max_bytes)
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

