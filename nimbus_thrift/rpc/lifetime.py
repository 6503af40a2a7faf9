"""A connection's life outside its calls, for the selector thread: accepting (with the
per-address cap and throttled refusal lines, and who a client is: the Unix socket's
peer credentials, a loopback client's OS user, localpeer.py), the TLS handshake (and a
certificate's principal, or its refusal), the periodic sweep of deadlines (first
request, frame rate, parking, unread replies, lingering), the drain at stop, and the
end: lingering after an error reply, and closing.

:class:`Lifetime` is an object the selector holds (``Selector.life``). It owns the
table of open connections (``conns``: a :class:`~.channel.Channel` per descriptor),
the epoll set and each channel's interest in it, the listeners, the per-address counts
and the rest set in its ``__init__``. The selector's per-call paths reach the table and
the epoll set as locals of its loop, and ``close``/``set_interest`` as bound methods
kept on the selector, so this split adds no attribute hop to a call. Little of this
runs per call: accept and handshake per connection, the sweep once a second, the drain
once; the close once per connection, and interest changes only when a connection turns
from reading to writing or back.
"""

from __future__ import annotations

import errno
import fcntl
import select
import socket
import termios
import time
from collections.abc import Callable
from typing import Any

import structlog

from .channel import Channel
from .completion import HandBack
from .connection import SCRATCH_SIZE, Connection
from .deadlines import ParkTimeoutError, overdue, unread_check_due
from .dispatch import Status
from .fastio import ACCELERATED, recv_into
from .localpeer import PeerLookup, connection_user
from .memory import MemoryBudget
from .metrics import ServerState
from .options import ServerOptions
from .peers import PeerShare, eviction_choice, oldest_idle
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


