"""Socket tier: hostile and careless clients (issue 13, rows 3 to 5) against a real
server. The attacker connects from 127.0.0.2; a well-behaved client on 127.0.0.1 must
keep getting answers throughout, and every resource the attacker held (read-buffer
bytes, connection slots, unsent reply bytes) must come back while the server runs.
"""

from __future__ import annotations

import struct
import time


from nimbus_thrift.rpc.connection import GROWTH_MIN
from nimbus_thrift.rpc.errors import AppErrorCode
from nimbus_thrift.rpc.peers import FAIR_SHARE

from support.rawthrift import (ATTACKER, EXCEPTION, call, closed_by_peer, connect, decode,
                               read_frame, recv_exact, roundtrip, wait_closed, wait_for)
from test_server import GatedEcho, serve






def served(demo, sock, text="still here"):
    """One call from the well-behaved client: answered, and quickly (generous bound)."""
    started = time.monotonic()
    reply = roundtrip(sock, call(demo.Echo, "echo", s=text), demo.Echo)
    assert reply.body.success == text
    assert time.monotonic() - started < 3.0


def events(entries, name):
    return [e for e in entries if e["event"] == name]


# ----------------------------------------------------------------------- row 3: reading


def test_declared_frames_are_charged_as_bytes_arrive(demo):
    """Row 3: connections that declare 1,000,000-byte frames and send a byte (or
    nothing) hold one growth step (or nothing), not their declared size; with the old
    up-front reservation these 20 would have needed 20 MB of a 2 MB budget, parked, and
    the well-behaved client's frame with them. (Each attacker has an address of its
    own: from one address, max_read_buffer_bytes_per_peer refuses the second
    declaration; see test_one_address_cannot_declare_more_than_its_share. Its own /24,
    too: the large frames of one /24 share one share, test_server_read_budget.py.)"""
    budget = 2_000_000
    with serve(demo, max_read_buffer_bytes=budget, max_frame_size=1_000_000) as server, \
            connect(server.address) as good:
        served(demo, good)
        droppers = [connect(server.address, source=f"127.1.{i}.1") for i in range(1, 21)]
        silent = [connect(server.address, source=f"127.2.{i}.1") for i in range(1, 21)]
        try:
            for sock in droppers:
                sock.sendall(struct.pack(">i", 1_000_000) + b"\x80")
            for sock in silent:
                sock.sendall(struct.pack(">i", 1_000_000))
            # The byte that came with the length: exactly what arrived is held.
            wait_for(lambda: server.metrics().bytes_reserved == 20,
                     what="one byte per dripping attacker")
            served(demo, good)
            # The next byte finds the buffer full: it grows by one step, no more.
            for sock in droppers:
                sock.sendall(b"\x01")
            wait_for(lambda: server.metrics().bytes_reserved == 20 * GROWTH_MIN,
                     what="one growth step per dripping attacker")
            served(demo, good)
            # The silent ones hold nothing (the good client's frame is released as its
            # outcome is booked, just after the reply).
            wait_for(lambda: server.metrics().bytes_reserved == 20 * GROWTH_MIN,
                     what="only the droppers' growth held")
            metrics = server.metrics()
            assert metrics.frames_parked == 0
            assert metrics.connections_open == 41
        finally:
            for sock in droppers + silent:
                sock.close()
        wait_for(lambda: server.metrics().connections_open == 1, what="attackers gone")
        assert server.metrics().bytes_reserved == 0
        served(demo, good)


def test_slowloris_drip_is_closed_by_the_rate_rule(demo, logs):
    with serve(demo, min_frame_rate=2000, frame_rate_grace=0.3, frame_read_timeout=60,
               first_request_timeout=None) as server, connect(server.address) as good:
        drip = connect(server.address, source=ATTACKER)
        drip.sendall(call(demo.Echo, "echo", s="d" * 50_000)[:100])
        started = time.monotonic()
        closed = False
        while time.monotonic() - started < 10:
            served(demo, good)
            try:
                drip.sendall(b"d")
            except OSError:
                closed = True
                break
            if closed_by_peer(drip, wait=0.05):
                closed = True
                break
        drip.close()
        assert closed, "a 20 bytes/s drip was not closed"
        assert time.monotonic() - started >= 0.25
        wait_for(lambda: server.metrics().bytes_reserved == 0, what="drip's bytes back")
        wait_for(lambda: server.metrics().connections_open == 1, what="drip's slot back")
        assert server.metrics().timeouts == 1
        served(demo, good)
    reasons = [e["reason"] for e in events(logs, "connection_closed") if e.get("reason")]
    assert any("min_frame_rate (2000 bytes/s" in r for r in reasons), reasons


