#!/usr/bin/env python3
"""Figures for issue 17 (every client form on one port), on this machine:

1. codec cost per call: decoding Echo.echo's args and encoding its result, binary (C,
   _wire.c) against compact (Python, rpc/codec/compact.py), and a larger struct;
2. what detection costs framed binary: Dispatcher.dispatch and Connection.received on a
   framed binary echo, this checkout against another tree (``--baseline DIR``, e.g. a
   ``git archive HEAD nimbus_thrift | tar -x -C DIR`` with the built .so files copied
   in), each in its own process;
3. closed-loop round trips per second on one connection for each form (raw sockets,
   requests encoded once), against a server started here with default options, and
   against thriftpy2's threaded server (Cython codecs where it has them) on the forms it
   serves: framed and buffered, binary and compact (it has no THeader).

    .venv/bin/python scripts/bench/protocol_forms.py [--seconds 2] [--baseline DIR]

Absolute figures on a shared machine: compare runs side by side, not across days.
"""

from __future__ import annotations

import argparse
import json
import logging
import socket
import struct
import subprocess
import sys
import time
import timeit
from pathlib import Path

import structlog

ROOT = Path(__file__).resolve().parent.parent.parent

HOT_PATH = r"""
import json, sys, timeit, struct
sys.path.insert(0, sys.argv[1])
import structlog, logging
structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
from nimbus_thrift.demo import EchoHandler, demo_thrift
from nimbus_thrift.rpc import binary
from nimbus_thrift.rpc.dispatch import Dispatcher
from nimbus_thrift.rpc.connection import Connection, Event
from nimbus_thrift.rpc.memory import MemoryBudget
d = demo_thrift()
disp = Dispatcher((d.Echo, EchoHandler()))
msg = binary.encode_message("echo", 1, 1, d.Echo.echo_args(s="hello"))
frame = struct.pack(">i", len(msg)) + msg
budget = MemoryBudget(1 << 30)
conn = Connection("p", budget, 1 << 24)
conn.received(frame); conn.answered()          # the first frame fixes the form
def recv():
    conn.received(frame)
    conn.answered()
n = 200_000
out = {}
for name, fn in (("dispatch", lambda: disp.dispatch(msg, "peer")), ("received", recv)):
    best = min(timeit.repeat(fn, number=n, repeat=5))
    out[name] = best / n * 1e9
print(json.dumps(out))
"""


def codec_figures() -> dict[str, float]:
    from nimbus_thrift.demo import demo_thrift
    from nimbus_thrift.nimbus import nimbus_idl
    from nimbus_thrift.rpc.codec import binary, compact
    d = demo_thrift()
    n = nimbus_idl()
    args = d.Echo.echo_args(s="hello")
    result = d.Echo.echo_result(success="hello")
    summary = n.ClusterSummary(
        supervisors=[n.SupervisorSummary(host=f"h{i}", uptime_secs=i, num_workers=4,
                                         num_used_workers=1, supervisor_id=f"s{i}")
                     for i in range(20)],
        nimbus_uptime_secs=5, topologies=[], nimbuses=[])
    cases = {
        "echo_args": (d.Echo.echo_args, args),
        "echo_result": (d.Echo.echo_result, result),
        "ClusterSummary(20 supervisors)": (n.ClusterSummary, summary),
    }
    out: dict[str, float] = {}
    for label, (cls, obj) in cases.items():
        b = binary.encode_message("m", 1, 1, obj)
        c = compact.encode_message("m", 1, 1, obj)
        bh, ch = binary.read_message_header(b), compact.read_message_header(c)
        for proto, data, head, decode, encode in (
                ("binary", b, bh, binary.struct_reader(cls),
                 lambda: binary.encode_message("m", 2, 1, obj)),
                ("compact", c, ch, compact.struct_reader(cls),
                 lambda: compact.encode_message("m", 2, 1, obj))):
            number = 20_000
            t = min(timeit.repeat(lambda: decode(data, head.end, len(data), 1 << 30),
                                  number=number, repeat=5))
            out[f"decode {label} {proto} us"] = t / number * 1e6
            t = min(timeit.repeat(encode, number=number, repeat=5))
            out[f"encode {label} {proto} us"] = t / number * 1e6
    return out


