"""Socket tier: the server-wide connection cap on its own (lifetime.py).

Clients of the other tests all come from 127.0.0.1, where the per-address cap fires
before the server-wide one; here each client has an address of its own (Linux routes
all of 127.0.0.0/8 to lo), so only ``max_connections`` can refuse the third.
"""

from __future__ import annotations

from support.rawthrift import call, closed_by_peer, connect, roundtrip, wait_for
from test_server import serve


def events(entries, name):
    return [e for e in entries if e["event"] == name]


def served(demo, sock, text):
    assert roundtrip(sock, call(demo.Echo, "echo", s=text), demo.Echo).body.success == text


def test_max_connections_refuses_a_new_address_when_the_server_is_full(demo, logs):
    with serve(demo, max_connections=2, max_connections_per_peer=1,
               evict_idle=False) as server:
        first = connect(server.address, source="127.0.0.1")
        second = connect(server.address, source="127.0.0.2")
        try:
            served(demo, first, "one")
            served(demo, second, "two")
            # A third address, under its own per-address cap of 1: the server is full.
            with connect(server.address, source="127.0.0.3") as third:
                assert closed_by_peer(third, wait=5.0), "the third connection was kept"
            served(demo, first, "one again")
            served(demo, second, "two again")
            metrics = server.metrics()
            assert (metrics.connections_refused, metrics.connections_refused_per_peer) \
                == (1, 0)
            lines = events(logs, "connection_refused")
            assert len(lines) == 1
            assert (lines[0]["limit_name"], lines[0]["limit"]) == ("max_connections", 2)
            assert "127.0.0.3" in lines[0]["peer"]
        finally:
            first.close()
        # The slot given back is taken by the address refused before.
        wait_for(lambda: server.metrics().connections_open == 1, what="slot back")
        try:
            with connect(server.address, source="127.0.0.3") as third:
                served(demo, third, "three")
        finally:
            second.close()
