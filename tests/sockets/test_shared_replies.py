"""Real sockets: a result the handler shares (rpc/shared.py) counts once against
max_unsent_reply_bytes however many slow readers hold it, so dashboards that read a
large summary slowly are not closed for it; each still gets every byte, in order."""

from __future__ import annotations

import nimbus_thrift

from support.rawthrift import (ATTACKER, call, closed_by_peer, connect, decode, read_frame,
                               wait_for)
from support.shared_service import BoardHandler, board_thrift

#: About 700 KB of summary: bigger than the cap's share of any two readers.
NAMES = [f"topology-{i:06d}-" + "x" * 40 for i in range(12_000)]


def serve(board, handler, **options):
    server = nimbus_thrift.make_server(board.Board, handler, port=0,
                                       **{"worker_threads": 4, **options})
    server.start()
    return server


def test_slow_readers_of_one_shared_summary_hold_it_once():
    board = board_thrift()
    handler = BoardHandler(board, NAMES)
    size = len(read_whole(board, handler))
    cap = size + (size // 2)          # room for the shared body once, not for two copies
    with serve(board, handler, max_unsent_reply_bytes=cap, send_buffer_size=64 << 10,
               write_timeout=60, max_frame_size=4 << 20) as server:
        readers = [connect(server.address, source=ATTACKER, rcvbuf=4096) for _ in range(6)]
        try:
            for seqid, sock in enumerate(readers, 1):
                sock.sendall(call(board.Board, "shared", seqid=seqid))
            wait_for(lambda: server.metrics().requests_completed == len(readers),
                     what="six replies queued")
            wait_for(lambda: server.metrics().unsent_reply_bytes > size // 2,
                     what="the summary held")
            # Six slow readers, one body: far under six summaries, and nobody closed.
            assert server.metrics().unsent_reply_bytes < cap
            assert server.metrics().timeouts == 0
            assert server.metrics().connections_open == len(readers)
            for seqid, sock in enumerate(readers, 1):
                sock.settimeout(10)
                reply = decode(read_frame(sock), board.Board, "shared")
                assert reply.seqid == seqid and reply.body.success.names == NAMES
        finally:
            for sock in readers:
                sock.close()
        wait_for(lambda: server.metrics().unsent_reply_bytes == 0, what="unsent bytes back")


def test_slow_readers_of_equal_unshared_summaries_are_closed_past_the_cap():
    """The same load with a summary built per call: each reply counts whole, so the
    cap closes the oldest readers (what shared results spare a dashboard)."""
    board = board_thrift()
    handler = BoardHandler(board, NAMES)
    size = len(read_whole(board, handler))
    cap = size + (size // 2)
    with serve(board, handler, max_unsent_reply_bytes=cap, send_buffer_size=64 << 10,
               write_timeout=60, max_frame_size=4 << 20) as server:
        readers = [connect(server.address, source=ATTACKER, rcvbuf=4096) for _ in range(3)]
        try:
            for seqid, sock in enumerate(readers, 1):
                done = server.metrics().requests_completed
                sock.sendall(call(board.Board, "fresh", seqid=seqid))
                wait_for(lambda: server.metrics().requests_completed == done + 1,
                         what=f"reply {seqid} queued")
            wait_for(lambda: server.metrics().timeouts >= 1, what="the oldest reader closed")
            assert closed_by_peer(readers[0], wait=5)
        finally:
            for sock in readers:
                sock.close()


def read_whole(board, handler) -> bytes:
    """The shared reply's frame as one good client reads it."""
    with serve(board, handler) as server, connect(server.address) as sock:
        sock.sendall(call(board.Board, "shared"))
        payload = read_frame(sock)
        assert decode(payload, board.Board, "shared").body.success.names == NAMES
        return payload
