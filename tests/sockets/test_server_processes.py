"""Socket tier: make_server(processes=2) with real forked children on one port.

The handler answers ``echo("pid")`` with the pid of the child that ran it, so a test
sees which child served each call. Every wait polls with a deadline.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import nimbus_thrift
from nimbus_thrift.demo import EchoHandler
from nimbus_thrift.rpc.options import ServerOptions
from nimbus_thrift.rpc.multiprocess.processes import ProcessServer

from support.rawthrift import call, connect, roundtrip, wait_for

class PidEcho(EchoHandler):
    def echo(self, s: str) -> str:
        return str(os.getpid()) if s == "pid" else s


def serve(demo, handler: EchoHandler | None = None, **options) -> ProcessServer:
    server = nimbus_thrift.make_server(demo.Echo, handler or PidEcho(), port=0,
                                       **{"processes": 2, "worker_threads": 4, **options})
    assert isinstance(server, ProcessServer)
    server.start()
    return server


def pid_of_call(demo, address) -> int:
    """One call on a fresh connection: the pid of the child that answered."""
    with connect(address) as sock:
        return int(roundtrip(sock, call(demo.Echo, "echo", s="pid"), demo.Echo).body.success)


def gone(pid: int) -> bool:
    """No such process (reaped, not a zombie: a zombie still answers kill(pid, 0))."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def exited(pid: int) -> bool:
    """Not running: gone, or a zombie waiting for whoever adopted it to reap it."""
    try:
        return "State:\tZ" in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True


def test_two_children_share_the_connections_and_the_metrics_are_summed(demo):
    server = serve(demo, max_read_buffer_bytes=4000)
    try:
        children = server.children()
        assert len(children) == 2 and os.getpid() not in children
        seen: dict[int, int] = {}
        socks = []
        try:
            # Kept open, as RPC clients keep them: the parent hands them out in turn,
            # so they are spread evenly whatever the timing.
            for _ in range(20):
                sock = connect(server.address)
                socks.append(sock)
                pid = int(roundtrip(sock, call(demo.Echo, "echo", s="pid"),
                                    demo.Echo).body.success)
                seen[pid] = seen.get(pid, 0) + 1
            assert set(seen) == set(children)
            assert sorted(seen.values()) == [10, 10]
            wait_for(lambda: server.metrics().requests_completed == len(socks),
                     what="both children's completed calls in the sum")
            m = server.metrics()
            assert m.connections_open == len(socks)
            assert m.connections_accepted == len(socks)
            # Each child has half of the read budget; the sum is the whole.
            assert m.read_buffer_budget == 4000
        finally:
            for sock in socks:
                sock.close()
    finally:
        server.stop(grace=5.0)


def test_a_killed_child_is_restarted_and_calls_go_on(demo, logs):
    server = serve(demo)
    try:
        victim, survivor = server.children()
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda: len(server.children()) == 2 and victim not in server.children(),
                 what="a new child in the killed one's place")
        replacement = (set(server.children()) - {survivor}).pop()
        assert gone(victim)
        exits = [e for e in logs if e["event"] == "child_exited"]
        assert [(e["pid"], e["status"]) for e in exits] == [(victim, "killed by SIGKILL")]
        # Calls on new connections are answered, by the children alive now.
        answered = {pid_of_call(demo, server.address) for _ in range(20)}
        assert answered <= {survivor, replacement}
    finally:
        server.stop(grace=5.0)


def test_stop_ends_every_child_and_finishes_the_call_in_flight(demo):
    server = serve(demo)
    children = server.children()
    reply: dict[str, object] = {}
    sock = connect(server.address)

    def slow_call():
        reply["r"] = roundtrip(sock, call(demo.Echo, "sleep", millis=300), demo.Echo)

    caller = threading.Thread(target=slow_call)
    caller.start()
    try:
        wait_for(lambda: server.metrics().requests_in_flight == 1, what="the call in flight")
        server.stop(grace=5.0)
        caller.join(5.0)
        assert reply["r"].body.success == 300     # answered, though stop came first
        for pid in children:
            assert gone(pid), f"child {pid} outlived stop()"
        assert server.children() == []
        with pytest.raises(OSError):
            connect(server.address, timeout=1.0)
    finally:
        sock.close()
        server.stop(grace=0.0)