def hot_path(tree: Path) -> dict[str, float]:
    proc = subprocess.run([sys.executable, "-c", HOT_PATH, str(tree)], capture_output=True,
                          text=True, check=True, cwd="/")
    result: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _thriftpy2_server(d, trans: str, proto: str) -> tuple[object, tuple[str, int]]:
    import threading
    from thriftpy2.protocol import TCompactProtocolFactory, TCyBinaryProtocolFactory
    from thriftpy2.rpc import make_server
    from thriftpy2.transport import TCyBufferedTransportFactory, TCyFramedTransportFactory
    from nimbus_thrift.demo import EchoHandler
    with socket.socket() as probe:        # a free port (thriftpy2 cannot report port 0's)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = make_server(d.Echo, EchoHandler(), "127.0.0.1", port,
                         proto_factory=TCompactProtocolFactory() if proto == "compact"
                         else TCyBinaryProtocolFactory(),
                         trans_factory=TCyFramedTransportFactory() if trans == "framed"
                         else TCyBufferedTransportFactory(), client_timeout=60_000)
    threading.Thread(target=server.serve, daemon=True).start()
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port)).close()
            break
        except OSError:
            time.sleep(0.05)
    return server, ("127.0.0.1", port)


def _closed_loop(address: tuple[str, int], request: bytes, transport: str, protocol: str,
                 seconds: float) -> float:
    from nimbus_thrift.rpc.codec.unframed import Scanner
    try:
        from nimbus_thrift.rpc.codec._compact import scan_message as fast_scan
    except ImportError:
        fast_scan = None  # type: ignore[assignment]
    with socket.create_connection(address) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        calls = 0
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            sock.sendall(request)
            data = b""
            if transport == "framed":
                while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
                    data += sock.recv(65536)
            elif fast_scan is not None:     # the server's C scan: the client's cost low
                while True:
                    data += sock.recv(65536)
                    if fast_scan(data, protocol == "compact", 1 << 20) > 0:
                        break
            else:
                scan = Scanner(protocol, 1 << 20)
                while True:
                    data += sock.recv(65536)
                    if scan.feed(data, len(data)) is not None:
                        break
            calls += 1
    return calls / seconds


def round_trips(seconds: float) -> dict[str, float]:
    import nimbus_thrift
    from nimbus_thrift.demo import EchoHandler, demo_thrift
    from nimbus_thrift.rpc.codec import binary, compact, header
    d = demo_thrift()
    args = d.Echo.echo_args(s="hello")
    forms = {
        "framed binary": (lambda m: struct.pack(">I", len(m)) + m, binary, "framed"),
        "framed compact": (lambda m: struct.pack(">I", len(m)) + m, compact, "framed"),
        "unframed binary": (lambda m: m, binary, "unframed"),
        "unframed compact": (lambda m: m, compact, "unframed"),
        "header binary": (lambda m: header.encode(m, 0, 0, 1), binary, "framed"),
        "header compact": (lambda m: header.encode(m, 2, 0, 1), compact, "framed"),
    }
    out: dict[str, float] = {}
    server = nimbus_thrift.make_server(d.Echo, EchoHandler(), port=0, worker_threads=4)
    with server:
        for label, (wrap, codec, transport) in forms.items():
            protocol = "compact" if codec is compact else "binary"
            request = wrap(codec.encode_message("echo", 1, 1, args))
            out[f"{label} calls/s, ours"] = _closed_loop(server.address, request, transport,
                                                        protocol, seconds)
            if label.startswith("header"):
                continue
            peer, address = _thriftpy2_server(d, transport, protocol)
            try:
                out[f"{label} calls/s, thriftpy2 threaded"] = _closed_loop(
                    address, request, transport, protocol, seconds)
            finally:
                peer.close()    # type: ignore[attr-defined]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--baseline", type=Path, default=None,
                        help="a tree holding another nimbus_thrift to compare the hot path with")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    for key, value in codec_figures().items():
        print(f"{key:55} {value:8.2f}")
    for name, tree in (("this tree", ROOT), ("baseline", args.baseline)):
        if tree is None:
            continue
        figures = hot_path(tree)
        print(f"framed binary hot path, {name}: dispatch {figures['dispatch']:.0f} ns, "
              f"Connection.received+answered {figures['received']:.0f} ns")
    for key, value in round_trips(args.seconds).items():
        print(f"{key:55} {value:8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
