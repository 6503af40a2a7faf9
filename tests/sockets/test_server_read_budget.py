"""Socket tier: issue 27's nearly complete frames. Five loopback addresses (127.0.0.2 to
.6) each send 1 MiB frames all but 16 bytes, then nothing; a good client on 127.0.0.1
must be answered while they hold what they can, and everything they held must come
back once the progress rule (frame_progress_timeout) closes them. Before the fix the
frames filled the budget and a good client's 1 KB call waited a median 9 s."""

from __future__ import annotations

import socket
import struct
import threading

from nimbus_thrift.rpc.memory import SMALL_RESERVE_SHARE

from support.rawthrift import connect, wait_for
from test_server import serve
from test_server_abuse import served

MIB = 1 << 20
BUDGET = 8 * MIB
ATTACKERS = [f"127.0.0.{i}" for i in range(2, 7)]


def attack(address, frames_per_address: int) -> list[socket.socket]:
    """Each attacker address opens connections and sends a 1 MiB frame less 16 bytes
    on each (in threads: a parked frame's bytes wait in the kernel, its sender blocks)."""
    socks = [connect(address, timeout=30, source=host)
             for host in ATTACKERS for _ in range(frames_per_address)]

    def send(sock: socket.socket) -> None:
        try:
            sock.sendall(struct.pack(">i", MIB) + b"a" * (MIB - 16))
        except OSError:
            pass    # closed by the server: what the test waits for

    for sock in socks:
        threading.Thread(target=send, args=(sock,), daemon=True).start()
    return socks


def test_a_good_call_is_answered_while_nearly_complete_frames_fill_their_room(demo):
    """The share of one party is lifted here (max_read_buffer_bytes_per_peer = the
    budget), so the attack fills all the large frames may hold and parks the rest: the
    good client's calls are read from the room kept for small frames."""
    with serve(demo, max_read_buffer_bytes=BUDGET, max_frame_size=2 * MIB,
               max_read_buffer_bytes_per_peer=BUDGET, frame_progress_timeout=3.0,
               park_timeout=60) as server, connect(server.address) as good:
        served(demo, good)
        socks = attack(server.address, 2)     # 10 frames of 1 MiB, 7 MiB of room
        try:
            # A frame parks when its next growth (at most half its 1 MiB) does not fit:
            # from then on the large frames hold within 512 KiB of their room.
            large_room = BUDGET - BUDGET // SMALL_RESERVE_SHARE
            wait_for(lambda: server.metrics().frames_parked >= 1
                     and server.metrics().bytes_reserved > large_room - MIB // 2,
                     timeout=10, what="the large frames' room full, frames parked")
            for n in range(20):
                served(demo, good, text=f"call {n}")
            # No byte for frame_progress_timeout: each stalled frame is closed, the
            # parked ones admitted and closed in turn; everything comes back.
            wait_for(lambda: server.metrics().connections_open == 1, timeout=30,
                     what="every stalled frame closed")
            assert server.metrics().bytes_reserved == 0
            served(demo, good)
        finally:
            for sock in socks:
                sock.close()


def test_five_addresses_of_one_slash_24_get_one_share_of_large_frames(demo):
    """With the default share (a quarter of the budget: 2 MiB here), the five addresses
    together hold two 1 MiB frames, not ten; the others are refused at their length.
    The good client shares their /24 and is answered: small frames count per address."""
    with serve(demo, max_read_buffer_bytes=BUDGET, max_frame_size=2 * MIB,
               frame_progress_timeout=3.0) as server, connect(server.address) as good:
        assert server.options.peer_read_share == 2 * MIB
        served(demo, good)
        socks = attack(server.address, 2)
        try:
            wait_for(lambda: server.metrics().frames_refused == 8, timeout=10,
                     what="eight of the ten frames refused")
            assert server.metrics().bytes_reserved <= 2 * MIB
            for n in range(5):
                served(demo, good, text=f"call {n}")
            wait_for(lambda: server.metrics().connections_open == 1, timeout=30,
                     what="the two admitted frames closed by the progress rule")
            assert server.metrics().bytes_reserved == 0
        finally:
            for sock in socks:
                sock.close()


def test_the_progress_rule_alone_closes_a_stalled_frame(demo):
    """frame_progress_timeout with every other deadline off: the sweep still runs (the
    selector slept without a timeout when no other deadline was set, and a stalled
    frame held its bytes for ever)."""
    with serve(demo, frame_progress_timeout=1.0, idle_timeout=None,
               frame_read_timeout=None, write_timeout=None, first_request_timeout=None,
               park_timeout=None, min_frame_rate=None) as server, \
            connect(server.address) as stalled:
        stalled.sendall(struct.pack(">i", 4096) + b"a" * 100)
        wait_for(lambda: server.metrics().bytes_reserved > 0, timeout=10,
                 what="the partial frame read")
        wait_for(lambda: server.metrics().connections_open == 0, timeout=10,
                 what="the stalled frame closed by the progress rule alone")
        assert server.metrics().bytes_reserved == 0
