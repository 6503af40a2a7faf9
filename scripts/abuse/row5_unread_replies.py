"""Issue 13, row 5: connections ask for 1 MB replies and never read them. Before: 983 MB
of kernel socket memory held for 30 s. Prints the server's RSS growth, the machine's
TCP socket memory (/proc/net/sockstat) at its peak and after --seconds, and a
well-behaved client's latency meanwhile. (On loopback the attacker's own receive
buffers count too: a client's window is part of the total, whatever the server does.)"""

from __future__ import annotations

import time

from abuse_common import (ATTACKER, GoodClient, connect, echo_binary_frame, parser, rss_mib,
                          start_server, summary, tcp_mem_mib)


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--connections", type=int, default=1000)
    p.add_argument("--reply-bytes", type=int, default=1_000_000)
    args = p.parse_args()
    proc, address = start_server(args.tree, *args.server_flag)
    socks = []
    try:
        time.sleep(0.5)
        before = peak = rss_mib(proc.pid)
        tcp_before = tcp_peak = tcp_mem_mib()
        good = GoodClient(address)
        good.start()
        frame = echo_binary_frame(args.reply_bytes)
        for _ in range(args.connections):
            try:
                sock = connect(address, ATTACKER)
                sock.sendall(frame)
                socks.append(sock)
            except OSError:
                break
            if len(socks) % 50 == 0:
                peak = max(peak, rss_mib(proc.pid))
                tcp_peak = max(tcp_peak, tcp_mem_mib())
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            peak = max(peak, rss_mib(proc.pid))
            tcp_peak = max(tcp_peak, tcp_mem_mib())
            time.sleep(0.5)
        tcp_after = tcp_mem_mib()
        good.stop.set()
        good.join()
        summary("row 5", proc, before, peak, good,
                f"; TCP socket memory {tcp_before:.0f} -> peak {tcp_peak:.0f} MiB, "
                f"{tcp_after:.0f} MiB after {args.seconds:g}s; attacker connections "
                f"{len(socks)}")
    finally:
        for sock in socks:
            sock.close()
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