def test_sighup_restarts_every_child_without_losing_a_call(demo):
    """serve_forever in the main thread takes SIGHUP; clients call all along, each call
    on a connection of its own (a kept connection is closed between calls by the old
    child's drain, as at any stop)."""
    server = nimbus_thrift.make_server(demo.Echo, PidEcho(), port=0, processes=2,
                                       worker_threads=4)
    assert isinstance(server, ProcessServer)
    results: list[int] = []
    errors: list[BaseException] = []
    done = threading.Event()
    before: list[int] = []
    after: list[int] = []

    def client():
        while not done.is_set():
            try:
                results.append(pid_of_call(demo, server.address))
            except BaseException as exc:  # noqa: BLE001 - the test counts every failure
                errors.append(exc)

    def conductor():
        try:
            wait_for(lambda: len(server.children()) == 2, timeout=30, what="children")
            clients = [threading.Thread(target=client) for _ in range(4)]
            for t in clients:
                t.start()
            wait_for(lambda: len(results) >= 50, timeout=30, what="calls before SIGHUP")
            before.extend(server.children())
            os.kill(os.getpid(), signal.SIGHUP)
            wait_for(lambda: len(server.children()) == 2
                     and not set(server.children()) & set(before),
                     timeout=30, what="both children replaced")
            after.extend(server.children())
            mark = len(results)
            wait_for(lambda: len(results) >= mark + 50, timeout=30, what="calls after")
            done.set()
            for t in clients:
                t.join(10)
        finally:
            done.set()
            server.stop(grace=5.0)

    thread = threading.Thread(target=conductor)
    thread.start()
    server.serve_forever()
    thread.join(30)
    assert errors == []
    assert len(after) == 2 and not set(after) & set(before)
    # Calls were answered by the old children and by the new ones.
    assert set(before) & set(results) and set(after) & set(results)
    for pid in before + after:
        assert gone(pid)


def test_metrics_keep_a_restarted_childs_counts(demo):
    server = serve(demo)
    try:
        calls = 30
        for _ in range(calls):
            pid_of_call(demo, server.address)
        wait_for(lambda: server.metrics().requests_completed == calls, what="the calls counted")
        old = server.children()
        server.reload()
        wait_for(lambda: len(server.children()) == 2 and not set(server.children()) & set(old),
                 what="the rolling restart")
        # The stopped children's cumulative counters stay in the sum.
        wait_for(lambda: server.metrics().requests_completed == calls,
                 what="the old children's counts kept")
        assert server.metrics().connections_open == 0
    finally:
        server.stop(grace=5.0)


def test_a_child_that_cannot_start_fails_start_and_leaves_no_process(logs):
    def factory(listener: socket.socket, options, address):
        raise RuntimeError("handler cannot start")

    server = ProcessServer(factory, "127.0.0.1", 0, ServerOptions(), 2)
    with pytest.raises(RuntimeError, match="child 1 of 2 did not start"):
        server.start()
    assert server.children() == []
    failed = [e["pid"] for e in logs if e["event"] == "child_not_ready"]
    assert len(failed) == 1
    # Reaped by the parent: not even a zombie is left.
    assert gone(failed[0])
    assert [e["status"] for e in logs if e["event"] == "child_stopped"] == ["exit status 1"]


# ----------------------------------------------------------------------- the demo CLI

CLI = [str(Path(sys.executable).with_name("nimbus-thrift"))]


