"""Server options: validated once, then frozen.

Every default limit is a named constant with the reason it has that value.
"""

from __future__ import annotations

import dataclasses
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: Storm's Nimbus runs its THsHaServer with 64 worker threads (nimbus.thrift.threads).
DEFAULT_WORKER_THREADS = 64

#: Apache Thrift's TConfiguration.DEFAULT_MAX_FRAME_SIZE, so a frame any stock Thrift
#: peer accepts is accepted here and nothing larger.
DEFAULT_MAX_FRAME_SIZE = 16_384_000

#: Bytes all connections together may hold in read buffers. THRIFT-4193 settled on
#: 256 MiB for Java's nonblocking servers after an unbounded default ran them out of memory.
DEFAULT_MAX_READ_BUFFER_BYTES = 256 * 1024 * 1024

#: Requests decoded and waiting for a worker. Each already holds its frame in the
#: read-buffer budget; the bound is what turns overload into a prompt reply instead of
#: ever-growing latency (Java's THsHa queue is unbounded).
DEFAULT_WORKER_QUEUE_SIZE = 4096

#: Open connections. Each costs a file descriptor and a little state; past this the
#: server closes new connections at once instead of failing later on EMFILE.
DEFAULT_MAX_CONNECTIONS = 4096

#: File descriptors kept free for everything but connections when max_connections is
#: clamped to the process's open-files limit (:meth:`ServerOptions.within_open_files`):
#: the server's own (the listeners, the epoll set, the wake-up pair, the netlink socket
#: of identify_local_peers: 6), stdio and log files, and what an embedding process
#: opens while serving (a database, a file being written). Without a reserve, idle
#: connections took every descriptor and accept(), SQLite and open() all failed with
#: EMFILE (issue 27: 1,010 idle connections against the usual soft limit of 1,024).
#: The Nimbus daemon asks for more (nimbus/daemon.py).
DEFAULT_RESERVED_DESCRIPTORS = 64

#: Seconds a connection may sit between requests with nothing to read or write.
#: Storm's storm.thrift.socket.timeout.ms is 600000.
DEFAULT_IDLE_TIMEOUT = 600.0

#: Seconds from a frame's first byte until its last. A client that declares a large frame
#: and trickles it would otherwise hold its share of the budget forever (slowloris).
DEFAULT_FRAME_READ_TIMEOUT = 30.0

#: Seconds a reply may take to drain to a client that is not reading it; also how long
#: reply bytes may sit unread in the kernel's send queue after the server handed them
#: over (the connection is then closed, which frees them).
DEFAULT_WRITE_TIMEOUT = 30.0

#: Seconds a new connection may take to deliver its whole first request. A Thrift
#: client opens its transport to make a call and sends it at once (ours connects
#: lazily, on the first call), so a connection silent this long is holding a slot, not
#: calling. 20 s is what Apache httpd's mod_reqtimeout gives a request's headers, and
#: still lets a 1 MiB first frame arrive at 50 KiB/s.
DEFAULT_FIRST_REQUEST_TIMEOUT = 20.0

#: Seconds a frame may wait for read-buffer memory before it is refused. The whole
#: default budget drains through the workers in well under a second (~1.5 GB/s
#: measured with 1 MiB frames), so a wait this long means the memory is held by
#: stalled peers; the client then gets a refusal instead of hanging.
DEFAULT_PARK_TIMEOUT = 10.0

#: Bytes per second a frame in progress must average once its grace period is over.
#: Apache httpd's mod_reqtimeout asks 500 bytes/s of a request body; a frame comes from
#: one buffered write, so any real link delivers it many times faster. Below this it is
#: a slowloris drip holding a connection and its share of the read budget.
DEFAULT_MIN_FRAME_RATE = 1024

#: Seconds at the start of a frame during which the rate is not checked: room for a
#: client's GC pause or TCP retransmissions (1 + 2 + 4 s of back-off) mid-frame.
DEFAULT_FRAME_RATE_GRACE = 10.0

#: Seconds a frame in progress may go without a byte before its connection is closed
#: (the rate since its last bytes, where min_frame_rate is the average since its
#: start: a frame that brought 1 MiB fast and then stopped 16 bytes short would meet
#: that average for 1,000 s, holding 1 MiB of the budget; issue 27's attack filled a
#: 64 MiB budget with them). A frame is one buffered write by its client, so its bytes
#: stop only when the network does: Linux's retransmission back-off, from its 200 ms
#: minimum, passes 3 s only after the fourth loss of the same segment.
DEFAULT_FRAME_PROGRESS_TIMEOUT = 5.0

