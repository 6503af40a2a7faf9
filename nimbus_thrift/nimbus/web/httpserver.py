"""The HTTP side's I/O shell: an asyncio loop on its own thread, never the Thrift
selector's. ::

    caller thread         "nimbus-http" thread (asyncio)        "nimbus-http-N" threads
    ------------          ------------------------------        -----------------------
    start(): bind  --->   accept; count; TLS handshake;
    (errors here)         read with limits (http11.py)  ----->   app(request) -> Response
                          write with a deadline         <-----   (the daemon's own code)
    stop()  ------->      close listener and connections

Bounds (:mod:`.limits`): a connection over ``max_connections``, or over
``max_connections_per_address`` from its client's address, takes the place of the
longest-waiting connection (in its TLS handshake or before a request: :class:`.limits.
Slots`), or is closed as soon as accepted if every one is busy; the TLS handshake must
end within ``handshake_timeout`` of the accept, a request's first byte come within
``first_bytes_timeout`` (of the accept or the handshake), and the whole request within
``header_timeout``; a kept-alive connection may idle ``idle_timeout``, a response must
be taken within ``write_timeout``. The application
runs on a small thread pool, so a slow call (SQLite, a launcher) never blocks the loop
and a flood of requests waits its turn (one per connection at most).

Principals, as on the Thrift side: with ``identify_local_peers``, a client on loopback
is the OS user owning its socket (:mod:`nimbus_thrift.rpc.localpeer`; a browser runs
as its user); with TLS (the listener accepts plain TCP and upgrades each counted
connection with the daemon's SSLContext: same certificate, same required client
certificates) a verified certificate's principal wins, from
:func:`nimbus_thrift.rpc.tls.principal_of`, and a certificate the mapping refuses
(:class:`~nimbus_thrift.rpc.tls.CertificateRefused`) is closed after the handshake.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, cast

import structlog

from ...rpc.localpeer import PeerLookup
from ...rpc.throttle import LogThrottle
from ...rpc.tls import CertificateRefused, PrincipalFromCert, principal_of
from .http11 import Closed, Http11
from .limits import BACKLOG, HttpLimits, Slot, Slots
from .messages import HttpError, Request, Response

log = structlog.get_logger(__name__)

#: Bytes asked of the socket per read.
READ_SIZE = 65536

App = Callable[[Request], Response]


class HttpCounters:
    """What the HTTP side counts (written on its loop thread, read by /metrics)."""

    __slots__ = ("connections_open", "connections_accepted", "connections_refused",
                 "connections_evicted", "requests", "timeouts", "bad_requests")

    def __init__(self) -> None:
        self.connections_open = 0
        self.connections_accepted = 0
        self.connections_refused = 0      # over a connection limit, none to evict
        self.connections_evicted = 0      # waiting ones closed to make room (Slots)
        self.requests = 0                 # answered by the application
        self.timeouts = 0                 # closed by a deadline
        self.bad_requests = 0             # malformed, or over a size limit


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (0: any free port).

    Raises:
        OSError: the address cannot be bound (EADDRINUSE: the port is in use).
    """
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                               flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(BACKLOG)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


