"""The public server: :class:`Server` (bind, start, stop, serve_forever, metrics); build
one with :func:`~nimbus_thrift.rpc.make.make_server`.

A half-sync/half-async design: one selector thread does all socket I/O (selector.py)
and a worker pool runs handlers (workers.py); a worker writes the reply it produced and
queues the outcome back to the selector (completion.py's HandBack). This module only
builds them, runs the selector on its thread and stops it.
"""

from __future__ import annotations

import resource
import socket
import threading
import time

import structlog

from .dispatch import Dispatcher, Status
from .memory import MemoryBudget
from .methodstats import MethodSnapshot
from .metrics import MetricsSnapshot, ServerState
from .options import ServerOptions
from .selector import Selector
from .unixsock import bind_unix

log = structlog.get_logger(__name__)


class Server:
    """A half-sync/half-async Thrift server. Build it with :func:`make_server`."""

    def __init__(self, dispatcher: Dispatcher, host: str, port: int,
                 options: ServerOptions, listener: socket.socket | None = None) -> None:
        """``listener``: serve from a socket that already listens instead of binding
        ``host``:``port`` (a child of ``make_server(processes=N)`` accepts the
        connections its parent hands over, see rpc/multiprocess/handoff.py; it has no Unix socket,
        which check_processes refuses for processes > 1).

        ``options.max_connections`` is clamped here to the process's open-files limit
        (:meth:`ServerOptions.within_open_files`); :attr:`options` is what is in force,
        :attr:`configured` what was asked.

        Raises:
            OptionError: the open-files limit leaves no descriptor for connections.
        """
        self.dispatcher = dispatcher
        self.configured = options
        #: The soft RLIMIT_NOFILE the limits were fitted to (None: unlimited).
        self.open_files_limit = soft_open_files()
        options = options.within_open_files(self.open_files_limit)
        self.options = options
        self._host = host
        self._port = port
        self._listener: socket.socket | None = None
        self._state = ServerState()
        self._budget = MemoryBudget(options.max_read_buffer_bytes, options.peer_read_share)
        #: The selector (and through it the workers and their way back), made on bind.
        self._selector: Selector | None = None
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self.address: tuple[str, int] | None = None
        if listener is not None:
            self._listener = listener
            self._selector = Selector(listener, dispatcher, options, self._budget,
                                      self._state, None)
            self.address = (host, port)

    # ----------------------------------------------------------------- lifecycle

    def _bind(self) -> tuple[str, int]:
        with self._lock:
            if self._listener is not None:
                assert self.address is not None
                return self.address
            listener = socket.create_server((self._host, self._port),
                                            backlog=self.options.backlog,
                                            reuse_port=False)
            listener.setblocking(False)
            unix = None
            if self.options.unix_socket:
                try:
                    unix = bind_unix(self.options.unix_socket, self.options.unix_socket_mode,
                                     self.options.backlog)
                except BaseException:
                    listener.close()
                    raise
            self._listener = listener
            self._selector = Selector(listener, self.dispatcher, self.options,
                                      self._budget, self._state, unix)
            addr = listener.getsockname()
            self.address = (addr[0], addr[1])
            clamped = self.options is not self.configured
            log.info("listening", host=addr[0], port=addr[1],
                     workers=self.options.worker_threads,
                     max_frame_size=self.options.max_frame_size,
                     max_read_buffer_bytes=self.options.max_read_buffer_bytes,
                     max_connections=self.options.max_connections,
                     max_connections_per_peer=self.options.per_peer_limit,
                     max_read_buffer_bytes_per_peer=self.options.peer_read_share,
                     open_files_limit=self.open_files_limit,
                     reserved_descriptors=self.options.reserved_descriptors,
                     max_connections_configured=(self.configured.max_connections
                                                 if clamped else None),
                     unix_socket=self.options.unix_socket,
                     tls=self.options.ssl_context is not None)
            return self.address

    def start(self) -> tuple[str, int]:
        """Bind, listen and serve on a background thread; return (host, port) once
        connections are accepted (the listening socket exists before this returns)."""
        address = self._bind()
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="nimbus-selector",
                                            daemon=True)
            self._thread.start()
        return address

    def serve_forever(self) -> None:
        """Serve in the calling thread until :meth:`stop` (for example from a signal
        handler) has drained the server."""
        self._bind()
        self._serve()

    def stop(self, grace: float = 10.0) -> None:
        """Stop accepting, let in-flight calls finish and their replies reach the
        clients for up to ``grace`` seconds, then close every connection. A request a
        client had sent before the stop (still in the listen backlog, or read in part)
        is answered too; idle connections close at once.

        Safe to call from any thread, from a signal handler, and more than once.
        """
        selector = self._selector
        if selector is None:
            return
        selector.request_stop(time.monotonic() + max(0.0, grace))
        if threading.current_thread() is self._thread or self._thread is None:
            return  # serve_forever's caller (or a signal handler in its thread) returns
        self._stopped.wait(max(0.0, grace) + 5.0)

    def __enter__(self) -> "Server":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def metrics(self) -> MetricsSnapshot:
        """A snapshot of the counters (safe from any thread)."""
        st = self._state
        selector = self._selector
        # Outcomes workers queued but the selector has not booked yet (it is woken only
        # when it has work to do) count as completed already.
        pending = list(selector.back.done) if selector is not None else []
        completed = st.requests_completed + len(pending)
        failed = st.requests_failed + sum(1 for item in pending if item[2] >= Status.FAILED)
        return MetricsSnapshot(
            connections_open=st.connections_open,
            connections_accepted=st.connections_accepted,
            connections_refused=st.connections_refused,
            connections_refused_per_peer=st.connections_refused_per_peer,
            bytes_reserved=self._budget.reserved,
            bytes_reserved_peak=self._budget.peak,
            read_buffer_budget=self._budget.capacity,
            frames_parked=self._budget.parked,
            frames_refused=st.frames_refused,
            requests_in_flight=st.requests_submitted - completed,
            requests_completed=completed,
            requests_failed=failed,
            requests_overloaded=st.requests_overloaded,
            queue_depth=selector.pool.depth if selector is not None else 0,
            timeouts=st.timeouts,
            unsent_reply_bytes=selector.back.unsent_bytes if selector is not None else 0,
            read_budget_overcommits=self._budget.overcommits,
            tls_handshakes=st.tls_handshakes,
            tls_handshakes_failed=st.tls_handshakes_failed,
            requests_inline=selector.inline.calls_run if selector is not None else 0,
            selector_takeovers=st.selector_takeovers,
        )

    def method_metrics(self) -> dict[str, MethodSnapshot]:
        """Calls by outcome and latency per IDL method (methods called at least once);
        empty unless the server was made with ``method_metrics=True``."""
        stats = self.dispatcher.method_stats
        return stats.snapshot() if stats is not None else {}

    # ----------------------------------------------------------------- selector thread

    def _serve(self) -> None:
        try:
            assert self._selector is not None  # _bind made it
            self._selector.run()
        except BaseException:
            log.exception("selector_crashed")
            raise
        finally:
            self._stopped.set()


def soft_open_files() -> int | None:
    """The process's soft RLIMIT_NOFILE: the most descriptors it may hold (None when
    unlimited). nimbus_thrift.tuning.raise_open_files_limit raises it to the hard
    limit; a library leaves that to the program (STYLE.md 9)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return None if soft == resource.RLIM_INFINITY else soft
