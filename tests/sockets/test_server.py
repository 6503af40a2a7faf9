"""Socket tier: the server on a real socket, driven by raw frames.

Each test starts its own server (port 0) with the limits it exercises, and checks the
client's view, the server's counters and, where it matters, the log lines.
"""

from __future__ import annotations

import resource
import socket
import struct
import threading
import time

import pytest

import nimbus_thrift
from nimbus_thrift.demo import CalculatorHandler, EchoHandler
from nimbus_thrift.rpc.errors import AppErrorCode

from support.rawthrift import (CALL, EXCEPTION, ONEWAY, REPLY, call, closed_by_peer, connect,
                               decode, frame, message, read_frame, roundtrip, wait_closed,
                               wait_for)


class GatedEcho(EchoHandler):
    """echo_binary blocks while its payload starts with b"block" until `gate` opens,
    so a test can hold a frame's memory (or a worker) for as long as it needs."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.entered = threading.Semaphore(0)
        self.order: list[bytes] = []

    def echo_binary(self, data: bytes) -> bytes:
        self.order.append(data[:8])
        if data.startswith(b"block"):
            self.entered.release()
            assert self.gate.wait(10), "test never opened the gate"
        return data




def serve(demo, handler=None, **options):
    server = nimbus_thrift.make_server(demo.Echo, handler or EchoHandler(), port=0,
                                       **{"worker_threads": 4, **options})
    server.start()
    return server


def events(entries, name):
    return [e for e in entries if e["event"] == name]


# ----------------------------------------------------------------------- wire


def test_echo_strict_and_old_headers_get_strict_replies(demo):
    with serve(demo) as server:
        with connect(server.address) as sock:
            for seqid, strict in ((11, True), (12, False)):
                sock.sendall(call(demo.Echo, "echo", seqid=seqid, strict=strict, s="héllo"))
                payload = read_frame(sock)
                # strict header: version word 0x80010002 (REPLY)
                assert payload[:4] == b"\x80\x01\x00\x02"
                reply = decode(payload, demo.Echo)
                assert (reply.name, reply.type, reply.seqid) == ("echo", REPLY, seqid)
                assert reply.body.success == "héllo"


def test_strict_read_refuses_old_headers(demo, logs):
    with serve(demo, strict_read=True) as server:
        with connect(server.address) as sock:
            sock.sendall(call(demo.Echo, "echo", strict=False, s="x"))
            assert wait_closed(sock) == b""
    assert events(logs, "not_thrift_binary")


def test_oneway_gets_no_reply_and_connection_goes_on(demo, echo_handler):
    with serve(demo, echo_handler) as server:
        with connect(server.address) as sock:
            sock.sendall(call(demo.Echo, "notify", seqid=1, mtype=ONEWAY, event="e1"))
            reply = roundtrip(sock, call(demo.Echo, "events", seqid=2), demo.Echo)
            # the first frame back answers seqid 2: nothing was written for the oneway
            assert reply.seqid == 2 and reply.body.success == ["e1"]
            # Both frames' bytes came back with the connection still open (closing it
            # releases everything, so a test after the close could not tell).
            wait_for(lambda: server.metrics().bytes_reserved == 0, what="bytes released")


def test_pipelined_frames_are_answered_in_order(demo):
    with serve(demo) as server:
        with connect(server.address) as sock:
            sock.sendall(b"".join(call(demo.Echo, "echo", seqid=i, s=f"m{i}") for i in range(5)))
            replies = [decode(read_frame(sock), demo.Echo) for _ in range(5)]
            assert [(r.seqid, r.body.success) for r in replies] == \
                [(i, f"m{i}") for i in range(5)]
        wait_for(lambda: server.metrics().bytes_reserved == 0, what="memory released")


def test_large_frames_round_trip_byte_for_byte(demo):
    blob = bytes(range(256)) * 4096 * 4   # 4 MiB
    with serve(demo) as server:
        with connect(server.address) as sock:
            reply = roundtrip(sock, call(demo.Echo, "echo_binary", data=blob), demo.Echo)
            assert reply.body.success == blob
        wait_for(lambda: server.metrics().bytes_reserved == 0, what="memory released")


NO_TIMERS = {"idle_timeout": None, "frame_read_timeout": None, "write_timeout": None}


def test_no_wakeup_is_lost_when_the_selector_sleeps_without_timers(demo, echo_handler):
    """With no timers the selector sleeps until an event or a worker wakes it, so a lost
    wake-up hangs a call here (the client gives up after 5 s) instead of hiding as a
    stall. The mix covers the races between a worker writing its reply and the client's
    next frame arriving first: plain calls, oneway calls (no reply at all), pipelined
    frames (already read, so no event will come), and a large reply."""
    with serve(demo, echo_handler, **NO_TIMERS) as server:
        with connect(server.address, timeout=5) as sock:
            for i in range(1500):
                assert roundtrip(sock, call(demo.Echo, "echo", seqid=i, s=str(i)),
                                 demo.Echo).body.success == str(i)
            for i in range(200):
                sock.sendall(call(demo.Echo, "notify", mtype=ONEWAY, event=str(i)))
                assert roundtrip(sock, call(demo.Echo, "ping", seqid=i), demo.Echo).seqid == i
            for i in range(100):
                sock.sendall(call(demo.Echo, "ping", seqid=1) + call(demo.Echo, "ping", seqid=2))
                assert [decode(read_frame(sock), demo.Echo).seqid for _ in range(2)] == [1, 2]
            blob = b"x" * (3 << 20)
            for _ in range(5):
                assert roundtrip(sock, call(demo.Echo, "echo_binary", data=blob),
                                 demo.Echo).body.success == blob
        assert len(echo_handler.events()) == 200


# ----------------------------------------------------------------------- errors


@pytest.mark.parametrize("name,mtype,code", [
    ("nope", CALL, AppErrorCode.UNKNOWN_METHOD),
    ("echo", REPLY, AppErrorCode.INVALID_MESSAGE_TYPE),
    ("echo", EXCEPTION, AppErrorCode.INVALID_MESSAGE_TYPE),
])
def test_request_errors_keep_the_connection(demo, name, mtype, code):
    with serve(demo) as server:
        with connect(server.address) as sock:
            args = demo.Echo.echo_args(s="x")
            reply = roundtrip(sock, frame(message(name, 77, args, mtype)))
            assert (reply.type, reply.seqid, reply.body.type) == (EXCEPTION, 77, code)
            assert roundtrip(sock, call(demo.Echo, "echo", s="after"),
                             demo.Echo).body.success == "after"


def test_undecodable_args_are_protocol_error(demo):
    with serve(demo) as server:
        with connect(server.address) as sock:
            head = message("echo", 5, demo.Echo.ping_args())[:-1]   # header only
            bad = head + b"\x0b\x00\x01" + struct.pack(">i", 2**31 - 1) + b"abc\x00"
            reply = roundtrip(sock, frame(bad))
            assert reply.type == EXCEPTION and reply.seqid == 5
            assert reply.body.type == AppErrorCode.PROTOCOL_ERROR
            assert "2147483647" in reply.body.message
            assert roundtrip(sock, call(demo.Echo, "ping"), demo.Echo).type == REPLY


def test_undeclared_exception_is_internal_error_and_logged_with_context(demo, logs):
    with serve(demo) as server:
        with connect(server.address) as sock:
            reply = roundtrip(sock, call(demo.Echo, "fail", seqid=9, kind="boom"), demo.Echo)
            assert reply.body.type == AppErrorCode.INTERNAL_ERROR
            assert "RuntimeError" in reply.body.message
            reply = roundtrip(sock, call(demo.Echo, "fail", seqid=10, kind="declared"),
                              demo.Echo)
            assert reply.type == REPLY and reply.body.err.code == 42
            peer = "%s:%d" % sock.getsockname()[:2]
    failed = events(logs, "handler_failed")
    assert len(failed) == 1
    assert (failed[0]["peer"], failed[0]["method"], failed[0]["seqid"]) == ("" + peer, "fail", 9)
    assert server.metrics().requests_failed == 1


def test_handler_returning_the_wrong_type_is_internal_error(demo):
    class Bad(EchoHandler):
        def echo(self, s):
            return 12345      # not a string

    with serve(demo, Bad()) as server:
        with connect(server.address) as sock:
            reply = roundtrip(sock, call(demo.Echo, "echo", s="x"), demo.Echo)
            assert reply.body.type == AppErrorCode.INTERNAL_ERROR
            assert "does not match the IDL" in reply.body.message


def test_handler_raising_systemexit_does_not_kill_the_server(demo):
    class Exits(EchoHandler):
        def ping(self):
            raise SystemExit(3)

    with serve(demo, Exits(), worker_threads=1) as server:
        with connect(server.address) as sock:
            for _ in range(3):   # one worker: it must survive every time
                reply = roundtrip(sock, call(demo.Echo, "ping"), demo.Echo)
                assert reply.body.type == AppErrorCode.INTERNAL_ERROR
            assert roundtrip(sock, call(demo.Echo, "echo", s="ok"), demo.Echo).body.success == "ok"


@pytest.mark.parametrize("data,detected", [
    (b"POST /thrift HTTP/1.1\r\nHost: x\r\n\r\n", "HTTP"),
    (b"GET / HTTP/1.0\r\n\r\n", "HTTP"),
    (bytes.fromhex("16030100a5010000a10303") + b"\0" * 40, "TLS"),
    (struct.pack(">i", -5), "negative frame length"),
])
def test_bytes_that_are_not_framed_thrift_get_one_log_line_and_a_close(demo, logs, data,
                                                                       detected):
    # (Unframed binary is served now: tests/sockets/test_server_forms.py.)
    with serve(demo) as server:
        with connect(server.address) as sock:
            sock.sendall(data)
            assert wait_closed(sock) == b""
            peer = "%s:%d" % sock.getsockname()[:2]
        with connect(server.address) as sock:   # everyone else carries on
            assert roundtrip(sock, call(demo.Echo, "ping"), demo.Echo).type == REPLY
        wait_for(lambda: server.metrics().connections_open == 0, what="close")
        assert server.metrics().bytes_reserved == 0
    lines = events(logs, "not_framed_thrift")
    assert len(lines) == 1 and lines[0]["peer"] == peer
    assert detected in lines[0]["detected"]


# ----------------------------------------------------------------------- memory


def test_oversized_frame_is_refused_before_allocation_with_size_and_limit(demo, logs):
    with serve(demo, max_frame_size=4096) as server:
        with connect(server.address) as sock:
            payload = message("echo_binary", 31, demo.Echo.echo_binary_args(data=b"z" * 9000))
            sock.sendall(frame(payload)[:200])      # the length and the message header
            reply = decode(read_frame(sock))
            assert (reply.type, reply.name, reply.seqid) == (EXCEPTION, "echo_binary", 31)
            assert reply.body.type == AppErrorCode.PROTOCOL_ERROR
            assert str(len(payload)) in reply.body.message and "4096" in reply.body.message
            assert wait_closed(sock) == b""
        metrics = server.metrics()
        assert metrics.frames_refused == 1
        assert metrics.bytes_reserved_peak < 4096   # the 9 KB frame was never buffered
    line = events(logs, "frame_refused")[0]
    assert (line["size"], line["limit"], line["method"]) == (len(payload), 4096, "echo_binary")


def test_frame_larger_than_the_whole_budget_is_refused(demo):
    with serve(demo, max_read_buffer_bytes=10_000) as server:
        with connect(server.address) as sock:
            sock.sendall(struct.pack(">i", 50_000) + b"\x80\x01\x00\x01")
            reply = decode(read_frame(sock))
            assert reply.body.type == AppErrorCode.PROTOCOL_ERROR
            assert "50000" in reply.body.message and "max_read_buffer_bytes" in reply.body.message


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def test_parked_frames_do_not_spin_and_are_admitted_in_arrival_order(demo):
    handler = GatedEcho()
    budget = 100_000
    with serve(demo, handler, max_read_buffer_bytes=budget) as server:
        # Three addresses: one address's frames may not declare more than the budget
        # between them (max_read_buffer_bytes_per_peer), and A's and B's would.
        a, b, c = (connect(server.address, source=f"127.0.0.{i}") for i in (1, 3, 4))
        try:
            a.sendall(call(demo.Echo, "echo_binary", data=b"block" + b"a" * 60_000))
            assert handler.entered.acquire(timeout=5)
            # B needs 50 KB: fits the budget, not what is free now -> parked.
            b.sendall(call(demo.Echo, "echo_binary", data=b"bbbbbbbb" + b"b" * 50_000))
            wait_for(lambda: server.metrics().frames_parked == 1, what="B parked")
            # C would fit in what is free, but must wait behind B.
            c.sendall(call(demo.Echo, "echo_binary", data=b"cccccccc" + b"c" * 1_000))
            wait_for(lambda: server.metrics().frames_parked == 2, what="C parked behind B")

            # A selector spinning on the parked sockets would burn about a core: ~1 s of
            # CPU in this 1 s. Half of that leaves a loaded machine room (a parked server
            # uses almost none) and still fails on a spin.
            before = _cpu_seconds()
            time.sleep(1.0)
            spent = _cpu_seconds() - before
            assert spent < 0.5, f"server burnt {spent:.2f}s of CPU in 1s while parked"
            assert server.metrics().frames_parked == 2

            handler.gate.set()
            for sock, first in ((a, b"block"), (b, b"bbbbbbbb"), (c, b"cccccccc")):
                reply = decode(read_frame(sock), demo.Echo, "echo_binary")
                assert reply.body.success.startswith(first)
            assert handler.order[1:] == [b"bbbbbbbb", b"cccccccc"]
        finally:
            for sock in (a, b, c):
                sock.close()
        wait_for(lambda: server.metrics().bytes_reserved == 0, what="memory released")
        assert server.metrics().bytes_reserved_peak <= budget


class TestEveryPathReleasesMemory:
    """The read-buffer counter returns to zero on every path a request can take."""

    def test_reply_written(self, demo):
        with serve(demo) as server:
            with connect(server.address) as sock:
                roundtrip(sock, call(demo.Echo, "echo", s="x" * 10_000), demo.Echo)
                wait_for(lambda: server.metrics().bytes_reserved == 0)
                assert server.metrics().bytes_reserved_peak >= 10_000

    def test_handler_error(self, demo):
        with serve(demo) as server:
            with connect(server.address) as sock:
                reply = roundtrip(sock, call(demo.Echo, "fail", kind="x" * 5000), demo.Echo)
                assert reply.body.type == AppErrorCode.INTERNAL_ERROR
                wait_for(lambda: server.metrics().bytes_reserved == 0)

    def test_client_gone_mid_frame(self, demo):
        with serve(demo) as server:
            with connect(server.address) as sock:
                sock.sendall(call(demo.Echo, "echo", s="y" * 50_000)[:20_000])
                wait_for(lambda: server.metrics().bytes_reserved > 0, what="frame reserved")
            wait_for(lambda: server.metrics().connections_open == 0, what="close")
            assert server.metrics().bytes_reserved == 0

    def test_client_gone_mid_call(self, demo):
        handler = GatedEcho()
        with serve(demo, handler) as server:
            with connect(server.address) as sock:
                sock.sendall(call(demo.Echo, "echo_binary", data=b"block" + b"q" * 20_000))
                assert handler.entered.acquire(timeout=5)
                assert server.metrics().bytes_reserved > 20_000
            handler.gate.set()
            wait_for(lambda: server.metrics().connections_open == 0, what="close")
            wait_for(lambda: server.metrics().bytes_reserved == 0, what="release")
            assert server.metrics().requests_completed == 1

    def test_parked_client_gone(self, demo):
        handler = GatedEcho()
        with serve(demo, handler, max_read_buffer_bytes=50_000) as server:
            a, b = connect(server.address), connect(server.address, source="127.0.0.3")
            a.sendall(call(demo.Echo, "echo_binary", data=b"block" + b"a" * 40_000))
            assert handler.entered.acquire(timeout=5)
            # More than the 10 KB free arrives, so B's buffer must grow: it parks.
            b.sendall(call(demo.Echo, "echo_binary", data=b"b" * 30_000)[:15_000])
            wait_for(lambda: server.metrics().frames_parked == 1, what="parked")
            assert server.metrics().bytes_reserved == 50_000
            b.close()
            handler.gate.set()
            read_frame(a)
            a.close()
            wait_for(lambda: server.metrics().connections_open == 0, what="close")
            assert server.metrics().bytes_reserved == 0

    def test_server_stop_mid_call(self, demo):
        handler = GatedEcho()
        server = serve(demo, handler)
        sock = connect(server.address)
        try:
            sock.sendall(call(demo.Echo, "echo_binary", data=b"block" + b"s" * 30_000))
            assert handler.entered.acquire(timeout=5)
            server.stop(grace=0.2)     # the handler is still blocked: grace runs out
            assert server.metrics().bytes_reserved == 0
            assert server.metrics().connections_open == 0
        finally:
            handler.gate.set()
            sock.close()


# ----------------------------------------------------------------------- pool


def test_full_queue_gets_overloaded_reply_and_connection_stays_usable(demo, logs):
    handler = GatedEcho()
    with serve(demo, handler, worker_threads=1, worker_queue_size=1) as server:
        busy, queued, refused = (connect(server.address) for _ in range(3))
        try:
            busy.sendall(call(demo.Echo, "echo_binary", data=b"block1"))
            assert handler.entered.acquire(timeout=5)
            queued.sendall(call(demo.Echo, "echo_binary", data=b"queued"))
            wait_for(lambda: server.metrics().queue_depth == 1, what="queue full")
            reply = roundtrip(refused, call(demo.Echo, "echo", seqid=3, s="x"), demo.Echo)
            assert (reply.type, reply.seqid) == (EXCEPTION, 3)
            assert reply.body.type == AppErrorCode.INTERNAL_ERROR
            assert "overloaded" in reply.body.message
            handler.gate.set()
            assert decode(read_frame(busy), demo.Echo, "echo_binary").body.success == b"block1"
            assert decode(read_frame(queued), demo.Echo,
                          "echo_binary").body.success == b"queued"
            assert roundtrip(refused, call(demo.Echo, "echo", seqid=4, s="again"),
                             demo.Echo).body.success == "again"
            # Every frame's bytes came back, the overloaded one's included, with all
            # three connections still open.
            wait_for(lambda: server.metrics().bytes_reserved == 0, what="bytes released")
        finally:
            for sock in (busy, queued, refused):
                sock.close()
        assert server.metrics().requests_overloaded == 1
    assert events(logs, "overloaded")[0]["queue_size"] == 1


def test_slow_handlers_do_not_block_other_workers(demo):
    handler = GatedEcho()
    with serve(demo, handler, worker_threads=2) as server:
        with connect(server.address) as slow, connect(server.address) as fast:
            slow.sendall(call(demo.Echo, "echo_binary", data=b"block"))
            assert handler.entered.acquire(timeout=5)
            assert roundtrip(fast, call(demo.Echo, "echo", s="quick"),
                             demo.Echo).body.success == "quick"
            handler.gate.set()
            assert read_frame(slow)


# ----------------------------------------------------------------------- timeouts and caps


def test_idle_timeout_closes_quiet_connections(demo, logs):
    with serve(demo, idle_timeout=0.3) as server:
        with connect(server.address) as sock:
            roundtrip(sock, call(demo.Echo, "ping"), demo.Echo)
            started = time.monotonic()
            assert wait_closed(sock, timeout=5) == b""
            assert time.monotonic() - started >= 0.25
        assert server.metrics().timeouts == 1
    assert "idle" in events(logs, "connection_closed")[0]["reason"]


def test_frame_read_timeout_frees_a_trickled_frame(demo):
    """A trickle does not reset the frame's clock: the client keeps sending a byte every
    0.05 s for up to ten times the timeout, and is closed once the frame is older than
    the timeout (a clock reset by each byte would never close it)."""
    timeout = 0.3
    with serve(demo, frame_read_timeout=timeout, idle_timeout=60, min_frame_rate=None,
               first_request_timeout=None) as server:
        with connect(server.address) as sock:
            sock.sendall(call(demo.Echo, "echo", s="t" * 100_000)[:1000])
            started = time.monotonic()
            wait_for(lambda: server.metrics().bytes_reserved > 0, what="reserved")
            closed = False
            while time.monotonic() - started < 10 * timeout:
                try:
                    sock.sendall(b"t")
                except OSError:
                    closed = True
                    break
                if closed_by_peer(sock, wait=0.05):
                    closed = True
                    break
            elapsed = time.monotonic() - started
            assert closed, f"still open after trickling for {elapsed:.1f}s"
            assert elapsed >= timeout * 0.9
            # The server is still up: the memory came back and a new client is served.
            wait_for(lambda: server.metrics().bytes_reserved == 0, what="release")
            with connect(server.address) as again:
                assert roundtrip(again, call(demo.Echo, "echo", s="ok"),
                                 demo.Echo).body.success == "ok"
        assert server.metrics().timeouts == 1


def test_max_connections(demo, logs):
    # Refusing is the rule with eviction off (test_connection_eviction.py: on).
    with serve(demo, max_connections=2, evict_idle=False) as server:
        a, b = connect(server.address), connect(server.address)
        try:
            roundtrip(a, call(demo.Echo, "ping"), demo.Echo)
            roundtrip(b, call(demo.Echo, "ping"), demo.Echo)
            with connect(server.address) as c:
                assert wait_closed(c) == b""
            assert roundtrip(a, call(demo.Echo, "echo", s="a"), demo.Echo).body.success == "a"
            assert server.metrics().connections_refused == 1
        finally:
            a.close()
            b.close()
    assert events(logs, "connection_refused")


# ----------------------------------------------------------------------- stop, metrics


def test_graceful_stop_delivers_in_flight_replies(demo):
    handler = GatedEcho()
    server = serve(demo, handler)
    with connect(server.address) as busy, connect(server.address) as idle:
        roundtrip(idle, call(demo.Echo, "ping"), demo.Echo)
        busy.sendall(call(demo.Echo, "echo_binary", seqid=8, data=b"block-inflight"))
        assert handler.entered.acquire(timeout=5)
        stopper = threading.Thread(target=server.stop, kwargs={"grace": 5.0})
        stopper.start()
        assert wait_closed(idle) == b""          # idle connections close at once
        with pytest.raises(OSError):             # and nothing new is accepted
            socket.create_connection(server.address, timeout=1).recv(1)
        handler.gate.set()
        reply = decode(read_frame(busy), demo.Echo, "echo_binary")
        assert (reply.seqid, reply.body.success) == (8, b"block-inflight")
        stopper.join(5)
        assert not stopper.is_alive()
    assert server.metrics().connections_open == 0


def _refused(address) -> bool:
    try:
        socket.create_connection(address, timeout=1).close()
    except OSError:
        return True
    return False


def test_a_request_partly_sent_before_stop_is_answered_then_closed(demo):
    server = serve(demo)
    with connect(server.address) as late, connect(server.address) as idle:
        roundtrip(idle, call(demo.Echo, "ping"), demo.Echo)
        request = call(demo.Echo, "echo", seqid=5, s="late")
        late.sendall(request[:6])              # the length and part of the message
        stopper = threading.Thread(target=server.stop, kwargs={"grace": 5.0})
        stopper.start()
        wait_for(lambda: _refused(server.address), what="the drain to begin")
        assert wait_closed(idle) == b""          # nothing on its way: closed at once
        late.sendall(request[6:])
        reply = decode(read_frame(late), demo.Echo, "echo")
        assert (reply.seqid, reply.body.success) == (5, "late")
        assert wait_closed(late) == b""          # then closed, as after an in-flight call
        stopper.join(5)
        assert not stopper.is_alive()
    assert server.metrics().connections_open == 0


def test_requests_sent_just_before_stop_are_answered(demo):
    # A client that connected and sent its request as the server began to stop: still
    # in the listen backlog, accepted but unread, or already read. Each must get its
    # reply before the close, not a reset. Repeated, as which of the three it is depends
    # on where the selector was.
    for round_ in range(20):
        server = serve(demo)
        clients = [connect(server.address) for _ in range(4)]
        try:
            for i, sock in enumerate(clients):
                sock.sendall(call(demo.Echo, "echo", seqid=i, s=f"r{round_}c{i}"))
            server.stop(grace=5.0)
            for i, sock in enumerate(clients):
                reply = decode(read_frame(sock), demo.Echo, "echo")
                assert (reply.seqid, reply.body.success) == (i, f"r{round_}c{i}")
                assert wait_closed(sock) == b""
        finally:
            for sock in clients:
                sock.close()


def test_requests_not_started_at_stop_are_dropped_not_run(demo):
    handler = GatedEcho()
    server = serve(demo, handler, worker_threads=1)
    busy, queued = connect(server.address), connect(server.address)
    try:
        busy.sendall(call(demo.Echo, "echo_binary", data=b"block-running"))
        assert handler.entered.acquire(timeout=5)
        queued.sendall(call(demo.Echo, "echo_binary", data=b"queued-never-runs"))
        wait_for(lambda: server.metrics().queue_depth == 1, what="queued")
        server.stop(grace=0.2)          # the running handler outlives the grace period
        assert wait_closed(queued) == b""
        handler.gate.set()
        assert wait_closed(busy) == b""  # its reply was too late: the socket just closes
        assert handler.order == [b"block-ru"]
        assert server.metrics().bytes_reserved == 0
    finally:
        handler.gate.set()
        busy.close()
        queued.close()


def test_metrics_count_requests(demo):
    with serve(demo) as server:
        with connect(server.address) as sock:
            for i in range(10):
                roundtrip(sock, call(demo.Echo, "echo", seqid=i, s="m"), demo.Echo)
            roundtrip(sock, call(demo.Echo, "fail", kind="x"), demo.Echo)
            sock.sendall(call(demo.Echo, "notify", mtype=ONEWAY, event="e"))
            roundtrip(sock, call(demo.Echo, "ping"), demo.Echo)
            # The worker books its outcome just after the reply leaves: allow it a moment.
            wait_for(lambda: server.metrics().requests_completed == 13, what="booking")
            m = server.metrics()
            assert (m.connections_open, m.requests_completed, m.requests_failed,
                    m.requests_in_flight, m.queue_depth) == (1, 13, 1, 0, 0)


def test_multiplexed_and_default_services_on_one_port(demo):
    handler = EchoHandler()
    server = nimbus_thrift.make_server(
        demo.Echo, handler, port=0, worker_threads=2,
        services={"Echo": (demo.Echo, handler), "Calculator": (demo.Calculator,
                                                                CalculatorHandler())})
    with server:
        with connect(server.address) as sock:
            reply = roundtrip(sock, call(demo.Calculator, "add", name="Calculator:add",
                                         a=2, b=40), demo.Calculator, "add")
            assert (reply.name, reply.body.success) == ("add", 42)
            reply = roundtrip(sock, call(demo.Echo, "echo", name="Echo:echo", s="m"),
                              demo.Echo, "echo")
            assert reply.body.success == "m"
            reply = roundtrip(sock, call(demo.Echo, "echo", name="Nope:echo", s="m"))
            assert reply.body.type == AppErrorCode.UNKNOWN_METHOD
            assert "Nope" in reply.body.message
            assert roundtrip(sock, call(demo.Echo, "echo", s="plain"),
                             demo.Echo).body.success == "plain"


def test_make_server_rejects_unknown_options(demo):
    with pytest.raises(nimbus_thrift.OptionError, match="worker_thread"):
        nimbus_thrift.make_server(demo.Echo, EchoHandler(), worker_thread=3)


def test_a_reply_written_in_several_parts_releases_its_frame(demo):
    # 4 MiB cannot go out in one send (the socket buffers are far smaller), so the
    # reply takes the selector's partial-write path; the frame's bytes must still come
    # back with the connection open.
    payload = bytes(range(256)) * (4 << 12)
    with serve(demo) as server:
        with connect(server.address, rcvbuf=64 << 10) as sock:
            sock.sendall(call(demo.Echo, "echo_binary", seqid=1, data=payload))
            reply = decode(read_frame(sock), demo.Echo, "echo_binary")
            assert reply.body.success == payload
            wait_for(lambda: server.metrics().bytes_reserved == 0, what="bytes released")
            assert roundtrip(sock, call(demo.Echo, "echo", seqid=2, s="next"),
                             demo.Echo).body.success == "next"


# ----------------------------------------------------------------------- per-method figures


@pytest.mark.parametrize("inline_calls", [True, False])
def test_method_metrics_count_real_calls_inline_or_on_workers(demo, inline_calls):
    with serve(demo, method_metrics=True, inline_calls=inline_calls) as server:
        assert server.method_metrics() == {}
        with connect(server.address) as sock:
            # Enough calls for echo to be promoted to the selector (rpc/inline.py).
            for seqid in range(40):
                sock.sendall(call(demo.Echo, "echo", seqid=seqid, s="x"))
                assert decode(read_frame(sock), demo.Echo).body.success == "x"
            sock.sendall(call(demo.Echo, "fail", seqid=99, kind="declared"))
            read_frame(sock)
        # The outcome is booked after the reply is written: wait for it.
        wait_for(lambda: server.method_metrics().get("fail") is not None, what="fail booked")
        figures = server.method_metrics()
        assert figures["echo"].outcomes == {"ok": 40, "declared": 0, "failed": 0}
        assert sum(figures["echo"].bucket_counts) == 40
        assert figures["fail"].outcomes["declared"] == 1
        if inline_calls:
            assert server.metrics().requests_inline > 0


def test_method_metrics_are_off_unless_asked(demo):
    with serve(demo) as server:
        with connect(server.address) as sock:
            assert roundtrip(sock, call(demo.Echo, "echo", s="x"), demo.Echo).body.success == "x"
        assert server.method_metrics() == {}
