"""Socket tier: methods the selector runs itself (rpc/inline.py) on a real server.

What a client must see: the same replies, metrics that count every call, and, when a
method that has been fast blocks, the other clients still served while it waits, the
method back on the worker pool, and a clean stop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

import nimbus_thrift
from nimbus_thrift.demo import EchoHandler
from nimbus_thrift.rpc.inline import PROOF_RUNS

from support.rawthrift import call, connect, decode, read_frame, wait_closed, wait_for


class ThreadedEcho(EchoHandler):
    """Records the thread of each call; echo(s) blocks on `gate` when s == "block"."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[str] = []
        self.gate = threading.Event()
        self.blocked = threading.Event()

    def echo(self, s: str) -> str:
        self.threads.append(threading.current_thread().name)
        if s == "block":
            self.blocked.set()
            assert self.gate.wait(10), "test never opened the gate"
        return s


def serve(demo, handler, **options):
    server = nimbus_thrift.make_server(demo.Echo, handler, port=0,
                                       **{"worker_threads": 4, **options})
    server.start()
    return server


def echo(sock, demo, s: str, seqid: int = 1) -> str:
    sock.sendall(call(demo.Echo, "echo", seqid=seqid, s=s))
    reply = decode(read_frame(sock), demo.Echo)
    assert reply.seqid == seqid
    return reply.body.success


def warm(sock, demo, calls: int = PROOF_RUNS * 4) -> None:
    """Enough fast calls for echo to prove itself (slow CI runs may reset the count
    now and then, hence the margin)."""
    for i in range(calls):
        assert echo(sock, demo, f"w{i}", seqid=i) == f"w{i}"


def test_a_fast_method_moves_from_the_workers_to_the_selector(demo):
    handler = ThreadedEcho()
    with serve(demo, handler) as server:
        with connect(server.address) as sock:
            warm(sock, demo)
            handler.threads.clear()
            for i in range(10):
                assert echo(sock, demo, f"x{i}", seqid=100 + i) == f"x{i}"
        metrics = server.metrics()
    assert set(handler.threads) == {"nimbus-selector"}
    assert metrics.requests_inline >= 10
    assert metrics.requests_completed == PROOF_RUNS * 4 + 10
    assert metrics.requests_in_flight == 0


def test_the_first_calls_run_on_workers(demo):
    handler = ThreadedEcho()
    with serve(demo, handler) as server:
        with connect(server.address) as sock:
            for i in range(PROOF_RUNS - 1):
                echo(sock, demo, "a", seqid=i)
        assert server.metrics().requests_inline == 0
    assert all(name.startswith("nimbus-worker") for name in handler.threads)


def test_inline_calls_off_keeps_every_call_on_the_pool(demo):
    handler = ThreadedEcho()
    with serve(demo, handler, inline_calls=False) as server:
        with connect(server.address) as sock:
            warm(sock, demo)
        assert server.metrics().requests_inline == 0
    assert all(name.startswith("nimbus-worker") for name in handler.threads)


def test_a_blocked_inline_call_does_not_hold_up_other_clients(demo, logs):
    handler = ThreadedEcho()
    with serve(demo, handler) as server:
        with connect(server.address) as a, connect(server.address) as b:
            warm(a, demo)
            assert server.metrics().requests_inline > 0
            a.sendall(call(demo.Echo, "echo", seqid=7, s="block"))
            assert handler.blocked.wait(5)
            # The selector thread is inside the blocked handler; another one carries on.
            started = time.monotonic()
            assert echo(b, demo, "meanwhile", seqid=8) == "meanwhile"
            assert time.monotonic() - started < 1.0
            assert server.metrics().selector_takeovers == 1
            handler.gate.set()
            reply = decode(read_frame(a), demo.Echo)
            assert (reply.seqid, reply.body.success) == (7, "block")
            # Back on the pool: the next calls run on workers until echo proves
            # itself again, and both clients are served.
            handler.threads.clear()
            assert echo(a, demo, "after", seqid=9) == "after"
            assert echo(b, demo, "after", seqid=10) == "after"
            assert all(name.startswith("nimbus-worker") for name in handler.threads)
        metrics = server.metrics()
    assert metrics.requests_in_flight == 0
    blocked = [e for e in logs if e["event"] == "inline_call_blocked"]
    assert len(blocked) == 1 and blocked[0]["method"] == "echo"
    assert any(e["event"] == "stopped" for e in logs)


