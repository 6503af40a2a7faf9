"""Issue 27, item 6: SIGHUP rolling restarts of make_server(processes=2) under load,
many times over, counting every call.

The server runs in this process's main thread (serve_forever, which takes SIGHUP as the
daemon does); client threads call ``echo("pid")``, each call on a connection of its
own, as tests/sockets/test_server_processes.py's rolling-restart test does. A restart
fails when any call made during it fails (refused, reset, timed out), when its new
children are not serving within --restart-timeout, or when the next --calls-after calls
are not answered within --answer-timeout. Prints one line per failed restart and a
total; exits 1 if any failed.

    .venv/bin/python scripts/restart_stress.py --restarts 200
    .venv/bin/python scripts/restart_stress.py --fresh --restarts 200 --logging structlog
    PYTHONPATH=/tmp/nt-before .venv/bin/python scripts/restart_stress.py  # an older tree

Logging goes through stdlib handlers (to a file), as under pytest, or with
``--logging structlog`` through structlog's own PrintLogger (structlog unconfigured):
the locks a log line holds are part of what a fork copies (see
nimbus_thrift/rpc/multiprocess/forksafe.py). Before that module took structlog's lock
too, ``--fresh --restarts 200 --logging structlog`` lost 48 calls in 3 restarts.
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import signal
import socket
import struct
import sys
import threading
import time

import structlog

import nimbus_thrift
from nimbus_thrift.demo import EchoHandler, demo_thrift


class PidEcho(EchoHandler):
    def echo(self, s: str) -> str:
        return str(os.getpid()) if s == "pid" else s


def echo_pid(address: tuple[str, int], timeout: float) -> int:
    """One echo("pid") call on a fresh connection: the answering child's pid."""
    name = b"echo"
    body = (struct.pack(">iI", -2147418111, len(name)) + name + struct.pack(">i", 1)
            + b"\x0b\x00\x01" + struct.pack(">I", 3) + b"pid" + b"\x00")
    with socket.create_connection(address, timeout=timeout) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)

        def exact(n: int) -> bytes:
            got = b""
            while len(got) < n:
                chunk = sock.recv(n - len(got))
                if not chunk:
                    raise EOFError("closed before the whole reply")
                got += chunk
            return got

        reply = exact(struct.unpack(">i", exact(4))[0])
    # The reply's last field is the string (type 11, id 0): its length then its bytes.
    start = reply.index(b"\x0b\x00\x00") + 3
    (length,) = struct.unpack(">I", reply[start:start + 4])
    return int(reply[start + 4:start + 4 + length])


class Load:
    """Client threads calling until stopped; every call is counted."""

    def __init__(self, address: tuple[str, int], threads: int, timeout: float) -> None:
        self.address = address
        self.timeout = timeout
        self.lock = threading.Lock()
        self.answered = 0
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                echo_pid(self.address, self.timeout)
                with self.lock:
                    self.answered += 1
            except (OSError, EOFError, ValueError) as exc:
                with self.lock:
                    self.errors.append(f"{type(exc).__name__}: {exc}")

    def counts(self) -> tuple[int, int]:
        with self.lock:
            return self.answered, len(self.errors)


def wait(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)     # polling with a deadline, not synchronising
    return predicate()


def conduct(server, args: argparse.Namespace, outcome: dict[str, object]) -> None:
    failed: list[str] = []
    try:
        if not wait(lambda: len(server.children()) == 2, 30):
            failed.append("start: children not serving")
            return
        load = Load(server.address, args.clients, args.call_timeout)
        load.start()
        wait(lambda: load.counts()[0] >= 20, 30)
        for n in range(1, args.restarts + 1):
            answered0, errors0 = load.counts()
            before = set(server.children())
            os.kill(os.getpid(), signal.SIGHUP)
            replaced = wait(lambda: len(server.children()) == 2
                            and not set(server.children()) & before, args.restart_timeout)
            mark = load.counts()[0]
            served = replaced and wait(lambda: load.counts()[0] >= mark + args.calls_after,
                                       args.answer_timeout)
            answered, errors = load.counts()
            if not replaced or not served or errors > errors0:
                with load.lock:
                    new_errors = load.errors[errors0:errors]
                why = ("children not replaced" if not replaced else
                       "no calls answered after the restart" if not served else
                       f"{errors - errors0} calls failed")
                failed.append(f"restart {n}: {why}; {answered - answered0} answered; "
                              f"{new_errors[:3]}")
                print(failed[-1], flush=True)
            if n % args.every == 0:
                print(f"{n} restarts, {len(failed)} failed, {answered} calls answered, "
                      f"{errors} failed", flush=True)
        load.stop.set()
        for t in load.threads:
            t.join(args.call_timeout + 5)
        outcome["answered"], outcome["errors"] = load.counts()
    finally:
        outcome["failed"] = failed
        server.stop(grace=5.0)