class HttpServer:
    """Serves ``app`` over HTTP/1.1 on its own thread: ``start()`` returns once
    listening, ``stop()`` closes everything."""

    def __init__(self, app: App, *, host: str, port: int,
                 ssl_context: ssl.SSLContext | None = None,
                 principal_from_cert: PrincipalFromCert | None = None,
                 identify_local_peers: bool = False,
                 limits: HttpLimits | None = None):
        self.app = app
        self.host = host
        self.port = port
        self.ssl_context = ssl_context
        self.principal_from_cert = principal_from_cert
        #: Used on the loop's thread only (its netlink socket closes with the loop).
        self._peer_lookup = PeerLookup() if identify_local_peers else None
        self.limits = limits or HttpLimits()
        self.counters = HttpCounters()
        #: Who holds the connection slots (used on the loop's thread only).
        self._slots = Slots(self.limits.max_connections,
                            self.limits.max_connections_per_address)
        self._eviction_log = LogThrottle()
        self.address: tuple[str, int] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._stopped: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._failed: BaseException | None = None

    @property
    def scheme(self) -> str:
        return "https" if self.ssl_context is not None else "http"

    def start(self) -> tuple[str, int]:
        """Bind (in the calling thread, so a port in use raises here) and serve.

        Raises:
            OSError: the address cannot be bound.
        """
        sock = bind(self.host, self.port)
        self.address = cast(tuple[str, int], sock.getsockname()[:2])
        self._pool = ThreadPoolExecutor(self.limits.request_threads,
                                        thread_name_prefix="nimbus-http")
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(sock, ready),
                                        name="nimbus-http", daemon=True)
        self._thread.start()
        ready.wait()
        if self._failed is not None:
            self._thread.join()
            self._loop = self._thread = None
            self._pool.shutdown(wait=False)
            self._pool = None
            raise OSError(f"the HTTP server did not start: {self._failed}")
        return self.address

    def stop(self) -> None:
        """Close the listener and every connection; wait for the thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        stopped = self._stopped
        if stopped is not None:
            loop.call_soon_threadsafe(stopped.set)
        thread.join()
        self._loop = self._thread = None
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    # --- the loop's thread -----------------------------------------------------------
    def _run(self, sock: socket.socket, ready: threading.Event) -> None:
        loop = self._loop
        assert loop is not None
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._serve(sock, ready))
        except BaseException as exc:  # noqa: BLE001 - start() reports it
            self._failed = exc
            sock.close()
        finally:
            ready.set()             # also when serving failed before it was ready
            loop.close()
            if self._peer_lookup is not None:
                self._peer_lookup.close()

    async def _serve(self, sock: socket.socket, ready: threading.Event) -> None:
        self._stopped = asyncio.Event()
        server = await asyncio.start_server(self._connection, sock=sock,
                                            limit=self.limits.max_header_bytes)
        ready.set()
        try:
            await self._stopped.wait()
        finally:
            server.close()
            for task in list(self._tasks):
                task.cancel()
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)
            await server.wait_closed()

    async def _connection(self, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        counters = self.counters
        task = asyncio.current_task()
        assert task is not None
        peername = writer.get_extra_info("peername")
        # Counted per IP address, before any byte or handshake: the slots are what a
        # client without credentials can take.
        slot, victim = self._slots.admit(peername[0] if peername else "", task)
        if slot is None:
            counters.connections_refused += 1
            writer.transport.abort()
            return
        if victim is not None:
            counters.connections_evicted += 1
            victim.owner.cancel()        # its finally closes it; the slot is free now
            held = self._eviction_log.allow(str(victim.address),
                                            asyncio.get_running_loop().time())
            if held is not None:
                log.warning("http_connection_evicted", peer_address=victim.address,
                            reason="the HTTP side or the address was at its connection "
                                   "limit: the longest-waiting connection made room",
                            similar_evictions_not_logged=held)
        counters.connections_open += 1
        counters.connections_accepted += 1
        self._tasks.add(task)
        try:
            await self._converse(reader, writer, slot)
        except asyncio.CancelledError:
            pass
        except (ConnectionError, OSError, ssl.SSLError):
            pass                 # the client went away or broke TLS: nothing to answer
        finally:
            self._slots.release(slot)
            self._tasks.discard(task)
            counters.connections_open -= 1
            writer.transport.abort()

    async def _converse(self, reader: asyncio.StreamReader,
                        writer: asyncio.StreamWriter, slot: Slot) -> None:
        peername = writer.get_extra_info("peername")
        peer = f"{peername[0]}:{peername[1]}" if peername else ""
        principal = None
        if self._peer_lookup is not None:
            # Synchronous on the loop's thread: one netlink request (rpc/localpeer.py).
            principal = self._peer_lookup.user(peername,
                                               writer.get_extra_info("sockname"))
        loop = asyncio.get_running_loop()
        limits = self.limits
        deadline = loop.time() + limits.header_timeout
        if self.ssl_context is not None:
            try:
                async with asyncio.timeout_at(
                        min(deadline, loop.time() + limits.handshake_timeout)):
                    await writer.start_tls(self.ssl_context)
            except TimeoutError:
                self.counters.timeouts += 1
                return
            except (ssl.SSLError, ConnectionError, OSError) as exc:
                log.info("http_tls_refused", peer=peer, error=str(exc))
                return
            ssl_object = writer.get_extra_info("ssl_object")
            # The same mapping from certificate to principal as the Thrift side's.
            try:
                certified = principal_of(ssl_object, self.principal_from_cert)
            except CertificateRefused as exc:
                log.warning("http_tls_client_refused", peer=peer, principal=exc.principal,
                            reason=exc.reason)
                return
            if certified is not None:
                principal = certified
        http = Http11(limits, peer=peer, principal=principal, scheme=self.scheme)
        idle = False                 # the first request gets header_timeout from accept
        # ... and its first byte first_bytes_timeout from the accept or handshake.
        first_bytes_by: float | None = loop.time() + limits.first_bytes_timeout
        slots = self._slots
        while True:
            try:
                request = await self._read_request(http, reader, deadline, idle,
                                                   first_bytes_by)
            except HttpError as error:
                self.counters.bad_requests += 1
                await self._write(writer, http.error_bytes(error))
                return
            except (Closed, TimeoutError):
                return
            first_bytes_by = None
            slots.busy(slot)
            assert self._pool is not None
            response = await loop.run_in_executor(self._pool, self._answer, request)
            self.counters.requests += 1
            await self._write(writer, http.response_bytes(
                response, head_only=request.method == "HEAD"))
            if not http.next_cycle():
                return
            slots.waiting(slot)
            idle = True

    async def _read_request(self, http: Http11, reader: asyncio.StreamReader,
                            deadline: float, idle: bool,
                            first_bytes_by: float | None) -> Request:
        loop = asyncio.get_running_loop()
        if idle:
            deadline = loop.time() + self.limits.idle_timeout
        while True:
            request = http.next_request()
            if request is not None:
                return request
            if idle and not http.waiting_idle:
                # The next request's first bytes are in: now it has header_timeout.
                idle = False
                deadline = loop.time() + self.limits.header_timeout
            until = deadline
            if first_bytes_by is not None and http.waiting_idle:
                until = min(deadline, first_bytes_by)
            try:
                async with asyncio.timeout_at(until):
                    data = await reader.read(READ_SIZE)
            except TimeoutError:
                self.counters.timeouts += 1
                raise
            http.receive(data)

    def _answer(self, request: Request) -> Response:
        try:
            return self.app(request)
        except HttpError as error:
            return error.response()
        except Exception:  # noqa: BLE001 - one request's failure is a 500, not a crash
            log.exception("http_request_failed", method=request.method,
                          target=request.target[:200], peer=request.peer)
            return HttpError(500, "the daemon failed to answer; see its log").response()

    async def _write(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        if not data:
            return
        writer.write(data)
        try:
            async with asyncio.timeout(self.limits.write_timeout):
                await writer.drain()
        except TimeoutError:
            self.counters.timeouts += 1
            raise ConnectionError("the client did not take its response in time") from None