#: Share of max_connections one client address may hold when
#: max_connections_per_peer is not set: a quarter, so filling the server takes at
#: least four addresses (1024 of the default 4096; the benchmarks use at most 256
#: connections from one address). The same share of max_read_buffer_bytes when
#: max_read_buffer_bytes_per_peer is not set (64 of the default 256 MiB: four frames
#: of the largest default size at once).
PER_PEER_SHARE = 4
#: ... but never fewer than this (or max_connections, if smaller): a small server
#: must still let one host run a CLI, a driver and a few executors side by side.
PER_PEER_FLOOR = 64

#: Reply bytes the server may hold in its own memory for clients that have not taken
#: them yet (replies larger than what the socket accepted at once). Past this, the
#: connections that have been slowest to read are closed, oldest first. 64 MiB is 64
#: 1 MiB replies in flight to slow readers, and keeps a flood of clients that never
#: read within the issue's 100 MiB growth target.
DEFAULT_MAX_UNSENT_REPLY_BYTES = 64 * 1024 * 1024

#: SO_SNDBUF for accepted sockets: the most reply bytes the kernel queues for one
#: client that does not read (Linux doubles the value for its bookkeeping). Left to
#: autotuning (up to net.ipv4.tcp_wmem's 4 MiB) 1,000 clients not reading 1 MB replies
#: held 976 MiB of TCP memory; with 256 KiB, 512 MiB (64 KiB: 156 MiB), freed at
#: write_timeout (scripts/abuse/row5_unread_replies.py). 256 KiB still takes a 1 MiB
#: reply in a few writes at loopback speed (scripts/bench.sh's 1mib scenario showed
#: no loss). None keeps the kernel's autotuning.
DEFAULT_SEND_BUFFER_SIZE: int | None = 256 * 1024

#: Seconds a TLS handshake may take: a client that opens a connection and never
#: finishes it holds a slot and a socket. 10 s is many round trips on any real link.
DEFAULT_HANDSHAKE_TIMEOUT = 10.0

#: Listen backlog; the kernel caps it at net.core.somaxconn anyway.
DEFAULT_BACKLOG = 1024

#: Memory one request's decoded values may take, as a multiple of its frame's bytes
#: (never under rpc.decoded.DECODED_SIZE_FLOOR, 1 MiB): decoding is refused with
#: PROTOCOL_ERROR past it. Real traffic, by rpc/codec/decoded.py's estimates (tracemalloc
#: within 15%): uploadChunk and conf strings 1x, getClusterInfo with 50 topologies
#: 4.4x, wordcount's submitTopology 7x, getTopologyInfo (stats maps keyed by struct)
#: 9.6x; 1 MiB of empty JavaObjectArgs 136x. 16 leaves room above the densest real
#: message and holds that one to 16 MiB per 1 MiB frame.
DEFAULT_DECODED_SIZE_FACTOR = 16

#: The transports a server can tell apart on one port, from each connection's first
#: bytes (rpc/codec/forms.py): all are accepted unless ``transports=`` says otherwise.
TRANSPORTS = ("framed", "unframed", "header")
#: The protocols likewise (THeader frames carry one of them too).
PROTOCOLS = ("binary", "compact")


class OptionError(ValueError):
    """An option has a value the server cannot run with. The message is a sentence."""


