"""Issue 13, row 4: one address opens thousands of idle connections. Before: every
other client was refused for up to idle_timeout (600 s). Prints how many the attacker
got, whether 127.0.0.1 still connects and is served, and the server's RSS growth."""

from __future__ import annotations

import time

from abuse_common import ATTACKER, GoodClient, connect, parser, rss_mib, start_server, summary


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--connections", type=int, default=4096)
    args = p.parse_args()
    proc, address = start_server(args.tree, *args.server_flag)
    socks = []
    try:
        time.sleep(0.5)
        before = rss_mib(proc.pid)
        for _ in range(args.connections):
            try:
                socks.append(connect(address, ATTACKER))
            except OSError:
                break
        time.sleep(1.0)
        # Connections the server closed at once (refused) read EOF.
        kept = 0
        for sock in socks:
            sock.setblocking(False)
            try:
                if sock.recv(1) == b"":
                    continue
            except BlockingIOError:
                kept += 1
            except OSError:
                continue
        good = GoodClient(address)
        good.start()
        end = time.monotonic() + args.seconds
        peak = before
        while time.monotonic() < end:
            peak = max(peak, rss_mib(proc.pid))
            time.sleep(0.5)
        good.stop.set()
        good.join()
        summary("row 4", proc, before, peak, good,
                f"; attacker kept {kept} of {len(socks)} connections")
    finally:
        for sock in socks:
            sock.close()
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
