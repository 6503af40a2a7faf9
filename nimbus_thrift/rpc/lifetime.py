"""A connection's life outside its calls, for the selector thread: accepting (with the
per-address cap and throttled refusal lines, and who a client is: the Unix socket's
peer credentials, a loopback client's OS user, localpeer.py), the TLS handshake (and a
certificate's principal, or its refusal), the periodic sweep of deadlines (first
request, frame rate, parking, unread replies, lingering), the drain at stop, and the
end: lingering after an error reply, and closing.

:class:`Lifetime` is a base of :class:`~.selector.Selector`, which owns the state
declared here and the per-call paths (read, submit, write) these methods end in; one
object, so neither side pays an attribute hop (see selector.py). Little of this runs per
call: accept and handshake per connection, the sweep once a second, the drain once; the
close once per connection, and interest changes only when a connection turns from
reading to writing or back.
"""

from __future__ import annotations

import errno
import fcntl
import select
import socket
import termios
import time
from typing import Any

import structlog

from .completion import Completion
from .connection import Connection
from .deadlines import ParkTimeoutError, overdue, unread_check_due
from .dispatch import Status
from .fastio import ACCELERATED, recv_into
from .localpeer import PeerLookup, connection_user
from .metrics import ServerState
from .options import ServerOptions
from .peers import PeerShare
from .states import Event, State
from .throttle import LogThrottle
from .tls import (DONE, WANT_WRITE, CertificateRefused, HandshakeFailed, TLSStream,
                  first_bytes_are_tls, handshake_step, principal_of)
from .unixsock import UnixListener, peer_credentials, remove_unix
from .workers import WorkerPool

log = structlog.get_logger(__name__)

_EPOLLIN = select.EPOLLIN
_EPOLLOUT = select.EPOLLOUT
#: Connections accepted per pass, so a connection storm cannot stall existing clients.
_MAX_ACCEPTS_PER_PASS = 64
#: How long the listener rests after the process runs out of file descriptors.
_EMFILE_PAUSE = 0.1
#: SIOCOUTQ: bytes in a socket's send queue the peer has not acknowledged.
_SIOCOUTQ = termios.TIOCOUTQ
#: After an error reply, how long to keep reading (and discarding) before closing, so
#: the kernel does not answer unread request bytes with a RST that destroys the reply.
_LINGER_SECONDS = 2.0


