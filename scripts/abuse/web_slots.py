"""Issue 27, item 4: the web side's 256 slots, taken without credentials. Connections
from 127.0.0.2 (``--addresses`` 1: that one only; N: 127.0.0.2 onwards) that never
start their TLS handshake, reopened as soon as the daemon closes one, against a daemon
with mutual TLS, while a good browser (alice's certificate) on 127.0.0.1 asks for
/api/v1/cluster/summary on a new connection every second. Before: a connection counted
from its accept and had 10 s for its handshake, and the browser got 0 of 25 answers.
Prints the browser's answers, median and worst latency, and the daemon's RSS.

    .venv/bin/python scripts/abuse/web_slots.py [--tree DIR] [--connections 300]
        [--addresses 1] [--seconds 25]
"""

from __future__ import annotations

import http.client
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from abuse_common import REPO, parser
from tree_daemon import Timed, TreeDaemon


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--connections", type=int, default=300)
    p.add_argument("--addresses", type=int, default=1)
    p.set_defaults(seconds=25.0)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        certs = Path(tmp) / "certs"
        subprocess.run([sys.executable, str(REPO / "scripts" / "tls" / "make_certs.py"),
                        str(certs), "--client", "alice"], check=True, capture_output=True)
        daemon = TreeDaemon(args.tree, Path(tmp), ui_port=-1, users="alice",
                            tls_cert_file=str(certs / "server.pem"),
                            tls_key_file=str(certs / "server.key"),
                            tls_client_ca_file=str(certs / "ca.pem"))
        url = daemon.event("ui_listening")["url"]
        host, _, port = url.removeprefix("https://").rstrip("/").rpartition(":")
        address = (host, int(port))
        context = ssl.create_default_context(cafile=str(certs / "ca.pem"))
        context.check_hostname = False
        context.load_cert_chain(str(certs / "alice.pem"), str(certs / "alice.key"))

        def browse() -> None:
            conn = http.client.HTTPSConnection(*address, context=context, timeout=10)
            try:
                conn.request("GET", "/api/v1/cluster/summary")
                response = conn.getresponse()
                response.read()
                if response.status != 200:
                    raise RuntimeError(f"HTTP {response.status}")
            finally:
                conn.close()

        sources = [f"127.0.0.{2 + i}" for i in range(args.addresses)]
        stop = threading.Event()
        opened = [0]

        def attack() -> None:
            socks: list[socket.socket | None] = [None] * args.connections
            while not stop.is_set():
                for i, sock in enumerate(socks):
                    if sock is not None:
                        try:
                            if sock.recv(1, socket.MSG_DONTWAIT | socket.MSG_PEEK):
                                continue
                        except BlockingIOError:
                            continue            # still open, still silent
                        except OSError:
                            pass
                        sock.close()
                    try:
                        socks[i] = socket.create_connection(
                            address, timeout=5, source_address=(sources[i % len(sources)], 0))
                        opened[0] += 1
                    except OSError:
                        socks[i] = None
                stop.wait(0.1)
            for sock in socks:
                if sock is not None:
                    sock.close()

        attacker = threading.Thread(target=attack, daemon=True)
        good = Timed(browse, pause=1.0)
        try:
            before = peak = daemon.rss_mib()
            attacker.start()
            time.sleep(1.0)               # the slots are taken before the browser comes
            good.start()
            end = time.monotonic() + args.seconds
            while time.monotonic() < end:
                peak = max(peak, daemon.rss_mib())
                time.sleep(0.25)
            good.stop.set()
            good.join(30)
        finally:
            stop.set()
            attacker.join(30)
            daemon.stop()
        print(f"web slots: {args.connections} silent connections from {len(sources)} "
              f"address(es), reopened when closed ({opened[0]} opened in all), mutual TLS; "
              f"daemon RSS {before:.0f} -> peak {peak:.0f} MiB; "
              f"{good.report('good browser')}")
        if good.errors:
            print(f"  first error: {good.errors[0]}")


if __name__ == "__main__":
    main()
