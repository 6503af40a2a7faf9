"""Issue 27, item 3: nearly complete frames hold the read budget. Five loopback
addresses (127.0.0.2 to .6), each with 16 connections, each sending a frame of 1 MiB
less 16 bytes (about 2 MB/s per address), then nothing, and starting again on a new
connection when the server closes theirs; a good client on 127.0.0.1 calls getLeader
meanwhile. Before: the 64 MiB budget filled and getLeader took a median 9 s, some
refused. Prints the good client's median and worst latency and the daemon's RSS.

    .venv/bin/python scripts/abuse/nearly_complete_frames.py [--tree DIR] [--seconds 30]
        [--rate 2000000] [--connections 16]
"""

from __future__ import annotations

import socket
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

from abuse_common import REPO, parser
from tree_daemon import Timed, TreeDaemon

sys.path.insert(0, str(REPO))
from nimbus_thrift.client import NimbusClient  # noqa: E402

ATTACKERS = [f"127.0.0.{i}" for i in range(2, 7)]
MIB = 1 << 20
#: Bytes per send: the pace is kept by sleeping between them.
CHUNK = 16 * 1024


class Attacker(threading.Thread):
    """One connection's worth: a frame of 1 MiB less 16 bytes at ``rate`` bytes/s,
    then silence until the server closes it; then again, until stopped."""

    def __init__(self, port: int, source: str, rate: float, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.port, self.source, self.rate, self.stop = port, source, rate, stop
        self.frames = 0
        self.closed_by_server = 0

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                sock = socket.create_connection(("127.0.0.1", self.port), timeout=5,
                                                source_address=(self.source, 0))
            except OSError:
                self.stop.wait(0.5)
                continue
            try:
                sock.sendall(struct.pack(">i", MIB))
                left = MIB - 16
                while left and not self.stop.is_set():
                    n = min(CHUNK, left)
                    sock.sendall(b"a" * n)
                    left -= n
                    self.stop.wait(n / self.rate)
                self.frames += 1
                sock.settimeout(0.5)
                while not self.stop.is_set():   # silent; the server may close it
                    try:
                        if not sock.recv(65536):
                            self.closed_by_server += 1
                            break
                    except socket.timeout:
                        continue
            except OSError:
                self.closed_by_server += 1
            finally:
                sock.close()


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--rate", type=float, default=2_000_000,
                   help="bytes/s each attacking address sends, over all its connections")
    p.add_argument("--connections", type=int, default=16, help="per attacking address")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        daemon = TreeDaemon(args.tree, Path(tmp))
        good = NimbusClient("127.0.0.1", daemon.port, timeout=60, connect_attempts=1)
        probe = Timed(lambda: good.call("getLeader"))
        stop = threading.Event()
        attackers = [Attacker(daemon.port, host, args.rate / args.connections, stop)
                     for host in ATTACKERS for _ in range(args.connections)]
        try:
            good.call("getLeader")
            before = peak = daemon.rss_mib()
            probe.start()
            for attacker in attackers:
                attacker.start()
            end = time.monotonic() + args.seconds
            while time.monotonic() < end:
                peak = max(peak, daemon.rss_mib())
                time.sleep(0.25)
            probe.stop.set()
            probe.join(70)
        finally:
            stop.set()
            for attacker in attackers:
                attacker.join(5)
            good.close()
            daemon.stop()
        frames = sum(a.frames for a in attackers)
        closed = sum(a.closed_by_server for a in attackers)
        print(f"nearly complete frames: {len(ATTACKERS)} addresses x {args.connections} "
              f"connections, 1 MiB less 16 bytes at {args.rate / 1e6:.1f} MB/s per address "
              f"for {args.seconds:.0f} s: {frames} frames sent, {closed} closed by the "
              f"server; daemon RSS {before:.0f} -> peak {peak:.0f} MiB")
        print("  " + probe.report("good client (getLeader)"))
        for error in sorted(set(probe.errors))[:3]:
            print(f"    e.g. {error}")


if __name__ == "__main__":
    main()
