"""Socket tier: many rolling restarts of make_server(processes=2) under load, every
call counted (issue 27, item 6).

Four clients call all along, each call on a connection of its own with an id of its
own; the server is restarted 20 times, each time once the children of the previous
restart have answered calls. Every call must be answered, once, by its own reply.

The parent logs as a program that never configured structlog does (structlog's
PrintLogger, which holds a lock per file around every line, here to a file), at
debug level, while two more threads of the parent log all along: the conditions in
which a child forked while another thread held that lock hung on its first
``connection_opened`` and answered none of the calls handed to it (3 restarts in 200
with scripts/restart_stress.py before rpc/multiprocess/forksafe.py took that lock).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import structlog

import nimbus_thrift
from nimbus_thrift.demo import EchoHandler
from nimbus_thrift.rpc.multiprocess.processes import ProcessServer

from support.rawthrift import call, connect, roundtrip, wait_for

RESTARTS = 20
CLIENTS = 4
#: Calls each new child must answer before the next restart.
CALLS_PER_CHILD = 5


class IdEcho(EchoHandler):
    """``echo(s)`` answers ``"<pid of the child> <s>"``."""

    def echo(self, s: str) -> str:
        return f"{os.getpid()} {s}"


class Clients:
    """Client threads calling until stopped; each call's id, its answer and its
    failure are recorded."""

    def __init__(self, demo, address: tuple[str, int]) -> None:
        self.demo = demo
        self.address = address
        self.lock = threading.Lock()
        self.sent: set[str] = set()
        self.answers: dict[str, list[str]] = {}
        self.by_pid: dict[int, int] = {}
        self.errors: list[str] = []
        self.done = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(n,)) for n in range(CLIENTS)]

    def _run(self, n: int) -> None:
        seq = 0
        while not self.done.is_set():
            seq += 1
            ident = f"c{n}-{seq}"
            with self.lock:
                self.sent.add(ident)
            try:
                with connect(self.address, timeout=10.0) as sock:
                    reply = roundtrip(sock, call(self.demo.Echo, "echo", s=ident),
                                      self.demo.Echo).body.success
            except Exception as exc:  # noqa: BLE001 - every failure is counted
                with self.lock:
                    self.errors.append(f"{ident}: {type(exc).__name__}: {exc}")
                continue
            pid, _, echoed = reply.partition(" ")
            with self.lock:
                self.answers.setdefault(echoed, []).append(reply)
                self.by_pid[int(pid)] = self.by_pid.get(int(pid), 0) + 1

    def answered_by(self, pid: int) -> int:
        with self.lock:
            return self.by_pid.get(pid, 0)

    def wait_served(self, pids: list[int], what: str) -> None:
        """Wait until each of ``pids`` has answered CALLS_PER_CHILD calls."""
        try:
            wait_for(lambda: all(self.answered_by(p) >= CALLS_PER_CHILD for p in pids),
                     timeout=30, what=what)
        except AssertionError as exc:
            with self.lock:
                raise AssertionError(f"{exc}: calls answered by pid {self.by_pid}, "
                                     f"errors {self.errors[:3]}") from None


def noise(stop: threading.Event) -> None:
    """A thread of the embedding program that logs all along."""
    log = structlog.get_logger("embedding-program")
    n = 0
    while not stop.is_set():
        n += 1
        log.debug("working", n=n)
        stop.wait(0.002)


def test_twenty_rolling_restarts_under_load_answer_every_call_once(demo, tmp_path: Path):
    # Restored after the test by conftest's _restore_logging.
    log_file = open(tmp_path / "parent.log", "w", encoding="utf-8")
    events: list[str] = []

    def record(logger, name, event_dict):
        events.append(event_dict["event"])
        return event_dict

    structlog.configure(
        processors=[record, structlog.processors.add_log_level,
                    structlog.processors.TimeStamper(fmt="iso"),
                    structlog.dev.ConsoleRenderer(colors=False)],
        logger_factory=structlog.PrintLoggerFactory(log_file))
    quiet = threading.Event()
    noisy = [threading.Thread(target=noise, args=(quiet,)) for _ in range(2)]
    server = nimbus_thrift.make_server(demo.Echo, IdEcho(), host="127.0.0.1", port=0,
                                       processes=2, worker_threads=4)
    assert isinstance(server, ProcessServer)
    clients = None
    generations = []
    try:
        for t in noisy:
            t.start()
        server.start()
        clients = Clients(demo, server.address)
        for t in clients.threads:
            t.start()
        current = server.children()
        for restart in range(1, RESTARTS + 1):
            previous = current
            clients.wait_served(previous, f"calls answered by {previous} before restart "
                                          f"{restart}")
            server.reload()
            wait_for(lambda: len(server.children()) == 2
                     and not set(server.children()) & set(previous),
                     timeout=30, what=f"both children replaced by restart {restart}")
            current = server.children()
            generations.append(current)
            # The old children gone too, before the next restart starts.
            wait_for(lambda: events.count("reload_done") == restart, timeout=30,
                     what=f"restart {restart} done")
        clients.wait_served(current, f"calls answered by the last children {current}")
    finally:
        if clients is not None:
            clients.done.set()
            for t in clients.threads:
                t.join(15)
        quiet.set()
        for t in noisy:
            t.join(5)
        server.stop(grace=5.0)
        log_file.close()
    assert clients.errors == []
    # Every call was answered, exactly once, by its own reply.
    assert set(clients.answers) == clients.sent
    assert all(len(replies) == 1 for replies in clients.answers.values())
    # The 40 children the restarts started all answered calls.
    pids = {pid for generation in generations for pid in generation}
    assert len(pids) == 2 * RESTARTS
    assert all(clients.by_pid.get(pid, 0) >= CALLS_PER_CHILD for pid in pids)
