"""Issue 27, item 2: one address takes every file descriptor. 1,010 idle connections
from 127.0.0.2 to a daemon whose open-files limit is the usual 1,024 (soft and hard:
nothing to raise), while a client on 127.0.0.1 calls getClusterInfo over TCP and
another over the Unix socket, each on one connection opened before the attack, a
third opens a new connection per call, and a fourth uploads a small file (the daemon
must open one) on a connection opened before. Before: accept() failed with EMFILE and every
one of them timed out. Prints each client's median and worst latency, the daemon's RSS
and descriptors, and what its start line said was in force.

    .venv/bin/python scripts/abuse/idle_descriptors.py [--tree DIR] [--connections 1010]
        [--soft 1024] [--hard 1024] [--seconds 10]
"""

from __future__ import annotations

import socket
import sys
import tempfile
import time
from pathlib import Path

from abuse_common import ATTACKER, REPO, parser
from tree_daemon import Timed, TreeDaemon

sys.path.insert(0, str(REPO))
from nimbus_thrift.client import NimbusClient  # noqa: E402


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--connections", type=int, default=1010)
    p.add_argument("--soft", type=int, default=1024)
    p.add_argument("--hard", type=int, default=1024)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        daemon = TreeDaemon(args.tree, Path(tmp), open_files=(args.soft, args.hard))
        started = daemon.event("nimbus_started")
        unix = started.get("unix_socket")
        tcp = NimbusClient("127.0.0.1", daemon.port, timeout=10, connect_attempts=1)
        local = NimbusClient(unix_socket=unix, timeout=10, connect_attempts=1)
        uploader = NimbusClient("127.0.0.1", daemon.port, timeout=10, connect_attempts=1)

        def upload() -> None:
            location = uploader.call("beginFileUpload")
            uploader.call("uploadChunk", location, b"x" * 1000)
            uploader.call("finishFileUpload", location)

        def fresh() -> None:
            with NimbusClient("127.0.0.1", daemon.port, timeout=10,
                              connect_attempts=1) as client:
                client.call("getClusterInfo")

        probes = {"tcp": Timed(lambda: tcp.call("getClusterInfo")),
                  "unix": Timed(lambda: local.call("getClusterInfo")),
                  "new connection per call": Timed(fresh, pause=0.2),
                  "upload": Timed(upload, pause=0.5)}
        attack: list[socket.socket] = []
        try:
            tcp.call("getClusterInfo")
            local.call("getClusterInfo")
            uploader.call("getClusterInfo")
            before = peak = daemon.rss_mib()
            fds_peak = daemon.open_files()
            for probe in probes.values():
                probe.start()
            refused = 0
            for i in range(args.connections):
                try:
                    attack.append(socket.create_connection(
                        ("127.0.0.1", daemon.port), timeout=5, source_address=(ATTACKER, 0)))
                except OSError:
                    refused += 1
                if i % 50 == 0:
                    peak = max(peak, daemon.rss_mib())
                    fds_peak = max(fds_peak, daemon.open_files())
            end = time.monotonic() + args.seconds
            while time.monotonic() < end:
                peak = max(peak, daemon.rss_mib())
                fds_peak = max(fds_peak, daemon.open_files())
                time.sleep(0.25)
            for probe in probes.values():
                probe.stop.set()
            for probe in probes.values():
                probe.join(30)
        finally:
            for sock in attack:
                sock.close()
            tcp.close()
            local.close()
            uploader.close()
            daemon.stop()
        in_force = {k: started.get(k, "-") for k in
                    ("open_files_limit", "max_connections", "max_connections_per_peer")}
        print(f"idle descriptors: {args.connections} idle connections from {ATTACKER} "
              f"({refused} failed to connect), limit {args.soft}/{args.hard}; in force "
              f"{in_force}; daemon RSS {before:.0f} -> peak {peak:.0f} MiB, descriptors "
              f"peak {fds_peak}; accept_failed lines {daemon.count('accept_failed')}, "
              f"evictions logged {daemon.count('connection_evicted')}")
        for name, probe in probes.items():
            print("  " + probe.report(f"good client ({name})"))


if __name__ == "__main__":
    main()