def test_first_request_deadline_closes_a_silent_connection(demo, logs):
    with serve(demo, first_request_timeout=0.3, idle_timeout=60) as server, \
            connect(server.address) as good:
        served(demo, good)
        silent = connect(server.address, source=ATTACKER)
        assert wait_closed(silent, timeout=5) == b""
        silent.close()
        wait_for(lambda: server.metrics().connections_open == 1, what="slot back")
        # The client that did call is not held to the first-request deadline.
        time.sleep(0.5)
        served(demo, good)
        assert server.metrics().timeouts == 1
    assert any("first_request_timeout (0.3s)" in e.get("reason", "")
               for e in events(logs, "connection_closed"))


def test_a_frame_waiting_too_long_for_memory_is_refused(demo, logs):
    handler = GatedEcho()
    with serve(demo, handler, max_read_buffer_bytes=100_000, park_timeout=0.3) as server, \
            connect(server.address) as hog:
        hog.sendall(call(demo.Echo, "echo_binary", data=b"block" + b"h" * 60_000))
        assert handler.entered.acquire(timeout=5)
        parked = connect(server.address, source=ATTACKER)
        parked.sendall(call(demo.Echo, "echo_binary", seqid=77, data=b"p" * 70_000))
        try:
            reply = decode(read_frame(parked))
            assert (reply.type, reply.name, reply.seqid) == (EXCEPTION, "echo_binary", 77)
            assert reply.body.type == AppErrorCode.PROTOCOL_ERROR
            assert "park_timeout (0.3s)" in reply.body.message
            assert "max_read_buffer_bytes" in reply.body.message
            assert wait_closed(parked) == b""
        finally:
            parked.close()
        metrics = server.metrics()
        assert metrics.frames_parked == 0 and metrics.frames_refused == 1
        assert metrics.timeouts == 1
        handler.gate.set()
        assert decode(read_frame(hog), demo.Echo, "echo_binary").body.success[:5] == b"block"
        wait_for(lambda: server.metrics().bytes_reserved == 0, what="memory back")
        served(demo, hog, "after the refusal")
    assert events(logs, "park_timeout")[0]["size"] > 70_000


# ----------------------------------------------------------------------- row 4: slots


def test_one_address_cannot_take_every_slot(demo, logs):
    with serve(demo, max_connections=20, max_connections_per_peer=3,
               evict_idle=False) as server:
        mine = [connect(server.address, source=ATTACKER) for _ in range(3)]
        try:
            for sock in mine:
                served(demo, sock)
            refused = [connect(server.address, source=ATTACKER) for _ in range(10)]
            for sock in refused:
                assert wait_closed(sock) == b""
                sock.close()
            # The other address still connects and is served.
            with connect(server.address) as good:
                served(demo, good)
            metrics = server.metrics()
            assert metrics.connections_refused_per_peer == 10
            assert metrics.connections_refused == 10
            # One line for the burst, not ten.
            lines = events(logs, "connection_refused")
            assert len(lines) == 1
            assert lines[0]["limit_name"] == "max_connections_per_peer"
            assert lines[0]["limit"] == 3
        finally:
            mine[0].close()
        # A slot the attacker gave back is its again.
        wait_for(lambda: server.metrics().connections_open == 2, what="slot back")
        with connect(server.address, source=ATTACKER) as again:
            served(demo, again)
        for sock in mine[1:]:
            sock.close()
        wait_for(lambda: server.metrics().connections_open == 0, what="all closed")



