"""Real sockets: TLS on the server's TCP port (make_server(..., ssl_context=ctx)). The
handshake runs in the selector without blocking; with client certificates required,
the certificate's common name is the request's principal; plaintext, foreign or
missing certificates and handshakes that never finish are closed with one log line,
and every other client carries on. Certificates come from scripts/tls/make_certs.py."""

from __future__ import annotations

import socket
import ssl
from typing import Any

import pytest

import nimbus_thrift
from nimbus_thrift.demo import EchoHandler

from support.certs import make_pki
from support.rawthrift import (call, closed_by_peer, decode, read_frame, roundtrip,
                               wait_closed, wait_for)


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Any:
    """What scripts/tls/make_certs.py makes for clients alice and bob, plus a client
    certificate from another CA (``foreign_client``, used as mallory here)."""
    return make_pki(tmp_path_factory.mktemp("certs"), clients=("alice", "bob"))


def server_context(certs: Any, require_client_cert: bool = True) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(certs.server.cert, certs.server.key)
    if require_client_cert:
        ctx.load_verify_locations(certs.ca.cert)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def tls_connect(address, certs: Any, who: str | None = "alice") -> ssl.SSLSocket:
    ctx = ssl.create_default_context(cafile=str(certs.ca.cert))
    if who is not None:
        issued = certs.foreign_client if who == "mallory" else certs.clients[who]
        ctx.load_cert_chain(issued.cert, issued.key)
    raw = socket.create_connection(address, timeout=5)
    return ctx.wrap_socket(raw, server_hostname="localhost")


class WhoAmI(EchoHandler):
    def echo(self, s: str) -> str:
        request = nimbus_thrift.current_request()
        assert request is not None
        return f"{request.principal}|{s}"


def serve(certs: Any, handler=None, **options):
    from nimbus_thrift.demo import demo_thrift
    return nimbus_thrift.make_server(demo_thrift().Echo, handler or WhoAmI(), port=0,
                                     **{"worker_threads": 2,
                                        "ssl_context": server_context(certs), **options})


def test_mutual_tls_calls_carry_the_certificate_name(demo, certs):
    with serve(certs) as server:
        with tls_connect(server.address, certs, "alice") as alice, \
                tls_connect(server.address, certs, "bob") as bob:
            assert alice.version() in ("TLSv1.2", "TLSv1.3")
            assert roundtrip(alice, call(demo.Echo, "echo", s="hi"),
                             demo.Echo).body.success == "alice|hi"
            assert roundtrip(bob, call(demo.Echo, "echo", s="hi"),
                             demo.Echo).body.success == "bob|hi"
            # Pipelined in one write (one TLS record), and a reply of many records.
            alice.sendall(call(demo.Echo, "echo", seqid=2, s="a")
                          + call(demo.Echo, "echo", seqid=3, s="b"))
            assert decode(read_frame(alice), demo.Echo, "echo").body.success == "alice|a"
            assert decode(read_frame(alice), demo.Echo, "echo").body.success == "alice|b"
            big = "x" * 3_000_000
            assert roundtrip(alice, call(demo.Echo, "echo", s=big),
                             demo.Echo).body.success == "alice|" + big
        metrics = server.metrics()
        assert (metrics.tls_handshakes, metrics.tls_handshakes_failed) == (2, 0)
        wait_for(lambda: server.metrics().bytes_reserved == 0, what="frames released")


def test_principal_from_cert_maps_the_certificate(demo, certs):
    def mapping(cert):
        return "user:" + dict(x[0] for x in cert["subject"])["commonName"].upper()
    with serve(certs, principal_from_cert=mapping) as server, \
            tls_connect(server.address, certs, "bob") as bob:
        assert roundtrip(bob, call(demo.Echo, "echo", s="!"),
                         demo.Echo).body.success == "user:BOB|!"


def test_without_required_client_certificates_the_principal_is_none(demo, certs):
    with serve(certs, ssl_context=server_context(certs, require_client_cert=False)) \
            as server, tls_connect(server.address, certs, who=None) as anon:
        assert roundtrip(anon, call(demo.Echo, "echo", s="?"),
                         demo.Echo).body.success == "None|?"


def test_plaintext_to_a_tls_port_is_closed_with_one_line(demo, certs, logs):
    with serve(certs) as server, tls_connect(server.address, certs) as good:
        plain = socket.create_connection(server.address, timeout=5)
        try:
            plain.sendall(call(demo.Echo, "echo", s="plain"))
            assert closed_by_peer(plain, wait=5)
        finally:
            plain.close()
        assert roundtrip(good, call(demo.Echo, "echo", s="ok"),
                         demo.Echo).body.success == "alice|ok"
        assert server.metrics().tls_handshakes_failed == 1
    failed = [e for e in logs if e["event"] == "tls_handshake_failed"]
    assert len(failed) == 1
    assert "plaintext framed Thrift" in failed[0]["reason"]


@pytest.mark.parametrize("who,expected", [
    (None, "presented no certificate"),
    ("mallory", "client certificate refused"),
])
def test_missing_or_foreign_client_certificates_are_refused(demo, certs, logs, who,
                                                            expected):
    with serve(certs) as server, tls_connect(server.address, certs) as good:
        try:
            bad = tls_connect(server.address, certs, who)
        except (ssl.SSLError, ConnectionError):
            pass        # TLS 1.2 fails here; TLS 1.3 fails at the first read below
        else:
            with bad:
                with pytest.raises((ssl.SSLError, ConnectionError)):
                    bad.sendall(call(demo.Echo, "echo", s="x"))
                    if not bad.recv(100):
                        raise ConnectionError("closed")
        wait_for(lambda: server.metrics().tls_handshakes_failed == 1, what="refusal")
        assert roundtrip(good, call(demo.Echo, "echo", s="ok"),
                         demo.Echo).body.success == "alice|ok"
        assert server.metrics().connections_open == 1
    failed = [e for e in logs if e["event"] == "tls_handshake_failed"]
    assert len(failed) == 1 and expected in failed[0]["reason"], failed


def test_a_handshake_that_never_finishes_is_closed_at_handshake_timeout(demo, certs, logs):
    with serve(certs, handshake_timeout=0.3) as server, \
            tls_connect(server.address, certs) as good:
        silent = socket.create_connection(server.address, timeout=5)
        partial = socket.create_connection(server.address, timeout=5)
        try:
            partial.sendall(b"\x16\x03\x01\x02\x00\x01")   # a ClientHello's first bytes
            assert wait_closed(silent) == b""
            assert wait_closed(partial) == b""
        finally:
            silent.close()
            partial.close()
        metrics = server.metrics()
        assert metrics.tls_handshakes_failed == 2 and metrics.timeouts == 2
        assert metrics.bytes_reserved == 0
        assert roundtrip(good, call(demo.Echo, "echo", s="ok"),
                         demo.Echo).body.success == "alice|ok"
    reasons = [e.get("reason", "") for e in logs if e["event"] == "connection_closed"]
    assert sum("handshake_timeout (0.3s)" in r for r in reasons) == 2


def test_bytes_held_in_the_tls_layer_are_read_without_a_socket_event(demo, certs):
    """Two requests in one TLS record, with a read budget so small that the first read
    takes the first frame and only part of the second: the rest stays decrypted in
    the TLS layer, where epoll cannot see it. The server must still read it when it
    goes back to reading, not wait for bytes that will never come."""
    first = call(demo.Echo, "echo", seqid=1, s="one" * 10)
    second = call(demo.Echo, "echo", seqid=2, s="two")
    assert len(second) > 16
    # The first read takes 4 + budget bytes: all of the first frame and 16 of the second.
    budget = len(first) + 12
    with serve(certs, max_read_buffer_bytes=budget, max_frame_size=budget) as server, \
            tls_connect(server.address, certs) as alice:
        alice.sendall(first + second)
        assert decode(read_frame(alice), demo.Echo, "echo").body.success == \
            "alice|" + "one" * 10
        assert decode(read_frame(alice), demo.Echo, "echo").body.success == "alice|two"
        wait_for(lambda: server.metrics().bytes_reserved == 0, what="frames released")


def test_the_unix_socket_stays_plain_beside_a_tls_port(demo, certs, tmp_path):
    path = str(tmp_path / "s.sock")
    with serve(certs, unix_socket=path) as server:
        local = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        local.settimeout(5)
        local.connect(path)
        with local:
            principal, _ = roundtrip(local, call(demo.Echo, "echo", s="u"),
                                     demo.Echo).body.success.split("|")
            assert principal not in ("None", "alice")
        with tls_connect(server.address, certs) as alice:
            assert roundtrip(alice, call(demo.Echo, "echo", s="t"),
                             demo.Echo).body.success == "alice|t"


def test_ssl_context_must_be_a_server_context(certs):
    client = ssl.create_default_context()
    with pytest.raises(nimbus_thrift.OptionError, match="server-side ssl.SSLContext"):
        nimbus_thrift.ServerOptions(ssl_context=client)
    with pytest.raises(nimbus_thrift.OptionError, match="handshake_timeout"):
        nimbus_thrift.ServerOptions(handshake_timeout=0)


def test_a_crowd_of_hostile_handshakes_does_not_slow_a_good_client(demo, certs):
    """200 connections from 127.0.0.2 that stay silent, cut a ClientHello short or send
    garbage, while the good client keeps calling: answered throughout (the bound is
    generous; scripts/abuse/tls_handshakes.py measures 1,000 with latencies)."""
    import os
    import time
    from support.rawthrift import ATTACKER, connect
    kinds = [b"", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", b"GET / HTTP/1.1\r\n\r\n",
             os.urandom(64)]
    with serve(certs, handshake_timeout=1.0) as server, \
            tls_connect(server.address, certs) as good:
        hostile = []
        try:
            for i in range(200):
                sock = connect(server.address, source=ATTACKER)
                if kinds[i % 4]:
                    sock.sendall(kinds[i % 4])
                hostile.append(sock)
                if i % 50 == 0:
                    started = time.monotonic()
                    assert roundtrip(good, call(demo.Echo, "echo", s=str(i)),
                                     demo.Echo).body.success == f"alice|{i}"
                    assert time.monotonic() - started < 3.0
            # The garbage is refused at once, the silent and cut ones at the deadline.
            wait_for(lambda: server.metrics().tls_handshakes_failed == 200, timeout=15,
                     what="every hostile handshake refused")
            assert server.metrics().connections_open == 1
            assert roundtrip(good, call(demo.Echo, "echo", s="end"),
                             demo.Echo).body.success == "alice|end"
        finally:
            for sock in hostile:
                sock.close()
