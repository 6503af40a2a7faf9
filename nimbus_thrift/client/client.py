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

With several nimbus seeds (``hosts=``, an HA cluster), :mod:`.leader` routes each
call: reads to the first seed that answers, state changes to the leader, following it
when it moves; one host is exactly the client of one nimbus described here.

Why only the pure getters are retried after a lost connection: a mutating call
(submitTopology, killTopology, uploadChunk, ...) may have reached the server and taken
effect before the connection broke; sending it again could submit twice, append a
chunk twice or report NotAliveException for a kill that worked. A caller who knows
the call is safe to repeat can catch :class:`ConnectionLost` and call again.

The protocol steps (binding, encoding, decoding, back-off delays, reading the
server's refusal message) are the socket-free functions of
:mod:`nimbus_thrift.rpc.codec.calls`, tested byte by byte; the settings are checked
by :mod:`.options`; the socket work is :mod:`.transport`'s; moving files is
:mod:`.files`' and submitting a topology :mod:`.submit`'s, which the shortcuts here
call.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import structlog

from ..idl import NIMBUS_PORT, nimbus_idl
from ..rpc.codec import binary
from ..rpc.codec.calls import bind_args, encode_call
from ..rpc.options import DEFAULT_MAX_FRAME_SIZE
from ..topology.package import prepare
from . import files
from .defaults import (DEFAULT_CHUNK_SIZE, DEFAULT_MAX_DOWNLOAD_BYTES, DEFAULT_POLL_INTERVAL,
                       DEFAULT_WAIT_TIMEOUT, READ_ONLY_METHODS)
from .errors import ConnectionLost, FrameRefused, NimbusClientError
from .leader import SeedRouter, seed_router
from .options import ClientOptions
from .seeds import Address, parse_seeds, seed_text
from .submit import submit_prepared, wait_for_topology
from .tls import ClientTls
from .transport import FramedTransport

__all__ = ["DEFAULT_MAX_FRAME_SIZE", "NimbusClient", "nimbus_idl"]

log = structlog.get_logger(__name__)

_MAX_SEQID = 0x7FFFFFFF
#: The keyword arguments NimbusClient passes on to ClientOptions.
_SETTINGS = frozenset(f.name for f in fields(ClientOptions)
                      if f.init and f.name not in ("host", "port"))

T = TypeVar("T")


def _option(name: str, doc: str) -> Any:
    """A read-only attribute of the client that is one of its options."""
    return property(lambda client: getattr(client.options, name), doc=doc)


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

    Over TCP (plain, or TLS with ``ssl_context`` or certificate files) or a Unix
    domain socket (``unix_socket``). A refused certificate is a :class:`TlsError`,
    raised at once, never retried.

    Use it as a context manager, or call :meth:`close`.

    Made of: ``options`` (:class:`.options.ClientOptions`, the checked settings) and
    a :class:`.transport.FramedTransport` (the socket); the IDL's methods are declared
    here, each one :meth:`call`.
    """

    def __init__(self, host: str = "localhost", port: int = NIMBUS_PORT, *,
                 hosts: str | list[str] | list[Address] | None = None,
                 **settings: Any) -> None:
        """Set the client up; nothing is connected yet (certificate files are read now).

        Args:
            host, port: where Nimbus listens (ignored with ``unix_socket``).
            hosts: instead of ``host``, the nimbus seeds of an HA cluster (Storm's
                ``nimbus.seeds``): ``host``, ``host:port`` or ``(host, port)`` each, or
                one string of them separated by commas; ``port`` is the port of those
                without one. With several, reads go to the first that answers and
                state changes to the leader (see :mod:`.leader`); one is ``host``.
            settings: by keyword, the other fields of :class:`.options.ClientOptions`,
                which says what each means and its default: ``timeout``,
                ``connect_timeout``, ``connect_attempts``, ``backoff_initial``,
                ``backoff_factor``, ``backoff_max``, ``max_frame_size``,
                ``decoded_size_factor``, ``ssl_context``, ``cert_file``, ``key_file``,
                ``ca_file``, ``unix_socket``, ``leader_wait``.

        Raises:
            ValueError: an argument out of range, a certificate file that cannot be
                used, or settings that exclude each other, in a sentence naming it.
            TypeError: an argument that is not a setting.
        """
        for name in settings.keys() - _SETTINGS:
            # Python's own sentence, naming the class the caller called.
            raise TypeError(f"NimbusClient.__init__() got an unexpected keyword argument "
                            f"{name!r}")
        seeds = [(host, port)] if hosts is None else parse_seeds(hosts, port)
        if len(seeds) > 1 and settings.get("unix_socket") is not None:
            raise ValueError("unix_socket and several hosts exclude each other: a Unix "
                             "socket reaches the one daemon on this machine.")
        self.options = ClientOptions(host=seeds[0][0], port=seeds[0][1], **settings)
        self._transport = FramedTransport(self.options)
        self._router: SeedRouter | None = None if len(seeds) == 1 else \
            seed_router(seeds, self.options, nimbus_idl().Nimbus, self._encode_bare)
        self._closed = False
        self._seqid = 0
        # Reentrant: an operation on the leader (on_leader) holds it across its calls.
        self._lock = threading.RLock()

    # The options that were attributes of the client, still readable as such. With
    # unix_socket, host is its path and port errors.UNIX_PORT.
    host = _option("host", "Where Nimbus listens: a host name, or the socket's path.")
    port = _option("port", "Its TCP port; 0 on a Unix socket.")
    address = _option("address", "``host:port`` or ``unix:PATH``, as errors say it.")
    unix_socket = _option("unix_socket", "The Unix socket's path, or None over TCP.")
    timeout = _option("timeout", "Seconds one call may take.")
    connect_timeout = _option("connect_timeout", "Seconds one connection attempt may take.")
    connect_attempts = _option("connect_attempts", "Attempts per connect.")
    max_frame_size = _option("max_frame_size", "Largest frame sent or read.")
    decoded_size_factor = _option("decoded_size_factor",
                                  "Memory a reply may decode to, per byte of its frame.")

    @property
    def seeds(self) -> list[str]:
        """The nimbus seeds, ``host:port`` each (one: this client's address)."""
        if self._router is None:
            return [self.address]
        return [seed_text(a) for a in self._router.seeds]

    @property
    def tls(self) -> ClientTls | None:
        """The TLS context and the files it came from; None for plaintext."""
        return self.options.tls

    @property
    def backoff_delays(self) -> list[float]:
        """Seconds waited before connection attempts 2, 3, ..."""
        return list(self.options.backoff_delays)

    @property
    def connected(self) -> bool:
        """Whether a connection is open now (it may since have been closed by the
        server; the next call finds out and reconnects)."""
        if self._router is not None:
            return self._router.connected
        return self._transport.connected

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
            if self._router is not None:
                self._router.connect()
            else:
                self._transport.ensure_connected()

    def close(self) -> None:
        """Close the connection. The client cannot be used afterwards."""
        with self._lock:
            self._closed = True
            self._transport.discard()
            if self._router is not None:
                self._router.discard()

    def __enter__(self) -> "NimbusClient":
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "connected" if self.connected else "idle"
        tls = " tls" if self.tls is not None else ""
        where = self.address if self._router is None else ",".join(self.seeds)
        return f"<NimbusClient {where}{tls} {state}>"

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
            NoNimbusAnswered (a NimbusUnavailable), NoLeader, LeaderChanged: with
                several seeds, see :mod:`.leader`.
            AttributeError, TypeError: no such method, or arguments that do not fit.
            NimbusClientError: the client is closed.
        """
        service = nimbus_idl().Nimbus
        args_struct = bind_args(service, method, args, kwargs)
        with self._lock:
            self._check_open()
            seqid, frame = self._encode(method, args_struct)
            if self._router is not None:
                return self._router.call(method, seqid, frame)
            retried = False
            while True:
                self._transport.ensure_connected()
                try:
                    return self._transport.exchange(service, method, seqid, frame)
                except ConnectionLost as lost:
                    if method not in READ_ONLY_METHODS:
                        raise
                    if retried:
                        raise ConnectionLost(self.host, self.port, method, lost.reason,
                                             retried=True) from lost
                    retried = True
                    log.info("nimbus_call_retried", nimbus=self.address, method=method,
                             reason=lost.reason)

    def _encode(self, method: str, args_struct: Any) -> tuple[int, bytes]:
        """The call's seqid and frame (the caller holds the lock)."""
        self._seqid = self._seqid % _MAX_SEQID + 1
        payload = encode_call(method, self._seqid, args_struct)
        if len(payload) > self.max_frame_size:
            raise FrameRefused(self.host, self.port, method, len(payload),
                               self.max_frame_size, "client")
        return self._seqid, binary.frame_header(len(payload)) + payload

    def _encode_bare(self, method: str) -> tuple[int, bytes]:
        return self._encode(method, bind_args(nimbus_idl().Nimbus, method, (), {}))

    def on_leader(self, run: Callable[..., T], *args: Any, what: str = "the operation",
                  restart: bool = True, **kwargs: Any) -> T:
        """``run(*args, **kwargs)``, an operation of several calls on this client, with
        every call sent to one leader, and run again on the next one if that leader
        changes (see :mod:`.leader`). With one host, simply ``run(...)``. Other
        threads' calls wait for it to end.

        Args:
            what: names the operation in errors.
            restart: False when ``run`` cannot run twice once it is under way (it
                reads a stream): then a leader change after its first call is an error.

        Raises:
            NoLeader, LeaderChanged (see :mod:`.leader`), and what ``run`` raises.
        """
        if self._router is None:
            return run(*args, **kwargs)
        router = self._router
        with self._lock:
            self._check_open()
            return router.on_leader(lambda: run(*args, **kwargs), what=what,
                                    restart=restart)

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
        return self.on_leader(files.upload_file, self, path, chunk_size, progress,
                              what="the upload")

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
        return files.download_file(self, file, dest_path, max_bytes)

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
        # submit.submit_topology's steps, with the upload and submit on one leader.
        with tempfile.TemporaryDirectory(prefix="nimbus-submit-") as tmp:
            prepared = prepare(topology, Path(tmp) / "code.zip", name=name, conf=conf,
                               class_name=class_name)
            topology_id = self.on_leader(submit_prepared, self, prepared,
                                         inactive=inactive, progress=progress,
                                         what="the submit")
        if wait:
            self.wait_for_topology(topology_id, inactive=inactive, timeout=timeout,
                                   poll_interval=poll_interval, on_status=on_status)
        return topology_id

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
    # One method per Nimbus method, in IDL order, with the IDL's argument names; a
    # test checks they are the IDL's (tests/unit/client/test_client_calls.py).

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

    # Storm 2.x added these to the IDL: summaries, page info, log levels, the blob store
    # and the rest.

    def setLogConfig(self, name: str, config: Any) -> None:
        """setLogConfig (Storm 2.x; declares no exceptions)."""
        return self.call("setLogConfig", name, config)

    def getLogConfig(self, name: str) -> Any:
        """getLogConfig (Storm 2.x; declares no exceptions)."""
        return self.call("getLogConfig", name)

    def debug(self, name: str, component: str, enable: bool,
              samplingPercentage: float) -> None:
        """debug (Storm 2.x). Raises NotAliveException, AuthorizationException."""
        return self.call("debug", name, component, enable, samplingPercentage)

    def setWorkerProfiler(self, id: str, profileRequest: Any) -> None:
        """setWorkerProfiler (Storm 2.x; declares no exceptions)."""
        return self.call("setWorkerProfiler", id, profileRequest)

    def getComponentPendingProfileActions(self, id: str, component_id: str,
                                          action: int) -> list[Any]:
        """getComponentPendingProfileActions (Storm 2.x; declares no
        exceptions)."""
        return self.call("getComponentPendingProfileActions", id, component_id, action)

    def uploadNewCredentials(self, name: str, creds: Any) -> None:
        """uploadNewCredentials (Storm 2.x). Raises NotAliveException,
        InvalidTopologyException, AuthorizationException."""
        return self.call("uploadNewCredentials", name, creds)

    def beginCreateBlob(self, key: str, meta: Any) -> str:
        """beginCreateBlob (Storm 2.x). Raises AuthorizationException,
        KeyAlreadyExistsException."""
        return self.call("beginCreateBlob", key, meta)

    def beginUpdateBlob(self, key: str) -> str:
        """beginUpdateBlob (Storm 2.x). Raises AuthorizationException,
        KeyNotFoundException."""
        return self.call("beginUpdateBlob", key)

    def uploadBlobChunk(self, session: str, chunk: bytes) -> None:
        """uploadBlobChunk (Storm 2.x). Raises AuthorizationException."""
        return self.call("uploadBlobChunk", session, chunk)

    def finishBlobUpload(self, session: str) -> None:
        """finishBlobUpload (Storm 2.x). Raises AuthorizationException."""
        return self.call("finishBlobUpload", session)

    def cancelBlobUpload(self, session: str) -> None:
        """cancelBlobUpload (Storm 2.x). Raises AuthorizationException."""
        return self.call("cancelBlobUpload", session)

    def getBlobMeta(self, key: str) -> Any:
        """getBlobMeta (Storm 2.x). Raises AuthorizationException,
        KeyNotFoundException."""
        return self.call("getBlobMeta", key)

    def setBlobMeta(self, key: str, meta: Any) -> None:
        """setBlobMeta (Storm 2.x). Raises AuthorizationException,
        KeyNotFoundException."""
        return self.call("setBlobMeta", key, meta)

    def beginBlobDownload(self, key: str) -> Any:
        """beginBlobDownload (Storm 2.x). Raises AuthorizationException,
        KeyNotFoundException."""
        return self.call("beginBlobDownload", key)

    def downloadBlobChunk(self, session: str) -> bytes:
        """downloadBlobChunk (Storm 2.x). Raises AuthorizationException."""
        return self.call("downloadBlobChunk", session)

    def deleteBlob(self, key: str) -> None:
        """deleteBlob (Storm 2.x). Raises AuthorizationException,
        KeyNotFoundException, IllegalStateException."""
        return self.call("deleteBlob", key)

    def listBlobs(self, session: str) -> Any:
        """listBlobs (Storm 2.x; declares no exceptions)."""
        return self.call("listBlobs", session)

    def getBlobReplication(self, key: str) -> int:
        """getBlobReplication (Storm 2.x). Raises AuthorizationException,
        KeyNotFoundException."""
        return self.call("getBlobReplication", key)

    def updateBlobReplication(self, key: str, replication: int) -> int:
        """updateBlobReplication (Storm 2.x). Raises AuthorizationException,
        KeyNotFoundException."""
        return self.call("updateBlobReplication", key, replication)

    def createStateInZookeeper(self, key: str) -> None:
        """createStateInZookeeper (Storm 2.x; declares no exceptions)."""
        return self.call("createStateInZookeeper", key)

    def getTopologySummaries(self) -> list[Any]:
        """getTopologySummaries (Storm 2.x). Raises AuthorizationException."""
        return self.call("getTopologySummaries")

    def getTopologySummaryByName(self, name: str) -> Any:
        """getTopologySummaryByName (Storm 2.x). Raises NotAliveException,
        AuthorizationException."""
        return self.call("getTopologySummaryByName", name)

    def getTopologySummary(self, id: str) -> Any:
        """getTopologySummary (Storm 2.x). Raises NotAliveException,
        AuthorizationException."""
        return self.call("getTopologySummary", id)

    def getTopologyInfoByName(self, name: str) -> Any:
        """getTopologyInfoByName (Storm 2.x). Raises NotAliveException,
        AuthorizationException."""
        return self.call("getTopologyInfoByName", name)

    def getTopologyInfoByNameWithOpts(self, name: str, options: Any) -> Any:
        """getTopologyInfoByNameWithOpts (Storm 2.x). Raises NotAliveException,
        AuthorizationException."""
        return self.call("getTopologyInfoByNameWithOpts", name, options)

    def getTopologyInfoWithOpts(self, id: str, options: Any) -> Any:
        """getTopologyInfoWithOpts (Storm 2.x). Raises NotAliveException,
        AuthorizationException."""
        return self.call("getTopologyInfoWithOpts", id, options)

    def getTopologyPageInfo(self, id: str, window: str, is_include_sys: bool) -> Any:
        """getTopologyPageInfo (Storm 2.x). Raises NotAliveException,
        AuthorizationException."""
        return self.call("getTopologyPageInfo", id, window, is_include_sys)

    def getSupervisorPageInfo(self, id: str, host: str, is_include_sys: bool) -> Any:
        """getSupervisorPageInfo (Storm 2.x). Raises NotAliveException,
        AuthorizationException."""
        return self.call("getSupervisorPageInfo", id, host, is_include_sys)

    def getComponentPageInfo(self, topology_id: str, component_id: str, window: str,
                             is_include_sys: bool) -> Any:
        """getComponentPageInfo (Storm 2.x). Raises NotAliveException,
        AuthorizationException."""
        return self.call("getComponentPageInfo",
                         topology_id, component_id, window, is_include_sys)

    def getTopologyHistory(self, user: str) -> Any:
        """getTopologyHistory (Storm 2.x). Raises AuthorizationException."""
        return self.call("getTopologyHistory", user)

    def getOwnerResourceSummaries(self, owner: str) -> list[Any]:
        """getOwnerResourceSummaries (Storm 2.x). Raises AuthorizationException."""
        return self.call("getOwnerResourceSummaries", owner)

    def getSupervisorAssignments(self, node: str) -> Any:
        """getSupervisorAssignments (Storm 2.x). Raises AuthorizationException."""
        return self.call("getSupervisorAssignments", node)

    def sendSupervisorWorkerHeartbeats(self, heartbeats: Any) -> None:
        """sendSupervisorWorkerHeartbeats (Storm 2.x). Raises
        AuthorizationException."""
        return self.call("sendSupervisorWorkerHeartbeats", heartbeats)

    def sendSupervisorWorkerHeartbeat(self, heatbeat: Any) -> None:
        """sendSupervisorWorkerHeartbeat (Storm 2.x). Raises
        AuthorizationException, NotAliveException."""
        return self.call("sendSupervisorWorkerHeartbeat", heatbeat)

    def processWorkerMetrics(self, metrics: Any) -> None:
        """processWorkerMetrics (Storm 2.x; declares no exceptions)."""
        return self.call("processWorkerMetrics", metrics)

    def isRemoteBlobExists(self, blobKey: str) -> bool:
        """isRemoteBlobExists (Storm 2.x). Raises AuthorizationException."""
        return self.call("isRemoteBlobExists", blobKey)