def test_one_address_cannot_declare_more_than_its_share(demo, logs):
    """Frames sent all but their last byte hold everything they sent. From one address
    they may declare max_read_buffer_bytes_per_peer in all; the frame past it is refused
    at its length (PROTOCOL_ERROR naming the limit), so the rest of the budget stays
    for other clients, and the share comes back when the address's frames end. (These
    frames are large, over 64 KiB: their share is the attacker's /24's, so the other
    client is in another.)"""
    with serve(demo, max_read_buffer_bytes=1_000_000, max_read_buffer_bytes_per_peer=250_000,
               max_frame_size=200_000, write_timeout=5) as server, \
            connect(server.address, source="127.0.1.1") as good:
        whole = call(demo.Echo, "echo_binary", seqid=9, data=b"a" * 150_000)
        first = connect(server.address, source=ATTACKER)
        second = connect(server.address, source=ATTACKER)
        try:
            first.sendall(whole[:-1])
            wait_for(lambda: server.metrics().bytes_reserved >= 150_000,
                     what="the first frame held")
            second.sendall(whole[:-1])
            reply = decode(read_frame(second))
            assert (reply.type, reply.name, reply.seqid) == (EXCEPTION, "echo_binary", 9)
            assert reply.body.type == AppErrorCode.PROTOCOL_ERROR
            assert "max_read_buffer_bytes_per_peer" in reply.body.message
            assert f"already declare {len(whole) - 4} bytes" in reply.body.message
            assert wait_closed(second) == b""
            # Another /24 is not affected: a frame as large goes through at once.
            reply = roundtrip(good, call(demo.Echo, "echo_binary", data=b"g" * 150_000),
                              demo.Echo)
            assert reply.body.success == b"g" * 150_000
            assert server.metrics().frames_refused == 1
        finally:
            first.close()
            second.close()
        wait_for(lambda: server.metrics().connections_open == 1, what="attackers gone")
        # The address's share is back: the same frame is now served.
        with connect(server.address, source=ATTACKER) as again:
            assert roundtrip(again, whole, demo.Echo).body.success == b"a" * 150_000
    refused = events(logs, "frame_refused")
    assert refused and refused[0]["peer"].startswith(ATTACKER), refused


# ----------------------------------------------------------------------- fair queue


def test_an_address_with_a_backlog_does_not_delay_others_behind_it(demo):
    """One worker, held; an attacker queues 20 requests on 20 connections, then the
    well-behaved client sends one. Requests of an address with few in the pool go
    ahead of a busy address's backlog: the good call runs after at most FAIR_SHARE of
    the attacker's, not after all 20."""
    handler = GatedEcho()
    with serve(demo, handler, worker_threads=1) as server, connect(server.address) as good:
        hog = connect(server.address, source=ATTACKER)
        flood = [connect(server.address, source=ATTACKER) for _ in range(20)]
        try:
            hog.sendall(call(demo.Echo, "echo_binary", data=b"block"))
            assert handler.entered.acquire(timeout=5)
            for i, sock in enumerate(flood):
                sock.sendall(call(demo.Echo, "echo_binary", data=b"atk-%04d" % i))
            wait_for(lambda: server.metrics().queue_depth == 20, what="flood queued")
            good.sendall(call(demo.Echo, "echo_binary", data=b"goodcall"))
            wait_for(lambda: server.metrics().queue_depth == 21, what="good queued")
            handler.gate.set()
            assert decode(read_frame(good), demo.Echo, "echo_binary").body.success \
                == b"goodcall"
            for sock in [hog, *flood]:
                read_frame(sock)
        finally:
            handler.gate.set()
            for sock in [hog, *flood]:
                sock.close()
    position = handler.order.index(b"goodcall")
    # The hog's blocked call is the address's first request in the pool; 7 more of its
    # requests went into the lane ahead before the good one came.
    assert position == FAIR_SHARE, handler.order
    assert len(handler.order) == 22


# ----------------------------------------------------------------------- row 5: writing


def test_client_not_reading_a_large_reply_is_closed_at_the_write_deadline(demo):
    """The reply does not fit the socket: the rest waits in the process, counted in
    unsent_reply_bytes, until write_timeout closes the connection."""
    with serve(demo, write_timeout=0.5, max_frame_size=8 << 20) as server, \
            connect(server.address) as good:
        lazy = connect(server.address, source=ATTACKER, rcvbuf=4096)
        lazy.sendall(call(demo.Echo, "echo_binary", data=b"r" * (4 << 20)))
        wait_for(lambda: server.metrics().unsent_reply_bytes > 0, what="reply queued")
        served(demo, good)
        wait_for(lambda: server.metrics().connections_open == 1, what="lazy reader closed")
        lazy.close()
        metrics = server.metrics()
        assert metrics.unsent_reply_bytes == 0
        assert metrics.timeouts == 1
        served(demo, good)


