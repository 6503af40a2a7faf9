"""Socket tier: a full server makes room by closing the oldest idle connection
(rpc/peers.py, eviction_choice) instead of refusing new ones until idle_timeout; and
the connection limits are fitted to the process's open-files limit (issue 27, item 2).
The attacker connects from 127.0.0.2+, the good client from 127.0.0.1.
"""

from __future__ import annotations

import resource

from support.rawthrift import (ATTACKER, call, closed_by_peer, connect, roundtrip,
                               wait_closed, wait_for)
from test_server import GatedEcho, events, serve


def served(demo, sock, text="still here"):
    return roundtrip(sock, call(demo.Echo, "echo", s=text), demo.Echo).body.success == text


def test_an_address_at_its_share_loses_its_own_oldest_idle_connection(demo, logs):
    with serve(demo, max_connections=20, max_connections_per_peer=3) as server, \
            connect(server.address) as good:
        assert served(demo, good)
        idle = [connect(server.address, source=ATTACKER) for _ in range(3)]
        wait_for(lambda: server.metrics().connections_open == 4, what="accepted")
        newest = connect(server.address, source=ATTACKER)
        try:
            # The first idle one made room; the new one is served; the good client's
            # connection (another address) was never a candidate.
            assert wait_closed(idle[0]) == b""
            assert served(demo, newest)
            assert not closed_by_peer(idle[1]) and not closed_by_peer(idle[2])
            assert served(demo, good)
            assert server.metrics().connections_refused == 0
            line, = events(logs, "connection_evicted")
            assert line["limit_name"] == "max_connections_per_peer" and line["limit"] == 3
        finally:
            for sock in idle + [newest]:
                sock.close()
        wait_for(lambda: server.metrics().connections_open == 1, what="slots back")


def test_a_full_server_takes_room_from_the_address_holding_the_most(demo):
    with serve(demo, max_connections=6, max_connections_per_peer=4) as server, \
            connect(server.address) as good:
        assert served(demo, good)
        second = connect(server.address, source="127.0.0.3")
        assert served(demo, second)
        heavy = [connect(server.address, source=ATTACKER) for _ in range(4)]
        wait_for(lambda: server.metrics().connections_open == 6, what="full")
        # The good client's connection is the oldest idle one of all, but it is not
        # from the address holding four.
        with connect(server.address, source="127.0.0.4") as newcomer:
            assert wait_closed(heavy[0]) == b""
            assert served(demo, newcomer)
            assert served(demo, good) and served(demo, second)
        second.close()
        for sock in heavy:
            sock.close()


def test_connections_in_a_call_are_never_evicted(demo):
    handler = GatedEcho()
    with serve(demo, handler, max_connections=2, max_connections_per_peer=2) as server:
        busy = [connect(server.address, source=ATTACKER) for _ in range(2)]
        try:
            for sock in busy:
                sock.sendall(call(demo.Echo, "echo_binary", data=b"block"))
            for _ in busy:
                assert handler.entered.acquire(timeout=5)
            # Nothing idle to close: the new connection is refused, as before.
            with connect(server.address) as late:
                assert wait_closed(late) == b""
            assert server.metrics().connections_refused == 1
        finally:
            handler.gate.set()
            for sock in busy:
                sock.close()


def test_max_connections_is_fitted_to_the_open_files_limit(demo, logs):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    open_files = 300
    resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, hard))
    try:
        server = serve(demo, reserved_descriptors=100)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    with server:
        assert server.options.max_connections == 200
        assert server.options.per_peer_limit == 64      # never under PER_PEER_FLOOR
        assert server.configured.max_connections == 4096
        line, = events(logs, "listening")
        assert line["max_connections"] == 200 and line["max_connections_configured"] == 4096
        assert line["open_files_limit"] == open_files
        assert line["reserved_descriptors"] == 100