def fresh_round(server, args: argparse.Namespace, outcome: dict[str, object]) -> None:
    """One restart of a server just started, as the test does it: 4 clients, 50 calls,
    SIGHUP, both children replaced, 50 calls more."""
    load = None
    why = ""
    try:
        if not wait(lambda: len(server.children()) == 2, 30):
            why = "children not serving at start"
            return
        load = Load(server.address, args.clients, args.call_timeout)
        load.start()
        if not wait(lambda: load.counts()[0] >= 50, 30):
            why = "no calls before the restart"
            return
        before = set(server.children())
        os.kill(os.getpid(), signal.SIGHUP)
        if not wait(lambda: len(server.children()) == 2
                    and not set(server.children()) & before, args.restart_timeout):
            why = "children not replaced"
            return
        mark = load.counts()[0]
        if not wait(lambda: load.counts()[0] >= mark + 50, args.answer_timeout):
            why = "no calls answered after the restart"
    finally:
        if load is not None:
            load.stop.set()
            for t in load.threads:
                t.join(args.call_timeout + 5)
            answered, errors = load.counts()
            outcome["answered"] = int(outcome.get("answered", 0)) + answered  # type: ignore
            outcome["errors"] = int(outcome.get("errors", 0)) + errors  # type: ignore
            if errors and not why:
                why = f"{errors} calls failed"
            if why:
                why += f"; {answered} answered; {load.errors[:3]}"
        if why:
            dump_children(server)
            failed = outcome.setdefault("failed", [])
            assert isinstance(failed, list)
            failed.append(why)
            print(f"restart {len(outcome.get('rounds', []))}: {why}", flush=True)
        server.stop(grace=5.0)


def dump_children(server) -> None:
    """Have every child write its threads' stacks (faulthandler, registered for
    SIGUSR1 before the fork, so each child inherits it) to the --dumps file."""
    for pid in server.children():
        try:
            os.kill(pid, signal.SIGUSR1)
        except ProcessLookupError:
            pass
    time.sleep(0.5)   # (a diagnostic: let the children write before they are stopped)


def noise(stop: threading.Event) -> None:
    """A parent thread that logs as the pytest process's other threads might."""
    log = structlog.get_logger("noise")
    n = 0
    while not stop.is_set():
        n += 1
        log.debug("noise", n=n)
        if n % 100 == 0:
            time.sleep(0.001)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    p.add_argument("--restarts", type=int, default=200)
    p.add_argument("--fresh", action="store_true",
                   help="a new server for each restart (as the test), not one server "
                        "restarted again and again")
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--calls-after", type=int, default=20,
                   help="calls that must be answered after each restart")
    p.add_argument("--call-timeout", type=float, default=10.0)
    p.add_argument("--restart-timeout", type=float, default=30.0)
    p.add_argument("--answer-timeout", type=float, default=10.0)
    p.add_argument("--every", type=int, default=10, help="print progress every N restarts")
    p.add_argument("--log", default=os.devnull, help="file the server's log lines go to")
    p.add_argument("--noise", type=int, default=0,
                   help="parent threads logging all along (as a busy test process)")
    p.add_argument("--dumps", default=os.devnull,
                   help="file the children's stacks go to when a restart fails")
    p.add_argument("--logging", choices=("stdlib", "structlog"), default="stdlib",
                   help="stdlib: structlog through stdlib handlers to --log, as under "
                        "pytest; structlog: structlog's own PrintLogger to --log, as a "
                        "program that never configures structlog has (its lock per file "
                        "is held around every line)")
    args = p.parse_args()
    dumps = open(args.dumps, "w")
    faulthandler.register(signal.SIGUSR1, file=dumps, all_threads=True)
    if args.logging == "stdlib":
        structlog.configure(
            processors=[structlog.stdlib.add_log_level,
                        structlog.dev.ConsoleRenderer(colors=False)],
            logger_factory=structlog.stdlib.LoggerFactory(),
            wrapper_class=structlog.stdlib.BoundLogger)
        logging.basicConfig(filename=args.log, level=logging.DEBUG)
    else:
        # structlog's defaults (every level printed), to the file rather than stdout.
        structlog.configure(logger_factory=structlog.PrintLoggerFactory(
            open(args.log, "w", encoding="utf-8")))
    quiet = threading.Event()
    for _ in range(args.noise):   # after the configuration: they log through it
        threading.Thread(target=noise, args=(quiet,), daemon=True).start()
    outcome: dict[str, object] = {}
    rounds = args.restarts if args.fresh else 1
    for n in range(1, rounds + 1):
        server = nimbus_thrift.make_server(demo_thrift().Echo, PidEcho(), host="127.0.0.1",
                                           port=0, processes=2, worker_threads=4)
        server.start()
        target = fresh_round if args.fresh else conduct
        conductor = threading.Thread(target=target, args=(server, args, outcome))
        outcome["rounds"] = [*outcome.get("rounds", []), n]  # type: ignore[misc]
        conductor.start()
        server.serve_forever()
        conductor.join()
        if args.fresh and n % args.every == 0:
            print(f"{n} restarts, {len(outcome.get('failed', []))} failed, "  # type: ignore
                  f"{outcome.get('answered')} calls answered, {outcome.get('errors')} failed",
                  flush=True)
    failed = outcome.get("failed", [])
    assert isinstance(failed, list)
    print(f"total: {args.restarts} restarts, {len(failed)} failed; "
          f"calls answered {outcome.get('answered')}, failed {outcome.get('errors')}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