def test_reply_left_unread_in_the_kernel_is_closed_at_the_write_deadline(demo, logs):
    """The reply fit the socket's send buffer, so the server handed all of it over; the
    client never reads it. Quiet for write_timeout with bytes still queued: closed."""
    with serve(demo, write_timeout=0.4, idle_timeout=60, send_buffer_size=1 << 20) \
            as server, connect(server.address) as good:
        lazy = connect(server.address, source=ATTACKER, rcvbuf=4096)
        lazy.sendall(call(demo.Echo, "echo_binary", data=b"k" * 200_000))
        wait_for(lambda: server.metrics().requests_completed == 1, what="reply handed over")
        assert server.metrics().unsent_reply_bytes == 0   # all in the kernel
        served(demo, good)
        wait_for(lambda: server.metrics().connections_open == 1, what="lazy reader closed")
        lazy.close()
        # The well-behaved client, quiet for longer than write_timeout after its reply,
        # took all of it: it stays.
        time.sleep(1.0)
        served(demo, good)
        assert server.metrics().timeouts == 1
    reasons = [e.get("reason", "") for e in events(logs, "connection_closed")]
    assert any("still in the send queue" in r for r in reasons), reasons


def test_unsent_reply_bytes_are_capped_oldest_reader_closed_first(demo):
    cap = 3 << 20
    with serve(demo, max_unsent_reply_bytes=cap, send_buffer_size=64 << 10,
               write_timeout=60, max_frame_size=4 << 20) as server, \
            connect(server.address) as good:
        lazies = []
        try:
            for i in range(3):
                sock = connect(server.address, source=ATTACKER, rcvbuf=4096)
                lazies.append(sock)
                done = server.metrics().requests_completed
                sock.sendall(call(demo.Echo, "echo_binary", data=bytes([65 + i]) * (2 << 20)))
                wait_for(lambda: server.metrics().requests_completed == done + 1,
                         what=f"reply {i} queued")
                served(demo, good)
                assert server.metrics().unsent_reply_bytes <= cap + (2 << 20)
            # Each new slow reader pushed the total past the cap: the oldest went.
            assert closed_by_peer(lazies[0], wait=5)
            assert closed_by_peer(lazies[1], wait=5)
            wait_for(lambda: server.metrics().connections_open == 2, what="two evicted")
            assert server.metrics().timeouts == 2
            # The newest reader still gets its whole reply when it finally reads.
            lazies[2].settimeout(10)
            reply = decode(read_frame(lazies[2]), demo.Echo, "echo_binary")
            assert reply.body.success == b"C" * (2 << 20)
        finally:
            for sock in lazies:
                sock.close()
        wait_for(lambda: server.metrics().unsent_reply_bytes == 0, what="unsent bytes back")
        wait_for(lambda: server.metrics().connections_open == 1, what="slots back")
        served(demo, good)


def test_send_buffer_size_is_applied_to_accepted_sockets(demo):
    """SO_SNDBUF bounds what the kernel queues for one client that does not read."""
    with serve(demo, send_buffer_size=64 << 10, write_timeout=60,
               max_frame_size=4 << 20) as server:
        with connect(server.address, source=ATTACKER, rcvbuf=4096) as lazy:
            lazy.sendall(call(demo.Echo, "echo_binary", data=b"s" * (2 << 20)))
            wait_for(lambda: server.metrics().unsent_reply_bytes > 0, what="queued")
            # The whole 2 MiB reply is held in the process: the kernel took at most its
            # send buffer (Linux doubles it) plus the client's small window.
            assert server.metrics().unsent_reply_bytes >= 2 << 20
            lazy.settimeout(10)
            size = struct.unpack(">i", recv_exact(lazy, 4))[0]
            assert len(recv_exact(lazy, size)) == size
        wait_for(lambda: server.metrics().unsent_reply_bytes == 0, what="drained")