class Lifetime(Completion):
    """Accept, sweep and drain; the selector's state they use is declared here."""

    options: ServerOptions
    pool: WorkerPool
    stop_deadline: float
    per_peer: dict[str, PeerShare]
    _state: ServerState
    _listener: socket.socket
    _unix: UnixListener | None
    _paused_listeners: list[socket.socket]
    _listener_paused_until: float
    _per_peer_limit: int
    _refusal_log: LogThrottle
    _ep: select.epoll
    _conns: dict[int, Connection]

    _scratch: memoryview
    _lingering: int
    #: The kernel lookups of local TCP clients' users (options.identify_local_peers),
    #: made on the first such accept.
    _peer_lookup: PeerLookup | None = None

    # The selector's own paths, which these end in.
    def _close(self, conn: Connection, reason: str | None = None) -> None:
        raise NotImplementedError

    def _refuse(self, conn: Connection, now: float) -> None:
        raise NotImplementedError

    def _drop_output(self, conn: Connection) -> None:
        raise NotImplementedError

    def _tls_check_pending(self, conn: Connection) -> None:
        raise NotImplementedError

    # ----------------------------------------------------------------- accept

    def _listeners(self) -> list[socket.socket]:
        """The sockets this server accepts on: TCP, and the Unix socket if any."""
        return [self._listener] + ([self._unix.sock] if self._unix is not None else [])

    def _accept(self, listener: socket.socket, now: float) -> bool:
        """Accept up to _MAX_ACCEPTS_PER_PASS connections; True once nothing more can be
        taken now (the backlog is empty, or accepting failed)."""
        state = self._state
        opts = self.options
        for _ in range(_MAX_ACCEPTS_PER_PASS):
            try:
                sock, addr = listener.accept()
            except (BlockingIOError, InterruptedError):
                return True
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    # Out of descriptors: the backlog stays readable, so pause the listener
                    # instead of spinning on it.
                    log.error("accept_failed", error=str(exc),
                              effect=f"not accepting for {_EMFILE_PAUSE}s")
                    self._ep.unregister(listener.fileno())
                    self._paused_listeners.append(listener)
                    self._listener_paused_until = now + _EMFILE_PAUSE
                    return True
                log.warning("accept_failed", error=str(exc))
                return True
            principal = None
            if listener.family == socket.AF_UNIX:
                # The kernel's word for who connected: the principal, and what the
                # per-address limits count (each local user is one "address").
                try:
                    creds = peer_credentials(sock)
                except OSError:
                    sock.close()
                    continue
                principal = creds.user
                host = f"unix:{creds.user}"
                peer = f"{host} (pid {creds.pid})"
            else:
                peer = _peer_name(addr)
                host = addr[0] if isinstance(addr, tuple) and addr else peer
                if opts.identify_local_peers:
                    # A client on loopback is the OS user owning its socket (one
                    # netlink request, ~10 us); None elsewhere or if the kernel
                    # cannot say. A client certificate's principal wins later.
                    lookup = self._peer_lookup
                    if lookup is None:
                        lookup = self._peer_lookup = PeerLookup()
                    principal = connection_user(lookup, sock, addr)
                    if principal is not None:
                        # Counted per local user, as on the Unix socket: another
                        # account's connections do not use up this user's share of
                        # the loopback address.
                        host = f"local:{principal}"
            share = self.per_peer.get(host)
            count = share.connections if share is not None else 0
            if state.connections_open >= opts.max_connections:
                self._refuse_connection(sock, host, peer, now, "max_connections",
                                        opts.max_connections)
                continue
            if count >= self._per_peer_limit:
                state.connections_refused_per_peer += 1
                self._refuse_connection(sock, host, peer, now, "max_connections_per_peer",
                                        self._per_peer_limit)
                continue
            if share is None:
                share = self.per_peer[host] = PeerShare()
            share.connections += 1
            sock.setblocking(False)
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass  # not TCP (a Unix socket in tests); nothing to tune
            if opts.send_buffer_size:
                try:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF,
                                    opts.send_buffer_size)
                except OSError:
                    pass  # the kernel keeps its own size; write_timeout still applies
            conn = Connection(peer, self._budget, opts.max_frame_size, now)
            conn.host = host
            conn.share = share
            conn.principal = principal
            tls_context = opts.ssl_context
            if tls_context is not None and listener.family != socket.AF_UNIX:
                # No handshake yet: the selector drives it (tls.py); the connection
                # starts in HANDSHAKING and holds nothing of the budget until done.
                try:
                    sock = tls_context.wrap_socket(sock, server_side=True,
                                                   do_handshake_on_connect=False)
                except (OSError, ValueError) as exc:
                    share.connections -= 1
                    if share.connections <= 0:
                        self.per_peer.pop(host, None)
                    sock.close()
                    log.warning("tls_wrap_failed", peer=peer, error=str(exc))
                    continue
                conn.tls = TLSStream(sock)
                conn.state = State.HANDSHAKING
            conn.sock = sock
            conn.fd = sock.fileno()
            # fastio's C calls take the descriptor (no fileno() call per recv and send);
            # a TLS connection's calls go to ssl's C object or its stream (tls.py).
            conn.io = conn.tls.io if conn.tls is not None else \
                conn.fd if ACCELERATED else sock
            conn.interest = _EPOLLIN
            self._ep.register(conn.fd, _EPOLLIN)
            self._conns[conn.fd] = conn
            state.connections_open += 1
            state.connections_accepted += 1
            log.debug("connection_opened", peer=peer)
        return False      # the per-pass cap: more may be waiting

    def _refuse_connection(self, sock: socket.socket, host: str, peer: str, now: float,
                           limit_name: str, limit: int) -> None:
        """Close a connection at once (no reply: nothing was asked yet). One log line
        per client address per LogThrottle interval, with the count held back."""
        self._state.connections_refused += 1
        sock.close()
        held = self._refusal_log.allow(host, now)
        if held is not None:
            log.warning("connection_refused", peer=peer, limit_name=limit_name,
                        limit=limit, reason=f"{limit_name} ({limit}) reached",
                        similar_refusals_not_logged=held)

    # ----------------------------------------------------------------- TLS handshake

    def _handshake(self, conn: Connection, now: float) -> None:
        """One nonblocking step of a TLS handshake (tls.py), on each socket event."""
        sock = conn.tls.ssl
        try:
            if not conn.tls_peeked:
                if not first_bytes_are_tls(sock):
                    self._set_interest(conn, _EPOLLIN)     # nothing arrived yet
                    return
                conn.tls_peeked = True
            step = handshake_step(sock)
        except HandshakeFailed as exc:
            self._state.tls_handshakes_failed += 1
            held = self._refusal_log.allow(conn.host, now)
            if held is not None:
                log.warning("tls_handshake_failed", peer=conn.peer, reason=str(exc),
                            similar_failures_not_logged=held)
            self._really_close(conn)
            return
        if step == DONE:
            try:
                certified = principal_of(sock, self.options.principal_from_cert)
            except CertificateRefused as exc:
                # A name no certificate may claim here (options.principal_from_cert).
                self._state.tls_handshakes_failed += 1
                held = self._refusal_log.allow(conn.host, now)
                if held is not None:
                    log.warning("tls_client_refused", peer=conn.peer,
                                principal=exc.principal, reason=exc.reason,
                                similar_failures_not_logged=held)
                self._really_close(conn)
                return
            self._state.tls_handshakes += 1
            if certified is not None:
                # Without a certificate (or a principal in it), the kernel's word for a
                # local client (set at accept) stands.
                conn.principal = certified
            conn.advance(Event.HANDSHAKE_DONE)
            conn.last_activity = now
            log.debug("tls_handshake_done", peer=conn.peer, principal=conn.principal,
                      version=sock.version())
            self._set_interest(conn, _EPOLLIN)
            self._tls_check_pending(conn)
        else:
            self._set_interest(conn, _EPOLLOUT if step == WANT_WRITE else _EPOLLIN)

    # ----------------------------------------------------------------- timers

    def _sweep(self, now: float) -> None:
        opts = self.options
        if self._listener_paused_until and now >= self._listener_paused_until \
                and not self.stop_requested:
            self._listener_paused_until = 0.0
            for listener in self._paused_listeners:
                self._ep.register(listener.fileno(), _EPOLLIN)
            self._paused_listeners.clear()
        for host, held in self._refusal_log.expire(now):
            log.warning("connection_refusals_not_logged", peer_address=host, count=held)
        budget = self._budget
        for conn in list(self._conns.values()):
            st = conn.state
            if st is State.LINGERING:
                if now >= conn.linger_until and conn.linger_until:
                    self._close(conn)
                elif conn.out and opts.write_timeout and \
                        now - conn.write_started > opts.write_timeout:
                    self._close(conn, "error reply not taken by the client")
                continue
            late = overdue(conn, opts, now)
            if late is None:
                if unread_check_due(conn, opts, now):
                    self._unread_reply(conn, now)
                continue
            self._state.timeouts += 1
            if st is State.HANDSHAKING:
                self._state.tls_handshakes_failed += 1
            if late.park:
                log.warning("park_timeout", peer=conn.peer, size=conn.size,
                            received=conn.pos, waited_s=round(now - conn.parked_at, 3),
                            reserved=budget.reserved, budget=budget.capacity)
                conn.refuse_parked(ParkTimeoutError(conn.size, conn.pos, opts.park_timeout
                                                    or 0.0, budget.capacity))
                self._refuse(conn, now)
            else:
                self._close(conn, late.reason)

    def _unread_reply(self, conn: Connection, now: float) -> None:
        """A connection between requests has been quiet for write_timeout since its last
        reply: if the kernel still holds reply bytes the client has not taken, it is not
        reading; closing frees them (they cannot be taken back otherwise)."""
        conn.outq_checked = conn.last_activity
        try:
            raw = fcntl.ioctl(conn.fd, _SIOCOUTQ, b"\0\0\0\0")
        except OSError:
            return
        queued = int.from_bytes(raw, "little", signed=True)
        if queued > 0:
            self._state.timeouts += 1
            self._close(conn, f"reply not taken by the client within "
                              f"{self.options.write_timeout:g}s (write_timeout; {queued} "
                              f"bytes still in the send queue)")

    # ----------------------------------------------------------------- stopping

    def _begin_drain(self) -> None:
        """Stop accepting; close the connections with no request in flight or on its
        way. Those with one are answered within the grace period, then closed."""
        now = time.monotonic()
        for listener in self._listeners():
            # Connections still in the backlog connected before the stop, and many have
            # sent their request already: closing the listener would reset them. One
            # last accept takes them in, and the rule below sorts them like the rest.
            if not self._listener_paused_until:
                while not self._accept(listener, now):
                    pass
            try:
                self._ep.unregister(listener.fileno())
            except (OSError, ValueError):
                pass
            listener.close()
        if self._unix is not None:
            remove_unix(self._unix)
        in_flight = arriving = 0
        for conn in list(self._conns.values()):
            if conn.state in (State.PROCESSING, State.WRITING):
                in_flight += 1
            elif _request_arriving(conn):
                arriving += 1
            else:
                self._close(conn)
        log.info("stopping", in_flight=in_flight, arriving=arriving,
                 grace_s=round(max(0.0, self.stop_deadline - now), 3))

    def _finish(self, ep: select.epoll) -> None:
        pool = self.pool
        # Requests no worker has started are dropped (their connections close below):
        # a handler must not start after the server has stopped.
        not_started = {id(task[0]) for task in pool.discard_queued()}
        with self._finish_lock:
            self._finished = True
            self._room.notify_all()     # workers waiting to queue a reply give up
            # Outcomes that came back too late: count them, then close below.
            while self.done:
                conn, _, status, _ = self.done.popleft()
                self._state.requests_completed += 1
                if status >= Status.FAILED:
                    self._state.requests_failed += 1
            leftover = list(self._conns.values())
            for conn in leftover:
                # PROCESSING with a worker on it: the worker closes the socket when done.
                busy = conn.state in (State.PROCESSING, State.WRITING)
                processing = conn.state is State.PROCESSING and id(conn) not in not_started
                self._really_close(conn, "server stopped before the reply was written"
                                   if busy else None, keep_socket=processing)
        stuck = pool.stop(timeout=max(0.0, self.stop_deadline - time.monotonic()) + 0.5)
        if self._peer_lookup is not None:
            self._peer_lookup.close()
        ep.close()
        self.wakeup.close()
        log.info("stopped", abandoned_connections=len(leftover), stuck_workers=stuck,
                 bytes_reserved=self._budget.reserved)

    # ----------------------------------------------------------------- closing

    def _start_linger(self, conn: Connection, now: float) -> None:
        sock = conn.sock
        assert sock is not None  # set by _accept before the connection is registered
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._close(conn)
            return
        conn.linger_until = now + _LINGER_SECONDS
        self._lingering += 1
        self._set_interest(conn, _EPOLLIN)

    def _discard(self, conn: Connection, now: float) -> None:
        try:
            while True:
                n = recv_into(conn.io, self._scratch)
                if n == 0:
                    self._close(conn)
                    return
        except (BlockingIOError, InterruptedError):
            if now >= conn.linger_until:
                self._close(conn)
        except OSError:
            self._close(conn)

    def _really_close(self, conn: Connection, reason: str | None = None,
                      keep_socket: bool = False) -> None:
        """Forget the connection and release its memory. ``keep_socket``: a worker is
        still running its request and will close the socket when it is done."""
        if reason:
            log.info("connection_closed", peer=conn.peer, state=conn.state.name,
                     reason=reason)
        else:
            log.debug("connection_closed", peer=conn.peer)
        if conn.linger_until:
            self._lingering -= 1
            conn.linger_until = 0.0
        self._set_interest(conn, None)
        if self._conns.pop(conn.fd, None) is not None:
            share = conn.share
            share.connections -= 1
            if share.connections <= 0:
                # A request still in the pool decrements the orphaned counts; a new
                # connection from this address starts afresh.
                self.per_peer.pop(conn.host, None)
        conn.close()
        self._drop_output(conn)
        sock = conn.sock
        assert sock is not None  # set by _accept before the connection is registered
        try:
            if keep_socket:
                sock.shutdown(socket.SHUT_RDWR)
            else:
                sock.close()
        except OSError:
            pass
        self._state.connections_open -= 1

    def _set_interest(self, conn: Connection, mask: int | None) -> None:
        """Register, modify or unregister; 0 means unregistered too (an unregistered fd
        cannot report the HUP/ERR that a registered one reports even with no interest)."""
        if mask == 0:
            mask = None
        if conn.interest == mask:
            return
        try:
            if mask is None:
                self._ep.unregister(conn.fd)
            elif conn.interest is None:
                self._ep.register(conn.fd, mask)
            else:
                self._ep.modify(conn.fd, mask)
        except (OSError, ValueError):
            pass  # the descriptor is already gone; closing will follow
        conn.interest = mask


def _request_arriving(conn: Connection) -> bool:
    """Whether a connection between calls has part of a request, or a whole one, that
    was sent before the stop: read so far, or waiting in the kernel or the TLS layer.
    Such a client is answered before the close rather than cut off (a close with unread
    bytes is a reset, which loses the request and tells the client nothing)."""
    state = conn.state
    if state is not State.READING_HEADER:
        return state is State.READING_FRAME or state is State.AWAITING_MEMORY
    if conn.hdr or conn.leftover:
        return True
    io: Any = conn.io
    if conn.tls is not None and io.pending():
        return True
    try:
        raw = fcntl.ioctl(conn.fd, termios.FIONREAD, b"\0\0\0\0")
    except OSError:
        return False
    return int.from_bytes(raw, "little", signed=True) > 0


def _peer_name(addr: Any) -> str:
    if isinstance(addr, tuple) and len(addr) >= 2:
        host = addr[0]
        return f"[{host}]:{addr[1]}" if ":" in host else f"{host}:{addr[1]}"
    return str(addr) or "unix"


