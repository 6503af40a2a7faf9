"""Issue 13, row 3: connections that each send a 4-byte frame length of 1,000,000 and
then nothing (or a byte now and then). Before: the declared size was reserved and
zero-filled up front (260 connections: RSS 36 -> 299 MB, a normal call 27.7 s).
Prints the server's RSS growth and a well-behaved client's latency meanwhile."""

from __future__ import annotations

import struct
import time

from abuse_common import ATTACKER, GoodClient, connect, parser, rss_mib, start_server, summary


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--connections", type=int, default=1000)
    args = p.parse_args()
    proc, address = start_server(args.tree, *args.server_flag)
    try:
        time.sleep(0.5)
        before = peak = rss_mib(proc.pid)
        good = GoodClient(address)
        good.start()
        socks = []
        for _ in range(args.connections):
            try:
                sock = connect(address, ATTACKER)
                sock.sendall(struct.pack(">i", 1_000_000) + b"x")
                socks.append(sock)
            except OSError:
                break       # refused (a per-address cap): the attack is as big as allowed
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            for sock in socks[:50]:
                try:
                    sock.send(b"x")          # a byte now and then from some
                except OSError:
                    pass
            peak = max(peak, rss_mib(proc.pid))
            time.sleep(0.5)
        good.stop.set()
        good.join()
        summary("row 3", proc, before, peak, good,
                f"; attacker connections opened {len(socks)}")
        for sock in socks:
            sock.close()
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
