"""One server on every core: a supervising parent and N forked children
(``make_server(..., processes=N)``).

::

    parent (runs no handler)                       child 1 .. N: a whole Server each
    +------------------------------------+          (its selector, its worker pool)
    | listening socket, bound before fork|          +------------------------------+
    | acceptor thread: accept, hand each |--conn--->| selector accepts from the    |
    |   connection to the next child     |  (fd)    |   handoff channel (handoff.py)|
    | supervisor thread: reap, restart   |<-ctl---->| main thread: figures, stop   |
    |   crashed children with back-off   |          +------------------------------+
    | reload thread: rolling restart     |
    +------------------------------------+

How connections reach the children, and why. Three ways were weighed:

* One listening socket inherited by every child, each child's selector accepting
  from it. Measured with the benchmark's load generator, which opens 64 connections
  at once: every time all 64 went to one child (the first to wake accepts all that
  is queued, 64 per pass), and the other child served nothing. RPC clients keep their
  connections, so an imbalance at connect time lasts as long as they do. Every child
  also wakes for every connection (a thundering herd).
* SO_REUSEPORT, a listener per child: the kernel spreads connections by a hash of
  their addresses and wakes one process; but a listener that closes resets the
  connections queued on it (net.ipv4.tcp_migrate_req is 0 by default: 20 of 40
  queued connections were reset when one of two listeners closed, measured here), so
  a crash or a rolling restart would drop the calls of clients that had just
  connected.
* The parent accepts and hands each connection to the next child in turn (what
  Node's cluster module does by default on Linux, for the same imbalance). Chosen:
  connections are spread evenly whatever the clients' timing, the accept queue
  belongs to the parent and outlives every child (a crash or a restart refuses
  nobody), and no child wakes for a connection it does not get. The cost is one
  accept and one sendmsg in the parent per connection (not per call), in a process
  of its own.

Handler state. The handler is built once, in the parent, before the children are
forked: each child works on its own copy-on-write copy of it as it was at the fork,
and what one child changes no other child (nor the parent) sees. State that must be
shared belongs in a store outside the processes; threads, connections and files a
handler needs of its own are best opened lazily, in the child that uses them (a
thread started before the fork does not exist in the children). A restarted child is
a fresh fork of the parent, so it starts from the parent's copy again. Each child
also inherits the parent's other open descriptors, as with any fork.

Each child gets ``1/N`` of the memory budgets (max_read_buffer_bytes, its per-peer
share, max_unsent_reply_bytes), so N children together hold what one server would;
worker_threads, max_connections and the per-peer connection cap are per child
(threads and descriptors are per-process resources).

Figures. metrics() and method_metrics() ask each serving child over its control
channel (the messages are in control.py) and add the figures of the children gone,
which a child that stops sends as its last words (children.py keeps them).
"""

from __future__ import annotations

import os
import select
import signal
import socket
import threading
import time
from typing import Any, NoReturn

import structlog

from .child import DEFAULT_STOP_GRACE, ChildFactory, child_main
from .children import Child as Child
from .children import Tally
from .control import CONTROL_MAX
from .forksafe import fork_holding_log_locks
from .handoff import HandoffListener, hand_over, send_end
from ..methodstats import MethodSnapshot
from ..metrics import MetricsSnapshot
from ..options import ServerOptions
from .supervision import (ChildState, RestartBackoff, check_processes, child_options,
                          describe_status)

log = structlog.get_logger(__name__)