def test_calls_behind_a_blocked_one_in_the_same_pass_go_to_the_pool(demo):
    """Several clients' calls read in one pass: the first blocks, the rest must be
    answered by workers while it does."""
    handler = ThreadedEcho()
    with serve(demo, handler) as server:
        socks = [connect(server.address) for _ in range(6)]
        try:
            for sock in socks:
                warm(sock, demo, PROOF_RUNS)
            wait_for(lambda: server.metrics().requests_inline > 0,
                     what="echo to go inline")
            socks[0].sendall(call(demo.Echo, "echo", seqid=1, s="block"))
            for i, sock in enumerate(socks[1:], 2):
                sock.sendall(call(demo.Echo, "echo", seqid=i, s=f"c{i}"))
            for i, sock in enumerate(socks[1:], 2):
                sock.settimeout(5)
                reply = decode(read_frame(sock), demo.Echo)
                assert (reply.seqid, reply.body.success) == (i, f"c{i}")
            handler.gate.set()
            reply = decode(read_frame(socks[0]), demo.Echo)
            assert reply.body.success == "block"
        finally:
            handler.gate.set()
            for sock in socks:
                sock.close()


def test_stop_while_an_inline_call_is_blocked(demo):
    handler = ThreadedEcho()
    server = serve(demo, handler)
    try:
        with connect(server.address) as a:
            warm(a, demo)
            a.sendall(call(demo.Echo, "echo", seqid=7, s="block"))
            assert handler.blocked.wait(5)
            wait_for(lambda: server.metrics().selector_takeovers == 1, what="takeover")
            stopper = threading.Thread(target=server.stop, kwargs={"grace": 0.3})
            stopper.start()
            time.sleep(0.5)            # past the grace: the server gives up on the call
            handler.gate.set()         # then the call ends; its thread must not hang
            stopper.join(10)
            assert not stopper.is_alive()
            # Stopped before its reply was written: the client sees the close, no reply.
            assert wait_closed(a, timeout=5) == b""
    finally:
        handler.gate.set()
        server.stop()


@pytest.mark.parametrize("clients", [16])
def test_many_clients_on_inline_calls_get_their_own_replies(demo, clients):
    handler = EchoHandler()
    with serve(demo, handler) as server:
        socks = [connect(server.address) for _ in range(clients)]
        try:
            for round_ in range(PROOF_RUNS * 3):
                for i, sock in enumerate(socks):
                    sock.sendall(call(demo.Echo, "echo", seqid=round_, s=f"{i}-{round_}"))
                for i, sock in enumerate(socks):
                    reply = decode(read_frame(sock), demo.Echo)
                    assert (reply.seqid, reply.body.success) == (round_, f"{i}-{round_}")
        finally:
            for sock in socks:
                sock.close()
        metrics = server.metrics()
    assert metrics.requests_inline > 0
    assert metrics.requests_completed == clients * PROOF_RUNS * 3


@pytest.mark.parametrize("transport, protocol", [("buffered", "binary"),
                                                 ("buffered", "compact"),
                                                 ("framed", "compact")])
def test_clients_in_other_forms_get_inline_calls_too(demo, transport, protocol):
    """thriftpy2's make_client with its defaults (buffered binary), and compact."""
    from thriftpy2.protocol import TBinaryProtocolFactory, TCompactProtocolFactory
    from thriftpy2.rpc import make_client
    from thriftpy2.transport import TBufferedTransportFactory, TFramedTransportFactory

    handler = ThreadedEcho()
    with serve(demo, handler) as server:
        host, port = server.address
        client = make_client(
            demo.Echo, host, port, timeout=5000,
            trans_factory=(TBufferedTransportFactory() if transport == "buffered"
                           else TFramedTransportFactory()),
            proto_factory=(TBinaryProtocolFactory() if protocol == "binary"
                           else TCompactProtocolFactory()))
        try:
            for i in range(PROOF_RUNS * 4):
                assert client.echo(f"m{i}") == f"m{i}"
        finally:
            client.close()
        metrics = server.metrics()
    assert metrics.requests_inline > 0
    assert "nimbus-selector" in handler.threads


