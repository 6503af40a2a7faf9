#!/usr/bin/env python3
"""Figures for issue 24: what knowing a loopback client's OS user costs (rpc/localpeer.py,
one netlink sock_diag request per accepted connection), on this machine:

1. the lookup alone: ``PeerLookup.uid`` of an established loopback connection, IPv4 and
   IPv6, in microseconds per call;
2. accept to first reply, per connection: connect, one framed ``Echo.ping``, read the
   reply, close (with a reset, so no TIME_WAIT piles up), against a Thrift server
   with ``identify_local_peers`` off and on, in a child process of its own (so the
   client here does not share its GIL); and the same with one ``GET`` against the
   daemon's HTTP server (nimbus/web/httpserver.py) with a trivial application. Rounds
   alternate off and on, so drift hits both alike.

    .venv/bin/python scripts/bench/local_peers.py [--connections 1000] [--rounds 4]

Absolute figures on a shared machine: compare the columns side by side, not across days.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import socket
import statistics
import struct
import sys
import time
from pathlib import Path
from typing import Any, Callable

import structlog

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from nimbus_thrift.demo import EchoHandler, demo_thrift  # noqa: E402
from nimbus_thrift.nimbus.web.httpserver import HttpServer  # noqa: E402
from nimbus_thrift.nimbus.web.messages import Request, Response  # noqa: E402
from nimbus_thrift.rpc.codec import binary  # noqa: E402
from nimbus_thrift.rpc.localpeer import PeerLookup  # noqa: E402
from nimbus_thrift.rpc.make import make_server  # noqa: E402

_LINGER_RESET = struct.pack("ii", 1, 0)


def lookup_cost(family: int, host: str, calls: int) -> float:
    """Microseconds per PeerLookup.uid of one established connection."""
    lookup = PeerLookup()
    with socket.socket(family) as listener:
        listener.bind((host, 0))
        listener.listen()
        with socket.create_connection(listener.getsockname()[:2]):
            accepted, peer = listener.accept()
            with accepted:
                local = accepted.getsockname()
                assert lookup.uid(peer, local) is not None, "the kernel did not answer"
                start = time.perf_counter()
                for _ in range(calls):
                    lookup.uid(peer, local)
                elapsed = time.perf_counter() - start
    lookup.close()
    return elapsed / calls * 1e6


def one_connection(address: tuple[str, int], request: bytes, reply_prefix: int) -> float:
    """Seconds from connect to the whole first reply."""
    start = time.perf_counter()
    sock = socket.create_connection(address)
    try:
        sock.sendall(request)
        got = b""
        while len(got) < reply_prefix:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed before the reply")
            got += chunk
        elapsed = time.perf_counter() - start
    finally:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
        sock.close()
    return elapsed


def thrift_server(identify: bool) -> tuple[Any, tuple[str, int], bytes, int]:
    demo = demo_thrift()
    server = make_server(demo.Echo, EchoHandler(), host="127.0.0.1", port=0,
                         identify_local_peers=identify)
    address = server.start()
    msg = binary.encode_message("ping", 1, 1, demo.Echo.ping_args())
    request = struct.pack(">i", len(msg)) + msg
    reply = binary.encode_message("ping", 2, 1, demo.Echo.ping_result())
    return server, address, request, 4 + len(reply)


def http_server(identify: bool) -> tuple[Any, tuple[str, int], bytes, int]:
    body = b"ok"

    def app(request: Request) -> Response:
        return Response(200, body, [("Content-Type", "text/plain")])
    server = HttpServer(app, host="127.0.0.1", port=0, identify_local_peers=identify)
    address = server.start()
    request = (f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{address[1]}\r\n"
               "Connection: close\r\n\r\n").encode()
    return server, address, request, len(b"HTTP/1.1 200 ")


def _serve(make: Callable[[bool], tuple[Any, tuple[str, int], bytes, int]],
           identify: bool, pipe: Any) -> None:
    """The child: start the server, hand back what the client needs, stop when told."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    server, address, request, size = make(identify)
    pipe.send((address, request, size))
    pipe.recv()
    server.stop()


def measure(make: Callable[[bool], tuple[Any, tuple[str, int], bytes, int]],
            connections: int, rounds: int) -> dict[bool, list[float]]:
    times: dict[bool, list[float]] = {False: [], True: []}
    context = multiprocessing.get_context("fork")
    for round_no in range(rounds):
        for identify in ((False, True) if round_no % 2 == 0 else (True, False)):
            ours, theirs = context.Pipe()
            child = context.Process(target=_serve, args=(make, identify, theirs))
            child.start()
            address, request, size = ours.recv()
            try:
                for _ in range(20):                     # warm up
                    one_connection(address, request, size)
                times[identify] += [one_connection(address, request, size)
                                    for _ in range(connections)]
            finally:
                ours.send("stop")
                child.join(30)
    return times


def _row(name: str, times: dict[bool, list[float]]) -> str:
    def figures(values: list[float]) -> tuple[float, float]:
        values = sorted(values)
        return (statistics.median(values) * 1e6, values[int(len(values) * 0.9)] * 1e6)
    off, on = figures(times[False]), figures(times[True])
    return (f"{name:<8} {off[0]:>10.1f} {on[0]:>10.1f} {on[0] - off[0]:>+9.1f}   "
            f"{off[1]:>10.1f} {on[1]:>10.1f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=1000,
                        help="connections per round and setting")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--calls", type=int, default=20000,
                        help="lookups timed for the lookup's own cost")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    print("lookup alone (PeerLookup.uid, one established connection):")
    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        print(f"  {host:<10} {lookup_cost(family, host, args.calls):6.1f} us per lookup")
    print(f"\naccept to first reply, us per connection ({args.connections} x "
          f"{args.rounds} rounds per setting):")
    print(f"{'side':<8} {'median off':>10} {'median on':>10} {'on-off':>9}   "
          f"{'p90 off':>10} {'p90 on':>10}")
    print(_row("thrift", measure(thrift_server, args.connections, args.rounds)))
    print(_row("http", measure(http_server, args.connections, args.rounds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