#: Seconds a new child has to build its server and report ready (the handler was
#: copied by the fork, so this is the server's own start).
CHILD_READY_TIMEOUT = 30.0
#: Seconds after its grace a stopping child may take to exit before it is killed.
STOP_SLACK = 5.0
#: In a rolling restart, seconds an old child that is handed nothing more waits for its
#: connections to close before it drains. A connection handed to it a moment ago may
#: not have sent its first request yet, and a drain closes connections with no request
#: in flight: a client that connects for one call (and closes) gets its answer within
#: this time; one that keeps its connection is closed between calls at the end of it
#: (its next call then needs a new connection, which a new child serves).
RELOAD_SETTLE = 1.0
#: Seconds the acceptor waits for a child's handoff channel to take a connection
#: before it tries the next child (a child's selector takes them within a pass).
HANDOFF_TIMEOUT = 1.0
#: Connections accepted per wake-up of the acceptor, as the selector's per pass.
ACCEPTS_PER_PASS = 64
#: How long the acceptor rests when the process is out of descriptors.
EMFILE_PAUSE = 0.1


class ProcessServer:
    """N children serving one port, and the parent that supervises them. Build it
    with ``make_server(..., processes=N)``; it has Server's start, stop, address,
    metrics, method_metrics, serve_forever and context manager, and :meth:`reload`."""

    def __init__(self, factory: ChildFactory, host: str, port: int, options: ServerOptions,
                 processes: int) -> None:
        self.options = options
        self.processes = check_processes(processes, options)
        self.child_options = child_options(options, processes)
        self._factory = factory
        self._host = host
        self._port = port
        self._listener: socket.socket | None = None
        self.address: tuple[str, int] | None = None
        self._lock = threading.Lock()
        self._slots: list[Child | None] = [None] * processes
        #: Forked and not yet ready; replaced or stopping and not yet reaped.
        self._starting: list[Child] = []
        self._stopping_children: list[Child] = []
        #: One fork at a time (see _spawn).
        self._fork_lock = threading.Lock()
        self._backoff = [RestartBackoff() for _ in range(processes)]
        #: Slot -> monotonic time its next child may start (after a crash).
        self._restart_at: dict[int, float] = {}
        #: The children's figures, and those of the children gone (children.py).
        self._tally = Tally()
        self._next = 0      # round-robin position of the acceptor
        self._started = False
        self._stopping = False
        self._stopped = threading.Event()
        #: Wake-up pipes of the supervisor and the acceptor, made by start().
        self._wake_r = self._wake_w = self._accept_r = self._accept_w = -1
        #: Set while some child is serving: the acceptor accepts only then, so that
        #: connections wait in the kernel's queue rather than in the parent.
        self._serving = threading.Condition(self._lock)
        self._supervisor: threading.Thread | None = None
        self._acceptor: threading.Thread | None = None
        self._reloader: threading.Thread | None = None
        self._reload_again = False

    # ------------------------------------------------------------- lifecycle

    def start(self) -> tuple[str, int]:
        """Bind, fork the children, and return (host, port) once every child has
        reported ready.

        Raises:
            OSError: the address cannot be bound.
            RuntimeError: a child failed to start (the others are stopped).
        """
        with self._lock:
            if self._started:
                assert self.address is not None
                return self.address
            self._started = True
        listener = socket.create_server((self._host, self._port),
                                        backlog=self.options.backlog, reuse_port=False)
        listener.setblocking(False)
        self._listener = listener
        addr = listener.getsockname()
        self.address = (addr[0], addr[1])
        self._wake_r, self._wake_w = os.pipe()
        self._accept_r, self._accept_w = os.pipe()
        for fd in (self._wake_r, self._accept_r):
            os.set_blocking(fd, False)
        log.info("listening", host=addr[0], port=addr[1], processes=self.processes,
                 pid=os.getpid(), workers_per_child=self.options.worker_threads,
                 max_read_buffer_bytes_per_child=self.child_options.max_read_buffer_bytes)
        for slot in range(self.processes):
            child = self._spawn(slot)
            if child is None:
                self.stop(grace=0.0)
                raise RuntimeError(f"child {slot + 1} of {self.processes} did not start "
                                   "(see the log for its error)")
            self._place(slot, child)
        self._supervisor = threading.Thread(target=self._supervise, name="nimbus-supervisor",
                                            daemon=True)
        self._acceptor = threading.Thread(target=self._accept_loop, name="nimbus-acceptor",
                                          daemon=True)
        self._supervisor.start()
        self._acceptor.start()
        return self.address

    def serve_forever(self) -> None:
        """Start, then block until :meth:`stop`. Called in the main thread, it also
        stops gracefully on SIGTERM and SIGINT and restarts the children one by one on
        SIGHUP (the previous handlers come back when it returns)."""
        self.start()
        previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            def on_stop(signum: int, frame: object) -> None:
                threading.Thread(target=self.stop, name="nimbus-stop", daemon=True).start()

            def on_hup(signum: int, frame: object) -> None:
                self.reload()

            for sig, handler in ((signal.SIGTERM, on_stop), (signal.SIGINT, on_stop),
                                 (signal.SIGHUP, on_hup)):
                previous[sig] = signal.signal(sig, handler)
        try:
            while not self._stopped.wait(3600):
                pass
        finally:
            for signum, old in previous.items():
                signal.signal(signum, old)

    def stop(self, grace: float = DEFAULT_STOP_GRACE) -> None:
        """Stop accepting, then stop every child gracefully (each lets its in-flight
        calls finish for up to ``grace`` seconds), kill any that has not exited
        STOP_SLACK seconds after that, and close the listening socket. Safe to call
        more than once and from any thread."""
        grace = max(0.0, grace)
        with self._lock:
            first = not self._stopping
            self._stopping = True
            self._serving.notify_all()
        if not first:
            self._stopped.wait(grace + 2 * STOP_SLACK)
            return
        self._poke(self._accept_w)
        if self._acceptor is not None and self._acceptor is not threading.current_thread():
            self._acceptor.join(HANDOFF_TIMEOUT + STOP_SLACK)
        with self._lock:
            children = self._all_children()
        for child in children:
            self._request_stop(child, grace)
        deadline = time.monotonic() + grace + STOP_SLACK
        for child in children:
            self._tally.collect_farewell(child, deadline)
        for child in children:
            if not child.exited.wait(max(0.0, deadline - time.monotonic())):
                self._kill(child)
        self._poke(self._wake_w)
        if self._supervisor is not None and self._supervisor is not threading.current_thread():
            self._supervisor.join(STOP_SLACK)
        for child in children:
            self._reap(child, block=True)
        if self._listener is not None:
            self._listener.close()
        threads = (self._supervisor, self._acceptor)
        if not any(t is not None and t.is_alive() for t in threads):
            for fd in (self._wake_r, self._wake_w, self._accept_r, self._accept_w):
                if fd >= 0:
                    os.close(fd)
            self._wake_r = self._wake_w = self._accept_r = self._accept_w = -1
        log.info("stopped", processes=self.processes, pid=os.getpid())
        self._stopped.set()

    def __enter__(self) -> "ProcessServer":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def reload(self) -> None:
        """Restart the children one at a time: each new child is serving (and handed
        the new connections) before the one it replaces stops, and that one finishes
        the calls it has. Returns at once (it may be called from a signal handler); a
        reload asked for while one runs is done again after it."""
        with self._lock:
            if self._stopping or not self._started:
                return
            if self._reloader is not None and self._reloader.is_alive():
                self._reload_again = True
                return
            self._reloader = threading.Thread(target=self._rolling_restart,
                                              name="nimbus-reload", daemon=True)
            self._reloader.start()

    # ------------------------------------------------------------- observation

    def children(self) -> list[int]:
        """The pids of the children serving now, by slot."""
        with self._lock:
            return [c.pid for c in self._slots
                    if c is not None and c.state is ChildState.SERVING]

    def metrics(self) -> MetricsSnapshot:
        """The sum of the serving children's snapshots (each asked over its control
        channel; one that does not answer within CONTROL_TIMEOUT is left out), plus the
        cumulative counters of the children that have stopped gracefully. During a
        rolling restart a stopping child's counters are missing until it has stopped."""
        return self._tally.metrics(self._serving_children())

    def method_metrics(self) -> dict[str, MethodSnapshot]:
        """Calls by outcome and latency per IDL method (methods called at least once),
        summed over every child, as ``Server.method_metrics()``; empty unless made with
        ``method_metrics=True``.

        These never go down. Each serving child is asked over its control channel; one
        that does not answer within CONTROL_TIMEOUT counts with what it last answered.
        A child that stops (a rolling restart, stop()) reports its final figures, which
        are kept; a child that crashes keeps only what it had answered before (the calls
        it served since are lost with it)."""
        if not self.options.method_metrics:
            return {}
        return self._tally.method_metrics(self._serving_children())

    def _serving_children(self) -> list[Child]:
        with self._lock:
            return [c for c in self._slots if c is not None and c.state is ChildState.SERVING]

    # ------------------------------------------------------------- children

    def _spawn(self, slot: int) -> Child | None:
        """Fork a child for ``slot`` and wait until it is serving; None if it failed:
        not forked (forksafe.py refused, or the fork failed), or not ready (it is then
        killed, and reaped like any other). The caller places it."""
        assert self._listener is not None
        # One fork at a time, from the socketpairs until the child is on record: a
        # child forked meanwhile by another thread would keep copies of this child's
        # parent ends, and this child would not see them close when the parent dies.
        with self._fork_lock:
            control, control_child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            handoff, handoff_child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                pid = fork_holding_log_locks()   # not os.fork(): see forksafe.py
            except OSError as exc:   # no fork made (a logging lock stayed held, ENOMEM)
                for end in (control, control_child, handoff, handoff_child):
                    end.close()
                log.error("child_not_forked", slot=slot, error=str(exc))
                return None
            if pid == 0:  # the child: never returns
                control.close()
                handoff.close()
                self._child_main(slot, control_child, handoff_child)
            control_child.close()
            handoff_child.close()
            handoff.settimeout(HANDOFF_TIMEOUT)
            child = Child(slot, pid, control, handoff, os.pidfd_open(pid))
            with self._lock:
                self._starting.append(child)
        self._poke(self._wake_w)  # the supervisor watches the new child from now on
        control.settimeout(CHILD_READY_TIMEOUT)
        try:
            ready = control.recv(CONTROL_MAX) == b"ready"
        except OSError:
            ready = False
        with self._lock:
            self._starting.remove(child)
            exited = child.exited.is_set()
            if ready and child.state is ChildState.STARTING and not self._stopping:
                child.move(ChildState.SERVING)
            else:
                ready = False
                if not exited:
                    self._stopping_children.append(child)
        if exited:  # reaped while we read: _reap left its channels to us
            self._close_channels(child)
        if not ready:
            log.error("child_not_ready", slot=slot, pid=pid, timeout_s=CHILD_READY_TIMEOUT)
            self._kill(child)
            return None
        log.info("child_started", slot=slot, pid=pid)
        return child

    def _place(self, slot: int, child: Child) -> Child | None:
        """Put a serving child in its slot; return the one it replaces, now STOPPING
        (handed nothing more; the caller stops it)."""
        with self._lock:
            old = self._slots[slot]
            self._slots[slot] = child
            self._serving.notify_all()
            if old is None or old.exited.is_set():
                return None
            if old.state is not ChildState.STOPPING:
                old.move(ChildState.STOPPING)
            self._stopping_children.append(old)
            return old

    def _all_children(self) -> list[Child]:
        """Every child not yet reaped (call with the lock held)."""
        return ([c for c in self._slots if c is not None and not c.exited.is_set()]
                + self._starting + self._stopping_children)

    def _child_main(self, slot: int, control: socket.socket,
                    handoff: socket.socket) -> NoReturn:
        """In the new child: from the fork to os._exit (see rpc/multiprocess/child.py)."""
        assert self._listener is not None and self.address is not None
        listener = HandoffListener(handoff, self._listener.family, self._listener.getsockname())
        child_main(slot, control, listener, self._factory, self.child_options, self.address,
                   before=self._close_parent_fds)

    def _close_parent_fds(self) -> None:
        """In a new child: close what only the parent uses (the listening socket, the
        other children's channels and pidfds, the parent's wake-up pipes)."""
        assert self._listener is not None
        self._listener.close()
        for fd in (self._wake_r, self._wake_w, self._accept_r, self._accept_w):
            if fd >= 0:
                os.close(fd)
        for child in self._all_children():
            child.control.close()
            child.handoff.close()
            os.close(child.pidfd)

    def _close_channels(self, child: Child) -> None:
        with child.lock:
            child.control.close()
        with child.handoff_lock:
            child.handoff.close()

    def _request_stop(self, child: Child, grace: float, settle: float = 0.0) -> None:
        """Hand the child nothing more, then tell it to stop."""
        with self._lock:
            if child.state in (ChildState.STARTING, ChildState.SERVING):
                child.move(ChildState.STOPPING)
        with child.handoff_lock:
            send_end(child.handoff)
        try:
            with child.lock:
                child.control.send(b"stop %r %r" % (grace, settle))
        except OSError:
            pass  # already gone: the supervisor reaps it

    def _kill(self, child: Child) -> None:
        """SIGKILL one of our own children, through its pidfd, unless reaped."""
        with self._lock:
            if child.exited.is_set():
                return
            try:
                signal.pidfd_send_signal(child.pidfd, signal.SIGKILL)
            except OSError:
                pass
        log.warning("child_killed", slot=child.slot, pid=child.pid)

    def _reap(self, child: Child, block: bool = False) -> None:
        """Collect the exit status of a child that has exited (waiting for it with
        ``block``); schedule its slot's restart if it crashed."""
        with self._lock:
            if child.exited.is_set():
                return
            try:
                pid, status = os.waitpid(child.pid, 0 if block else os.WNOHANG)
            except ChildProcessError:
                pid, status = child.pid, 0
            if pid == 0:
                return
            crashed = child.state is not ChildState.STOPPING and not self._stopping
            child.move(ChildState.EXITED)
            child.status = status
            lived = time.monotonic() - child.started
            if child in self._stopping_children:
                self._stopping_children.remove(child)
            restart = crashed and self._slots[child.slot] is child
            delay = 0.0
            if restart:
                delay = self._backoff[child.slot].after_exit(lived)
                self._restart_at[child.slot] = time.monotonic() + delay
            # With the lock held and exited set first: _kill never signals through a
            # closed (and perhaps reused) descriptor.
            child.exited.set()
            os.close(child.pidfd)
            spawning = child in self._starting
        if not spawning:  # else _spawn, which is reading its control channel, closes it
            self._tally.child_gone(child)
            self._close_channels(child)
        if restart:
            log.warning("child_exited", slot=child.slot, pid=child.pid,
                        status=describe_status(status), served_s=round(lived, 3),
                        restart_in_s=round(delay, 3))
        else:
            log.info("child_stopped", slot=child.slot, pid=child.pid,
                     status=describe_status(status))

    # ------------------------------------------------------------- acceptor thread

    def _accept_loop(self) -> None:
        """Accept connections and hand each to the next serving child in turn."""
        assert self._listener is not None
        listener = self._listener
        poller = select.poll()
        poller.register(listener.fileno(), select.POLLIN)
        poller.register(self._accept_r, select.POLLIN)
        try:
            while True:
                with self._lock:
                    # Accept only while a child can take the connection; otherwise it
                    # waits in the kernel's queue (the supervisor is starting one).
                    while not self._stopping and not any(
                            c is not None and c.state is ChildState.SERVING
                            for c in self._slots):
                        self._serving.wait()
                    if self._stopping:
                        return
                for fd, _ in poller.poll():
                    if fd == self._accept_r:
                        _drain(self._accept_r)
                for _ in range(ACCEPTS_PER_PASS):
                    try:
                        conn, _ = listener.accept()
                    except (BlockingIOError, InterruptedError):
                        break
                    except OSError as exc:
                        log.error("accept_failed", error=str(exc),
                                  effect=f"not accepting for {EMFILE_PAUSE}s")
                        time.sleep(EMFILE_PAUSE)  # out of descriptors: let some close
                        break
                    self._hand(conn)
        except BaseException:
            log.exception("acceptor_crashed")
            raise

    def _hand(self, conn: socket.socket) -> None:
        """Give ``conn`` to a serving child (the next in turn that takes it)."""
        try:
            for _ in range(self.processes):
                with self._lock:
                    self._next = (self._next + 1) % self.processes
                    child = self._slots[self._next]
                if child is None:
                    continue
                with child.handoff_lock:
                    # Checked under the handoff lock: once a child is STOPPING, its
                    # "end" follows every connection handed to it (_request_stop).
                    if child.state is not ChildState.SERVING:
                        continue
                    try:
                        hand_over(child.handoff, conn)
                        return
                    except OSError:
                        continue  # gone or stuck: the next child
            log.warning("connection_not_handed", reason="no child took it")
        finally:
            conn.close()

    # ------------------------------------------------------------- supervisor thread

    def _poke(self, fd: int) -> None:
        if fd < 0:
            return
        try:
            os.write(fd, b"x")
        except OSError:
            pass

    def _supervise(self) -> None:
        """Reap children as they exit and start crashed slots again when due."""
        try:
            while True:
                with self._lock:
                    watched = {c.pidfd: c for c in self._all_children()}
                    stopping = self._stopping
                    due = min(self._restart_at.values(), default=None)
                if stopping and not watched:
                    return
                poller = select.poll()
                poller.register(self._wake_r, select.POLLIN)
                for fd in watched:
                    poller.register(fd, select.POLLIN)
                timeout = None if due is None or stopping else \
                    max(0, int((due - time.monotonic()) * 1000) + 1)
                for fd, _ in poller.poll(timeout):
                    if fd == self._wake_r:
                        _drain(self._wake_r)
                    elif fd in watched:
                        self._reap(watched[fd])
                self._restart_due()
        except BaseException:
            log.exception("supervisor_crashed")
            raise

    def _restart_due(self) -> None:
        now = time.monotonic()
        with self._lock:
            if self._stopping:
                self._restart_at.clear()
                return
            slots = [s for s, at in self._restart_at.items() if at <= now]
            for slot in slots:
                del self._restart_at[slot]
        for slot in slots:
            child = self._spawn(slot)
            if child is None:
                with self._lock:
                    self._restart_at[slot] = time.monotonic() + \
                        self._backoff[slot].after_exit(0.0)
                continue
            old = self._place(slot, child)
            if old is not None:  # not expected: the slot's child had exited
                self._request_stop(old, 0.0)

    # ------------------------------------------------------------- rolling restart

    def _rolling_restart(self) -> None:
        while True:
            log.info("reload_started", processes=self.processes)
            for slot in range(self.processes):
                with self._lock:
                    if self._stopping:
                        self._reloader = None
                        return
                new = self._spawn(slot)
                if new is None:
                    log.error("reload_child_failed", slot=slot,
                              effect="the old child keeps serving")
                    continue
                # The new child is handed connections from here on, before the old
                # one is told to stop: no connection waits for a child that is leaving.
                old = self._place(slot, new)
                if old is None:
                    continue
                self._request_stop(old, DEFAULT_STOP_GRACE + RELOAD_SETTLE, RELOAD_SETTLE)
                deadline = time.monotonic() + DEFAULT_STOP_GRACE + RELOAD_SETTLE + STOP_SLACK
                self._tally.collect_farewell(old, deadline)
                if not old.exited.wait(max(0.0, deadline - time.monotonic())):
                    self._kill(old)
                    old.exited.wait(STOP_SLACK)
            log.info("reload_done", children=self.children())
            with self._lock:
                if not self._reload_again or self._stopping:
                    self._reloader = None
                    return
                self._reload_again = False


def _drain(fd: int) -> None:
    """Empty a non-blocking wake-up pipe."""
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass
