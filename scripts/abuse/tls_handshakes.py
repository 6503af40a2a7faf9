"""Issue 14's hostile rows for the TLS port: connections from 127.0.0.2 that never
start the handshake, that start it and stop, and that send garbage instead of a
ClientHello, while a well-behaved mutual-TLS client on 127.0.0.1 keeps calling echo.
Prints the server's RSS growth, the handshakes it counted as failed, and the good
client's latencies (the issue asks for answers in under 1 s throughout).

    .venv/bin/python scripts/abuse/tls_handshakes.py [--connections 1000] [--seconds 10]

The server is the demo service with a server-side context requiring client
certificates (made with scripts/tls/make_certs.py into a temporary directory), a 2 s
handshake_timeout so the silent ones are seen going.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from abuse_common import ATTACKER, REPO, GoodClient, connect, parser, rss_mib

SERVER = """
import json, ssl, sys, signal, threading
import nimbus_thrift
from nimbus_thrift import logs
from nimbus_thrift.demo import EchoHandler, demo_thrift
logs.configure("error", "json")
certs = sys.argv[1]
ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
ctx.load_cert_chain(certs + "/server.pem", certs + "/server.key")
ctx.load_verify_locations(certs + "/ca.pem")
ctx.verify_mode = ssl.CERT_REQUIRED
server = nimbus_thrift.make_server(demo_thrift().Echo, EchoHandler(), port=0,
                                   ssl_context=ctx, handshake_timeout=2.0)
host, port = server.start()
print(f"on {host}:{port}", flush=True)
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *a: stop.set())
while not stop.wait(0.5):
    pass
print("METRICS " + json.dumps(server.metrics().as_dict()), flush=True)
server.stop(grace=1.0)
"""


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--connections", type=int, default=1000)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        certs = Path(tmp)
        subprocess.run([sys.executable, str(REPO / "scripts" / "tls" / "make_certs.py"),
                        str(certs), "--client", "alice"], check=True, capture_output=True)
        env = {**os.environ, "PYTHONPATH": str(args.tree), "NIMBUS_THRIFT_LOG_LEVEL": "error"}
        proc = subprocess.Popen([sys.executable, "-c", SERVER, str(certs)], cwd=args.tree,
                                env=env, stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        host, port = line.split()[1].rsplit(":", 1)
        address = (host, int(port))
        client_ctx = ssl.create_default_context(cafile=str(certs / "ca.pem"))
        client_ctx.load_cert_chain(certs / "alice.pem", certs / "alice.key")
        attackers = []
        try:
            time.sleep(0.3)
            before = peak = rss_mib(proc.pid)
            good = GoodClient(address, wrap=lambda s: client_ctx.wrap_socket(
                s, server_hostname="localhost"))
            good.start()
            kinds = [b"", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
                     b"GET / HTTP/1.1\r\n\r\n", os.urandom(64)]
            refused = 0
            for i in range(args.connections):
                try:
                    sock = connect(address, ATTACKER, timeout=5)
                    payload = kinds[i % len(kinds)]
                    if payload:
                        sock.sendall(payload)
                    attackers.append(sock)
                except OSError:
                    refused += 1
                if i % 100 == 0:
                    peak = max(peak, rss_mib(proc.pid))
            end = time.monotonic() + args.seconds
            while time.monotonic() < end:
                peak = max(peak, rss_mib(proc.pid))
                time.sleep(0.25)
            good.stop.set()
            good.join()
        finally:
            for sock in attackers:
                sock.close()
            proc.terminate()
            out, _ = proc.communicate(timeout=30)
        found = [ln for ln in out.splitlines() if ln.startswith("METRICS ")]
        metrics = json.loads(found[-1].split(" ", 1)[1]) if found else {}
        print(f"tls handshakes: {args.connections} attacker connections ({refused} refused "
              f"at connect): silent, a cut ClientHello, HTTP, random bytes; server RSS "
              f"{before:.0f} -> peak {peak:.0f} MiB; handshakes failed "
              f"{metrics.get('tls_handshakes_failed')}, completed "
              f"{metrics.get('tls_handshakes')}; {good.report()}")


if __name__ == "__main__":
    main()