class DemoProcess:
    """`nimbus-thrift demo --processes 2` in a process of its own, its JSON log lines
    collected by a thread as they come."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(CLI + ["demo", "--port", "0", "--log-format", "json",
                                            "--workers", "2", *args],
                                     stderr=subprocess.PIPE, text=True)
        self.events: list[dict] = []
        self.port: int | None = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        wait_for(lambda: self.port is not None or self.proc.poll() is not None, timeout=30,
                 what="the demo's banner")
        assert self.port is not None, f"demo exited (rc={self.proc.returncode})"

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            if line.startswith("{"):
                self.events.append(json.loads(line))
            match = re.search(r"on 127\.0\.0\.1:(\d+)", line)
            if match and not line.startswith("{"):
                self.port = int(match.group(1))

    def named(self, event: str) -> list[dict]:
        return [e for e in list(self.events) if e.get("event") == event]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self._reader.join(10)
        if self.proc.stderr is not None:
            self.proc.stderr.close()


def test_demo_processes_reload_on_sighup_and_die_with_their_parent(demo):
    server = DemoProcess("--processes", "2")
    try:
        first = {e["pid"] for e in server.named("child_started")}
        assert len(first) == 2
        for _ in range(10):
            with connect(("127.0.0.1", server.port)) as sock:
                assert roundtrip(sock, call(demo.Echo, "echo", s="cli"),
                                 demo.Echo).body.success == "cli"
        server.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: server.named("reload_done"), timeout=30, what="the rolling restart")
        started = [e["pid"] for e in server.named("child_started")]
        second = set(started[2:])
        assert len(second) == 2 and not second & first
        for pid in first:
            wait_for(lambda: gone(pid), what=f"old child {pid} reaped")
        # The parent dies without a word: its children see their control channel
        # close and stop, instead of serving on unsupervised.
        server.proc.kill()
        server.proc.wait(10)
        for pid in second:
            wait_for(lambda: exited(pid), timeout=20, what=f"child {pid} to exit after its parent")
    finally:
        server.close()


def test_demo_processes_stop_gracefully_on_sigterm(demo):
    server = DemoProcess("--processes", "2")
    try:
        children = {e["pid"] for e in server.named("child_started")}
        assert len(children) == 2
        with connect(("127.0.0.1", server.port)) as sock:
            assert roundtrip(sock, call(demo.Echo, "echo", s="x"), demo.Echo).body.success == "x"
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(30) == 0
        server._reader.join(10)
        # Each child drained and stopped, and the parent reaped them before it exited.
        assert {e["pid"] for e in server.named("child_stopped")} == children
        assert all(e["status"] == "exit status 0" for e in server.named("child_stopped"))
        assert not server.named("child_exited")
        for pid in children:
            assert gone(pid)
    finally:
        server.close()


# ----------------------------------------------------------------------- per-method figures


def outcomes(server: ProcessServer) -> dict[str, dict[str, int]]:
    return {name: fig.outcomes for name, fig in server.method_metrics().items()}


def test_method_metrics_are_summed_over_the_children_and_survive_a_reload(demo):
    server = serve(demo, method_metrics=True)
    try:
        children = server.children()
        seen: set[int] = set()
        socks = []
        try:
            # Kept connections go to the children in turn: both serve calls.
            for _ in range(6):
                sock = connect(server.address)
                socks.append(sock)
                seen.add(int(roundtrip(sock, call(demo.Echo, "echo", s="pid"),
                                       demo.Echo).body.success))
                roundtrip(sock, call(demo.Echo, "fail", kind="declared"), demo.Echo)
            roundtrip(socks[0], call(demo.Echo, "fail", kind="boom"), demo.Echo)
            roundtrip(socks[1], call(demo.Echo, "ping"), demo.Echo)
        finally:
            for sock in socks:
                sock.close()
        assert seen == set(children)
        expected = {"echo": {"ok": 6, "declared": 0, "failed": 0},
                    "fail": {"ok": 0, "declared": 6, "failed": 1},
                    "ping": {"ok": 1, "declared": 0, "failed": 0}}
        wait_for(lambda: outcomes(server) == expected, what="both children's calls summed")
        before = server.method_metrics()
        assert sum(before["echo"].bucket_counts) == 6
        assert before["fail"].seconds_sum > 0

        # Two calls the parent has not read yet: only the old children's last words
        # can carry them over the restart.
        for _ in range(2):
            pid_of_call(demo, server.address)
        server.reload()
        readings = []

        def replaced() -> bool:
            readings.append(outcomes(server)["echo"]["ok"])
            return len(server.children()) == 2 and not set(server.children()) & set(children)

        wait_for(replaced, timeout=30, what="the rolling restart")
        # Read all along the restart: never below the calls made, never going down.
        assert readings[0] >= 6 and readings == sorted(readings), readings
        wait_for(lambda: outcomes(server)["echo"]["ok"] == 8, what="the last words kept")
        after = server.method_metrics()
        assert after["fail"] == before["fail"] and after["ping"] == before["ping"]
        assert sum(after["echo"].bucket_counts) == 8
        # The new children add to them, and stop() keeps their last words too.
        pid = pid_of_call(demo, server.address)
        assert pid in server.children()
        server.stop(grace=5.0)
        assert outcomes(server)["echo"]["ok"] == 9
    finally:
        server.stop(grace=5.0)


def test_method_metrics_keep_a_killed_childs_last_answer(demo):
    server = serve(demo, method_metrics=True)
    try:
        socks = [connect(server.address) for _ in range(4)]
        try:
            pids = {int(roundtrip(s, call(demo.Echo, "echo", s="pid"),
                                  demo.Echo).body.success) for s in socks}
        finally:
            for sock in socks:
                sock.close()
        assert pids == set(server.children())
        wait_for(lambda: outcomes(server).get("echo", {}).get("ok") == 4,
                 what="the calls counted")
        victim = server.children()[0]
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda: len(server.children()) == 2 and victim not in server.children(),
                 what="a new child in the killed one's place")
        # The killed child said nothing more, but what it had answered stays.
        assert outcomes(server)["echo"]["ok"] == 4
    finally:
        server.stop(grace=5.0)


def test_method_metrics_are_empty_unless_asked(demo):
    server = serve(demo)
    try:
        pid_of_call(demo, server.address)
        wait_for(lambda: server.metrics().requests_completed == 1, what="the call")
        assert server.method_metrics() == {}
    finally:
        server.stop(grace=5.0)