@dataclass(frozen=True)
class ServerOptions:
    """Everything tunable about a server. Build with ``ServerOptions(**kw)``; invalid
    values raise :class:`OptionError` naming the option and the value."""

    worker_threads: int = DEFAULT_WORKER_THREADS
    worker_queue_size: int = DEFAULT_WORKER_QUEUE_SIZE
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    max_read_buffer_bytes: int = DEFAULT_MAX_READ_BUFFER_BYTES
    #: None: max_read_buffer_bytes // PER_PEER_SHARE, at least one max_frame_size (or
    #: the whole budget, if smaller); read the value in force from :attr:`peer_read_share`.
    max_read_buffer_bytes_per_peer: int | None = None
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    #: Descriptors max_connections leaves free below the open-files limit (see
    #: DEFAULT_RESERVED_DESCRIPTORS); 0 lets connections take every one.
    reserved_descriptors: int = DEFAULT_RESERVED_DESCRIPTORS
    #: At max_connections, or an address at its share, close the oldest idle connection
    #: to make room for the new one (rpc/peers.py, eviction_choice); False refuses the
    #: new one instead, so whoever holds idle connections keeps the server full.
    evict_idle: bool = True
    idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT
    frame_read_timeout: float | None = DEFAULT_FRAME_READ_TIMEOUT
    write_timeout: float | None = DEFAULT_WRITE_TIMEOUT
    first_request_timeout: float | None = DEFAULT_FIRST_REQUEST_TIMEOUT
    park_timeout: float | None = DEFAULT_PARK_TIMEOUT
    #: Bytes/s; None turns the rate rule off.
    min_frame_rate: int | None = DEFAULT_MIN_FRAME_RATE
    frame_rate_grace: float = DEFAULT_FRAME_RATE_GRACE
    #: Seconds mid-frame without a byte before the connection is closed; None: off.
    frame_progress_timeout: float | None = DEFAULT_FRAME_PROGRESS_TIMEOUT
    #: None: max_connections // PER_PEER_SHARE, at least min(PER_PEER_FLOOR,
    #: max_connections); read the value in force from :attr:`per_peer_limit`.
    max_connections_per_peer: int | None = None
    max_unsent_reply_bytes: int = DEFAULT_MAX_UNSENT_REPLY_BYTES
    send_buffer_size: int | None = DEFAULT_SEND_BUFFER_SIZE
    #: Every TCP connection speaks TLS with this server-side context (client
    #: certificates required if it says so); the Unix socket stays plain.
    ssl_context: ssl.SSLContext | None = None
    #: Seconds a TLS handshake may take from the accept.
    handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT
    #: Maps a verified client certificate (``getpeercert()``'s dict) to the principal;
    #: None takes the subject's common name. It may raise rpc.tls.CertificateRefused:
    #: the connection is then closed after the handshake, with a log line saying why.
    principal_from_cert: Callable[[dict[str, Any]], str | None] | None = None
    #: A TCP client on loopback is the OS user owning its socket, asked of the kernel
    #: per accepted connection (rpc/localpeer.py), as a Unix socket client is; a
    #: verified client certificate's principal still wins over it. Off: such a client
    #: has no principal, as any plain TCP client.
    identify_local_peers: bool = False
    #: Also listen on this Unix domain socket path (created with unix_socket_mode; a
    #: stale file is replaced); its clients' principal is their OS user (SO_PEERCRED).
    unix_socket: str | None = None
    unix_socket_mode: int = 0o660
    #: Reject old non-strict message headers (Storm accepts both; so do we by default).
    strict_read: bool = False
    #: Let the selector run methods that have proven fast itself, instead of handing
    #: each call to a worker (rpc/inline.py); False keeps every call on the pool.
    inline_calls: bool = True
    #: Keep calls by outcome and a latency histogram per IDL method
    #: (Server.method_metrics(), rpc/methodstats.py); off, the call path is untimed.
    method_metrics: bool = False
    backlog: int = DEFAULT_BACKLOG
    #: The decoded-size budget: bytes in a frame times this (see rpc/codec/decoded.py).
    decoded_size_factor: float = DEFAULT_DECODED_SIZE_FACTOR
    #: Transports accepted: any of TRANSPORTS; a client in another is closed with a
    #: log line. Framed is what Storm's clients use; unframed is TBufferedTransport.
    transports: tuple[str, ...] = TRANSPORTS
    #: Protocols accepted: any of PROTOCOLS.
    protocols: tuple[str, ...] = PROTOCOLS

    def __post_init__(self) -> None:
        for name in ("worker_threads", "worker_queue_size", "max_frame_size",
                     "max_read_buffer_bytes", "max_connections", "backlog",
                     "max_unsent_reply_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise OptionError(f"{name} must be a positive integer, not {value!r}.")
        reserve = self.reserved_descriptors
        if isinstance(reserve, bool) or not isinstance(reserve, int) or reserve < 0:
            raise OptionError(f"reserved_descriptors must be a whole number, 0 or more, "
                              f"not {reserve!r}.")
        for name in ("max_connections_per_peer", "min_frame_rate", "send_buffer_size",
                     "max_read_buffer_bytes_per_peer"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):
                raise OptionError(f"{name} must be a positive integer or None, "
                                  f"not {value!r}.")
        grace = self.frame_rate_grace
        if isinstance(grace, bool) or not isinstance(grace, (int, float)) \
                or not 0 <= grace < float("inf"):
            raise OptionError(f"frame_rate_grace must be a number of seconds, 0 or more, "
                              f"not {grace!r}.")
        for name in ("idle_timeout", "frame_read_timeout", "write_timeout",
                     "first_request_timeout", "park_timeout", "frame_progress_timeout"):
            value = getattr(self, name)
            # `not value > 0` also refuses NaN, which would silently disable the timeout.
            if value is not None and (isinstance(value, bool)
                                      or not isinstance(value, (int, float))
                                      or not value > 0 or value == float("inf")):
                raise OptionError(f"{name} must be a positive number of seconds or None, "
                                  f"not {value!r}.")
        factor = self.decoded_size_factor
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) \
                or not 1 <= factor < float("inf"):
            raise OptionError(f"decoded_size_factor must be a number of at least 1 (the "
                              f"memory a request may decode to, per byte of its frame), "
                              f"not {factor!r}.")
        if self.unix_socket is not None and (not isinstance(self.unix_socket, str)
                                             or not self.unix_socket):
            raise OptionError(f"unix_socket must be a path, not {self.unix_socket!r}.")
        mode = self.unix_socket_mode
        if isinstance(mode, bool) or not isinstance(mode, int) or not 0 <= mode <= 0o777:
            raise OptionError(f"unix_socket_mode must be file permission bits (e.g. 0o660), "
                              f"not {mode!r}.")
        ctx = self.ssl_context
        if ctx is not None and (not isinstance(ctx, ssl.SSLContext)
                                or ctx.protocol == ssl.PROTOCOL_TLS_CLIENT):
            raise OptionError(f"ssl_context must be a server-side ssl.SSLContext (e.g. "
                              f"ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)), "
                              f"not {ctx!r}.")
        timeout = self.handshake_timeout
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) \
                or not timeout > 0 or timeout == float("inf"):
            raise OptionError(f"handshake_timeout must be a positive number of seconds, "
                              f"not {timeout!r}.")
        if self.principal_from_cert is not None and not callable(self.principal_from_cert):
            raise OptionError(f"principal_from_cert must be callable, "
                              f"not {self.principal_from_cert!r}.")
        for name, known in (("transports", TRANSPORTS), ("protocols", PROTOCOLS)):
            value = getattr(self, name)
            if isinstance(value, str) or not isinstance(value, (tuple, list, set, frozenset)) \
                    or not value or not all(isinstance(v, str) and v in known for v in value):
                raise OptionError(f"{name} must be a non-empty collection of "
                                  f"{', '.join(repr(k) for k in known)}, not {value!r}.")
            # Frozen: keep it a tuple in the canonical order, whatever was given.
            object.__setattr__(self, name, tuple(k for k in known if k in value))
        for name in ("strict_read", "inline_calls", "method_metrics",
                     "identify_local_peers", "evict_idle"):
            if not isinstance(getattr(self, name), bool):
                raise OptionError(f"{name} must be True or False, "
                                  f"not {getattr(self, name)!r}.")

    @property
    def per_peer_limit(self) -> int:
        """Connections one client address may hold: :attr:`max_connections_per_peer`,
        or the share of :attr:`max_connections` described at :data:`PER_PEER_SHARE`."""
        if self.max_connections_per_peer is not None:
            return min(self.max_connections_per_peer, self.max_connections)
        return max(self.max_connections // PER_PEER_SHARE,
                   min(PER_PEER_FLOOR, self.max_connections))

    @property
    def peer_read_share(self) -> int:
        """Bytes the frames of one client address may declare at once (being read or
        handled): :attr:`max_read_buffer_bytes_per_peer`, or the share of
        :attr:`max_read_buffer_bytes` described at :data:`PER_PEER_SHARE`, never under
        one frame of :attr:`max_frame_size`."""
        budget = self.max_read_buffer_bytes
        if self.max_read_buffer_bytes_per_peer is not None:
            return min(self.max_read_buffer_bytes_per_peer, budget)
        return max(budget // PER_PEER_SHARE, min(self.max_frame_size, budget))

    def within_open_files(self, open_files: int | None) -> "ServerOptions":
        """These options with :attr:`max_connections` at most ``open_files`` (the
        process's soft RLIMIT_NOFILE; None: unlimited) less
        :attr:`reserved_descriptors`, so connections alone can never exhaust the
        process's descriptors. An explicit :attr:`max_connections_per_peer` shrinks in
        proportion (the default share follows the clamped total by itself), so one
        address keeps the part of the server it was given, not more. Unchanged (the
        same object) when the limit leaves room for every connection.

        Raises:
            OptionError: the limit leaves no descriptor for a connection.
        """
        if open_files is None or open_files < 0:
            return self
        room = open_files - self.reserved_descriptors
        if room >= self.max_connections:
            return self
        if room < 1:
            raise OptionError(
                f"the open-files limit of {open_files} leaves no descriptor for a "
                f"connection once reserved_descriptors ({self.reserved_descriptors}) are "
                f"kept free; raise the limit (ulimit -n) or lower reserved_descriptors.")
        per_peer = self.max_connections_per_peer
        if per_peer is not None:
            per_peer = max(1, per_peer * room // self.max_connections)
        return dataclasses.replace(self, max_connections=room,
                                   max_connections_per_peer=per_peer)

    @classmethod
    def from_kwargs(cls, **kwargs: object) -> "ServerOptions":
        """Build from keyword arguments, naming any unknown option in the error."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise OptionError(f"unknown server option(s) {', '.join(unknown)}; "
                              f"known options are {', '.join(sorted(known))}.")
        # arg-type: the names are checked above, and each value by __post_init__.
        return cls(**kwargs)  # type: ignore[arg-type]