class Lifetime:
    """Accept, shake hands, sweep, drain and close; the table of open connections.

    ``listener`` (and ``unix``): where connections come from; ``back`` and ``pool``:
    the workers' way back and the pool, which the end of the loop (:meth:`finish`)
    settles with; ``drop_output``: the selector's forgetting of the reply a closed
    channel held (its writers' table, see ``Selector._drop_output``)."""

    def __init__(self, listener: socket.socket, unix: UnixListener | None,
                 options: ServerOptions, budget: MemoryBudget, state: ServerState,
                 back: HandBack, pool: WorkerPool,
                 drop_output: Callable[[Channel], None]) -> None:
        self.options = options
        self._budget = budget
        self._state = state
        self._back = back
        self._pool = pool
        self._drop_output = drop_output
        self.listener = listener
        self.unix = unix
        self._paused_listeners: list[socket.socket] = []
        #: When the listeners paused after running out of descriptors resume (0: none).
        self.paused_until = 0.0
        #: Each client address's open connections and requests in the pool (peers.py).
        self.per_peer: dict[str, PeerShare] = {}
        self._per_peer_limit = options.per_peer_limit
        #: Idle connections closed to make room for new ones (peers.eviction_choice).
        self.evicted = 0
        self._refusal_log = LogThrottle()
        #: The kernel lookups of local TCP clients' users (options.identify_local_peers),
        #: made on the first such accept.
        self._peer_lookup: PeerLookup | None = None
        #: Connections lingering after an error reply (each has a timer to run).
        self.lingering = 0
        #: The epoll set and the open connections by descriptor (made by :meth:`open`),
        #: and each connection's channel (for the parked frames the budget admits).
        self.ep: select.epoll
        self.conns: dict[int, Channel] = {}
        self.channel_of: dict[Connection, Channel] = {}
        #: Where a lingering connection's bytes are read to be thrown away.
        self._discard_buf = memoryview(bytearray(SCRATCH_SIZE))
        opts = options
        #: The limits the sweep checks, and how often it runs.
        self.timeouts = [t for t in (opts.idle_timeout, opts.frame_read_timeout,
                                     opts.write_timeout, opts.first_request_timeout,
                                     opts.park_timeout, opts.frame_progress_timeout) if t]
        if opts.min_frame_rate:
            self.timeouts.append(opts.frame_rate_grace or 1.0)
        self.sweep_every = min([0.5] + [t / 4 for t in self.timeouts])

    def open(self) -> select.epoll:
        """Make the epoll set, with the listeners in it; return it."""
        ep = self.ep = select.epoll()
        ep.register(self.listener.fileno(), _EPOLLIN)
        if self.unix is not None:
            ep.register(self.unix.sock.fileno(), _EPOLLIN)
        return ep

    # ----------------------------------------------------------------- accept

    def listeners(self) -> list[socket.socket]:
        """The sockets this server accepts on: TCP, and the Unix socket if any."""
        return [self.listener] + ([self.unix.sock] if self.unix is not None else [])

    def accept(self, listener: socket.socket, now: float) -> bool:
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
                    self.ep.unregister(listener.fileno())
                    self._paused_listeners.append(listener)
                    self.paused_until = now + _EMFILE_PAUSE
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
            if share is not None and share.connections >= self._per_peer_limit:
                # This address is at its share: its own oldest idle connection makes
                # room (peers.py), or, with all of them in calls, the new one goes.
                if not self._evict(self._idle_of(share), now,
                                   "max_connections_per_peer", self._per_peer_limit):
                    state.connections_refused_per_peer += 1
                    self._refuse_connection(sock, host, peer, now,
                                            "max_connections_per_peer",
                                            self._per_peer_limit)
                    continue
            elif state.connections_open >= opts.max_connections:
                if not self._evict(self._idle_anywhere(), now,
                                   "max_connections", opts.max_connections):
                    self._refuse_connection(sock, host, peer, now, "max_connections",
                                            opts.max_connections)
                    continue
            share = self.per_peer.get(host)     # the eviction may have emptied it
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
            tls = None
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
                tls = TLSStream(sock)
                conn.state = State.HANDSHAKING
            # fastio's C calls take the descriptor (no fileno() call per recv and send);
            # a TLS connection's calls go to ssl's C object or its stream (tls.py).
            ch = Channel(conn, sock, None, tls)
            ch.io = tls.io if tls is not None else ch.fd if ACCELERATED else sock
            ch.interest = _EPOLLIN
            self.ep.register(ch.fd, _EPOLLIN)
            self.conns[ch.fd] = ch
            self.channel_of[conn] = ch
            share.channels[ch.fd] = ch
            state.connections_open += 1
            state.connections_accepted += 1
            log.debug("connection_opened", peer=peer)
        return False      # the per-pass cap: more may be waiting

    def _idle_of(self, share: PeerShare) -> Channel | None:
        return oldest_idle(share.channels.values()) if self.options.evict_idle else None

    def _idle_anywhere(self) -> Channel | None:
        return eviction_choice(self.per_peer) if self.options.evict_idle else None

    def _evict(self, victim: Channel | None, now: float, limit_name: str,
               limit: int) -> bool:
        """Close ``victim`` (an idle connection, peers.eviction_choice) to make room
        for a new one; False if there is none. One log line per address per
        LogThrottle interval, as for refusals."""
        if victim is None or not self.options.evict_idle:
            return False
        conn = victim.conn
        self.evicted += 1
        held = self._refusal_log.allow(conn.host, now)
        if held is not None:
            log.warning("connection_evicted", peer=conn.peer, limit_name=limit_name,
                        limit=limit, idle_s=round(now - conn.last_activity, 3),
                        reason=f"{limit_name} ({limit}) reached: the oldest idle "
                               f"connection makes room for a new one",
                        similar_refusals_not_logged=held)
        self.really_close(victim)
        return True

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

    def handshake(self, ch: Channel, now: float) -> bool:
        """One nonblocking step of a TLS handshake (tls.py), on each socket event. True
        when it is done: the selector then reads what the TLS layer may hold already."""
        conn = ch.conn
        sock = ch.tls.ssl
        try:
            if not ch.tls_peeked:
                if not first_bytes_are_tls(sock):
                    self.set_interest(ch, _EPOLLIN)     # nothing arrived yet
                    return False
                ch.tls_peeked = True
            step = handshake_step(sock)
        except HandshakeFailed as exc:
            self._state.tls_handshakes_failed += 1
            held = self._refusal_log.allow(conn.host, now)
            if held is not None:
                log.warning("tls_handshake_failed", peer=conn.peer, reason=str(exc),
                            similar_failures_not_logged=held)
            self.really_close(ch)
            return False
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
                self.really_close(ch)
                return False
            self._state.tls_handshakes += 1
            if certified is not None:
                # Without a certificate (or a principal in it), the kernel's word for a
                # local client (set at accept) stands.
                conn.principal = certified
            conn.advance(Event.HANDSHAKE_DONE)
            conn.last_activity = now
            log.debug("tls_handshake_done", peer=conn.peer, principal=conn.principal,
                      version=sock.version())
            self.set_interest(ch, _EPOLLIN)
            return True
        self.set_interest(ch, _EPOLLOUT if step == WANT_WRITE else _EPOLLIN)
        return False

    # ----------------------------------------------------------------- timers

    def sweep(self, now: float, stopping: bool,
              refuse: Callable[[Channel, float], None]) -> None:
        """Resume paused listeners, expire the refusal log, and close (or, for a frame
        that waited too long for memory, ``refuse``) the connections past a deadline."""
        opts = self.options
        if self.paused_until and now >= self.paused_until and not stopping:
            self.paused_until = 0.0
            for listener in self._paused_listeners:
                self.ep.register(listener.fileno(), _EPOLLIN)
            self._paused_listeners.clear()
        for host, held in self._refusal_log.expire(now):
            log.warning("connection_refusals_not_logged", peer_address=host, count=held)
        budget = self._budget
        for ch in list(self.conns.values()):
            conn = ch.conn
            st = conn.state
            if st is State.LINGERING:
                if now >= ch.linger_until and ch.linger_until:
                    self.close(ch)
                elif ch.out and opts.write_timeout and \
                        now - conn.write_started > opts.write_timeout:
                    self.close(ch, "error reply not taken by the client")
                continue
            late = overdue(conn, opts, now)
            if late is None:
                if unread_check_due(conn, opts, now):
                    self._unread_reply(ch, now)
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
                refuse(ch, now)
            else:
                self.close(ch, late.reason)

    def _unread_reply(self, ch: Channel, now: float) -> None:
        """A connection between requests has been quiet for write_timeout since its last
        reply: if the kernel still holds reply bytes the client has not taken, it is not
        reading; closing frees them (they cannot be taken back otherwise)."""
        conn = ch.conn
        conn.outq_checked = conn.last_activity
        try:
            raw = fcntl.ioctl(ch.fd, _SIOCOUTQ, b"\0\0\0\0")
        except OSError:
            return
        queued = int.from_bytes(raw, "little", signed=True)
        if queued > 0:
            self._state.timeouts += 1
            self.close(ch, f"reply not taken by the client within "
                           f"{self.options.write_timeout:g}s (write_timeout; {queued} "
                           f"bytes still in the send queue)")

    # ----------------------------------------------------------------- stopping

    def begin_drain(self, deadline: float) -> None:
        """Stop accepting; close the connections with no request in flight or on its
        way. Those with one are answered by ``deadline`` (the grace period's end), then
        closed."""
        now = time.monotonic()
        for listener in self.listeners():
            # Connections still in the backlog connected before the stop, and many have
            # sent their request already: closing the listener would reset them. One
            # last accept takes them in, and the rule below sorts them like the rest.
            if not self.paused_until:
                while not self.accept(listener, now):
                    pass
            try:
                self.ep.unregister(listener.fileno())
            except (OSError, ValueError):
                pass
            listener.close()
        if self.unix is not None:
            remove_unix(self.unix)
        in_flight = arriving = 0
        for ch in list(self.conns.values()):
            if ch.conn.state in (State.PROCESSING, State.WRITING):
                in_flight += 1
            elif _request_arriving(ch):
                arriving += 1
            else:
                self.close(ch)
        log.info("stopping", in_flight=in_flight, arriving=arriving,
                 grace_s=round(max(0.0, deadline - now), 3))

    def finish(self, deadline: float) -> None:
        """The loop has ended: drop what no worker started, settle with the workers'
        way back, close every connection, stop the pool (waiting until ``deadline``,
        plus half a second) and close the epoll set and the wake-up."""
        pool = self._pool
        back = self._back
        # Requests no worker has started are dropped (their connections close below):
        # a handler must not start after the server has stopped.
        not_started = {id(task[0]) for task in pool.discard_queued()}
        with back.lock:
            # Outcomes that came back too late: count them, then close below.
            for _, _, status, _ in back.shut():
                self._state.requests_completed += 1
                if status >= Status.FAILED:
                    self._state.requests_failed += 1
            leftover = list(self.conns.values())
            for ch in leftover:
                # PROCESSING with a worker on it: the worker closes the socket when done.
                state = ch.conn.state
                busy = state in (State.PROCESSING, State.WRITING)
                processing = state is State.PROCESSING and id(ch) not in not_started
                self.really_close(ch, "server stopped before the reply was written"
                                  if busy else None, keep_socket=processing)
        stuck = pool.stop(timeout=max(0.0, deadline - time.monotonic()) + 0.5)
        if self._peer_lookup is not None:
            self._peer_lookup.close()
        self.ep.close()
        back.wakeup.close()
        log.info("stopped", abandoned_connections=len(leftover), stuck_workers=stuck,
                 bytes_reserved=self._budget.reserved)

    # ----------------------------------------------------------------- closing

    def start_linger(self, ch: Channel, now: float) -> None:
        """An error reply is out: half-close, and read (to discard) for a while."""
        try:
            ch.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self.close(ch)
            return
        ch.linger_until = now + _LINGER_SECONDS
        self.lingering += 1
        self.set_interest(ch, _EPOLLIN)

    def discard(self, ch: Channel, now: float) -> None:
        """Read and throw away what a lingering client sends; close at EOF or when its
        time is up."""
        try:
            while True:
                n = recv_into(ch.io, self._discard_buf)
                if n == 0:
                    self.close(ch)
                    return
        except (BlockingIOError, InterruptedError):
            if now >= ch.linger_until:
                self.close(ch)
        except OSError:
            self.close(ch)

    def close(self, ch: Channel, reason: str | None = None) -> None:
        """Close, unless a worker still holds the frame: then only stop polling, and
        the close follows when its outcome comes back (the selector books it)."""
        conn = ch.conn
        if conn.state is State.CLOSED:
            return
        if conn.state is State.PROCESSING:
            ch.peer_gone = True
            self.set_interest(ch, 0)
            if reason:
                log.info("client_gone_mid_call", peer=conn.peer, reason=reason)
            return
        self.really_close(ch, reason)

    def really_close(self, ch: Channel, reason: str | None = None,
                     keep_socket: bool = False) -> None:
        """Forget the connection and release its memory. ``keep_socket``: a worker is
        still running its request and will close the socket when it is done."""
        conn = ch.conn
        if reason:
            log.info("connection_closed", peer=conn.peer, state=conn.state.name,
                     reason=reason)
        else:
            log.debug("connection_closed", peer=conn.peer)
        if ch.linger_until:
            self.lingering -= 1
            ch.linger_until = 0.0
        self.set_interest(ch, None)
        if self.conns.pop(ch.fd, None) is not None:
            del self.channel_of[conn]
            share = conn.share
            share.connections -= 1
            share.channels.pop(ch.fd, None)
            if share.connections <= 0:
                # A request still in the pool decrements the orphaned counts; a new
                # connection from this address starts afresh.
                self.per_peer.pop(conn.host, None)
        conn.close()
        self._drop_output(ch)
        sock = ch.sock
        try:
            if keep_socket:
                sock.shutdown(socket.SHUT_RDWR)
            else:
                sock.close()
        except OSError:
            pass
        self._state.connections_open -= 1

    def set_interest(self, ch: Channel, mask: int | None) -> None:
        """Register, modify or unregister; 0 means unregistered too (an unregistered fd
        cannot report the HUP/ERR that a registered one reports even with no interest)."""
        if mask == 0:
            mask = None
        if ch.interest == mask:
            return
        try:
            if mask is None:
                self.ep.unregister(ch.fd)
            elif ch.interest is None:
                self.ep.register(ch.fd, mask)
            else:
                self.ep.modify(ch.fd, mask)
        except (OSError, ValueError):
            pass  # the descriptor is already gone; closing will follow
        ch.interest = mask


def _request_arriving(ch: Channel) -> bool:
    """Whether a connection between calls has part of a request, or a whole one, that
    was sent before the stop: read so far, or waiting in the kernel or the TLS layer.
    Such a client is answered before the close rather than cut off (a close with unread
    bytes is a reset, which loses the request and tells the client nothing)."""
    conn = ch.conn
    state = conn.state
    if state is not State.READING_HEADER:
        return state is State.READING_FRAME or state is State.AWAITING_MEMORY
    if conn.hdr or conn.leftover:
        return True
    io: Any = ch.io
    if ch.tls is not None and io.pending():
        return True
    try:
        raw = fcntl.ioctl(ch.fd, termios.FIONREAD, b"\0\0\0\0")
    except OSError:
        return False
    return int.from_bytes(raw, "little", signed=True) > 0


def _peer_name(addr: Any) -> str:
    if isinstance(addr, tuple) and len(addr) >= 2:
        host = addr[0]
        return f"[{host}]:{addr[1]}" if ":" in host else f"{host}:{addr[1]}"
    return str(addr) or "unix"