class SpinningEcho(EchoHandler):
    """echo("spin") computes for 3 ms by ``clock`` (never sleeping): by default 3 ms
    of its thread's CPU time, however long the kernel keeps it off the CPU meanwhile.

    Timed by the wall clock instead, a loaded machine can take the CPU away for part
    of the 3 ms (seen: 1.3 ms of a 3.0 ms call off the CPU, at load 10 on 2 cores),
    and the call has then really computed less than SLOW_SECS: the selector rightly
    keeps the method inline (inline_call_preempted), which is not the call meant."""

    def __init__(self, clock: Callable[[], float] = time.thread_time) -> None:
        super().__init__()
        self._clock = clock

    def echo(self, s: str) -> str:
        if s == "spin":
            clock = self._clock
            until = clock() + 0.003
            while clock() < until:
                pass
        return s


def test_an_inline_call_that_computes_too_long_goes_back_to_the_pool(demo, logs):
    with serve(demo, SpinningEcho()) as server:
        with connect(server.address) as sock:
            warm(sock, demo)
            inline_before = server.metrics().requests_inline
            assert inline_before > 0
            assert echo(sock, demo, "spin", seqid=900) == "spin"
            # Back on the pool: the next calls are not inline (until proven again).
            assert echo(sock, demo, "after", seqid=901) == "after"
            assert server.metrics().requests_inline == inline_before + 1
    assert [e["method"] for e in logs if e["event"] == "method_back_to_workers"] == ["echo"]


def test_an_inline_call_slowed_by_losing_the_cpu_stays_inline(demo, logs, monkeypatch):
    # The thread's CPU clock standing still says it spent the whole pass off the CPU
    # (what a preemption by another process looks like): the same 3 ms call is then
    # not held against the method.
    monkeypatch.setattr("nimbus_thrift.rpc.inline_calls.thread_time", lambda: 0.0)
    # 3 ms of wall clock, as a call slowed by a preemption looks.
    with serve(demo, SpinningEcho(time.perf_counter)) as server:
        with connect(server.address) as sock:
            warm(sock, demo)
            inline_before = server.metrics().requests_inline
            assert echo(sock, demo, "spin", seqid=900) == "spin"
            assert echo(sock, demo, "after", seqid=901) == "after"
            assert server.metrics().requests_inline == inline_before + 2
    assert not [e for e in logs if e["event"] == "method_back_to_workers"]
    # (A warm-up call slowed by a busy machine may be logged too.)
    assert "echo" in [e["method"] for e in logs if e["event"] == "inline_call_preempted"]


def test_a_crash_in_a_selector_thread_started_by_a_takeover_is_logged(demo, logs):
    handler = ThreadedEcho()
    server = serve(demo, handler)
    try:
        with connect(server.address) as a, connect(server.address) as b:
            warm(a, demo)
            a.sendall(call(demo.Echo, "echo", seqid=7, s="block"))
            assert handler.blocked.wait(5)
            wait_for(lambda: server.metrics().selector_takeovers == 1, what="takeover")

            def broken_read(*args):
                raise RuntimeError("injected fault in the read path")

            # Fault injection: the next read, in the new selector thread, fails.
            server._selector._read = broken_read
            b.sendall(call(demo.Echo, "echo", seqid=8, s="x"))
            wait_for(lambda: any(e["event"] == "selector_crashed" for e in logs),
                     what="the crash to be logged")
            handler.gate.set()
    finally:
        handler.gate.set()
        server.stop(grace=0.5)
    crashed = [e for e in logs if e["event"] == "selector_crashed"]
    assert len(crashed) == 1 and crashed[0]["thread"] == "nimbus-selector-2"
    assert crashed[0]["exc_info"]
