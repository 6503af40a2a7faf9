"""Interoperability over mutual TLS: real Thrift clients with client certificates
against the demo service on our TLS port (make_server(..., ssl_context=...)).

    Apache Thrift Python   thrift.transport.TSSLSocket + TFramedTransport
    thriftpy2              make_client(..., certfile=, keyfile=, cafile=), framed
    Node                   npm thrift's createSSLConnection (tests/interop/node/client_tls.js)
    Java                   libthrift's TSSLTransportFactory with PKCS12 stores
                           (tests/interop/java/TlsEchoClient.java, compiled here)
    openssl s_client       protocol versions, compression, refused certificates

Certificates come from scripts/tls/make_certs.py (what a team uses), made once for the
module; mallory's are from another CA. Each client calls notify(), whose handler
records the request's principal: the certificate's common name must arrive.
"""

from __future__ import annotations

import importlib
import json
import shutil
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import nimbus_thrift
from nimbus_thrift.demo import EchoHandler
from nimbus_thrift.nimbus import load_config
from nimbus_thrift.nimbus.security.tlsconf import server_ssl_context

from support.rawthrift import wait_for

from interop import GEN_PY, INTEROP_DIR, NODE_DIR, REPO_ROOT, require_file, require_generated

pytestmark = pytest.mark.interop

MAKE_CERTS = REPO_ROOT / "scripts" / "tls" / "make_certs.py"
P12_PASSWORD = "interop-secret"
JAVA_CLIENT = INTEROP_DIR / "java" / "TlsEchoClient.java"
JARS = ("/usr/share/java/libthrift.jar", "/usr/share/java/thrift.jar")
SLF4J = "/usr/share/java/slf4j-api.jar"


class RecordingEcho(EchoHandler):
    """notify(event) records "<principal>:<event>"; events() returns them."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []
        self.lock = threading.Lock()

    def notify(self, event: str) -> None:
        request = nimbus_thrift.current_request()
        with self.lock:
            self.seen.append(f"{request.principal if request else '?'}:{event}")

    def events(self) -> list[str]:
        with self.lock:
            return list(self.seen)


def make_certs(directory: Path, *clients: str) -> None:
    args = [sys.executable, str(MAKE_CERTS), str(directory), "--p12-password", P12_PASSWORD]
    for name in clients:
        args += ["--client", name]
    subprocess.run(args, check=True, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("team")
    make_certs(d, "alice", "bob")
    return d


@pytest.fixture(scope="module")
def foreign(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("foreign")
    make_certs(d, "mallory")
    return d


@pytest.fixture
def handler() -> RecordingEcho:
    return RecordingEcho()


@pytest.fixture
def tls_server(demo, certs, handler, tmp_path) -> Iterator[nimbus_thrift.Server]:
    """The demo service on the nimbus daemon's own TLS context (nimbus/tlsconf.py, from
    its settings), so the protocol checks below are the daemon's."""
    config = load_config(env={}, flags={"ui_port": 0,
        "data_dir": str(tmp_path / "data"), "tls_cert_file": str(certs / "server.pem"),
        "tls_key_file": str(certs / "server.key"),
        "tls_client_ca_file": str(certs / "ca.pem")})
    ctx = server_ssl_context(config)
    assert ctx is not None
    server = nimbus_thrift.make_server(demo.Echo, handler, port=0, worker_threads=4,
                                       ssl_context=ctx)
    server.start()
    try:
        yield server
    finally:
        server.stop(grace=5.0)


def test_apache_thrift_python_tssl_socket(tls_server, certs, handler):
    from thrift.protocol import TBinaryProtocol
    from thrift.transport import TSSLSocket, TTransport

    require_generated(GEN_PY / "nimbus_demo" / "Echo.py", "Apache Thrift generated Python code")
    if str(GEN_PY) not in sys.path:
        sys.path.insert(0, str(GEN_PY))
    Echo = importlib.import_module("nimbus_demo.Echo")

    host, port = tls_server.address
    ctx = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    ctx.load_cert_chain(certs / "alice.pem", certs / "alice.key")
    sock = TSSLSocket.TSSLSocket(host, port, ssl_context=ctx, server_hostname="localhost")
    sock.setTimeout(10_000)
    trans = TTransport.TFramedTransport(sock)
    trans.open()
    try:
        client = Echo.Client(TBinaryProtocol.TBinaryProtocol(trans))
        assert client.echo("apache over TLS") == "apache over TLS"
        client.notify("apache")
        assert client.events() == ["alice:apache"]
    finally:
        trans.close()


def test_thriftpy2_ssl_client(tls_server, certs, handler, demo):
    from thriftpy2.rpc import make_client
    from thriftpy2.transport import TFramedTransportFactory

    host, port = tls_server.address
    client = make_client(demo.Echo, "localhost", port, timeout=10_000,
                         trans_factory=TFramedTransportFactory(),
                         cafile=str(certs / "ca.pem"), certfile=str(certs / "bob.pem"),
                         keyfile=str(certs / "bob.key"))
    try:
        assert client.echo("thriftpy2 over TLS") == "thriftpy2 over TLS"
        client.notify("thriftpy2")
        assert client.events() == ["bob:thriftpy2"]
    finally:
        client.close()


def test_node_create_ssl_connection(tls_server, certs, handler):
    node = shutil.which("node")
    assert node is not None, "node is not on PATH: run scripts/setup.sh"
    require_file(NODE_DIR / "node_modules" / "thrift" / "package.json", "npm thrift")
    host, port = tls_server.address
    proc = subprocess.run([node, str(NODE_DIR / "client_tls.js"), host, str(port),
                           str(certs / "ca.pem"), str(certs / "alice.pem"),
                           str(certs / "alice.key")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == {"echo": "over TLS", "events": ["alice:node"]}


def test_java_tssl_transport_factory_with_pkcs12(tls_server, certs, tmp_path):
    jar = next((j for j in JARS if Path(j).is_file()), None)
    assert jar is not None, "libthrift-java is not installed: run scripts/setup.sh"
    require_file(Path(SLF4J), "slf4j-api (libslf4j-java)")
    javac = shutil.which("javac")
    assert javac is not None, "javac is not installed: run scripts/setup.sh"
    classpath = f"{jar}:{SLF4J}"
    subprocess.run([javac, "-cp", classpath, "-d", str(tmp_path), str(JAVA_CLIENT)],
                   check=True, capture_output=True, timeout=120)
    require_file(certs / "truststore.p12", "the Java trust store (make_certs.py)")
    host, port = tls_server.address
    proc = subprocess.run(["java", "-cp", f"{classpath}:{tmp_path}", "TlsEchoClient", host,
                           str(port), str(certs / "alice.p12"), str(certs / "truststore.p12"),
                           P12_PASSWORD, "java over TLS"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "java over TLS"


def s_client(port: int, certs: Path, *args: str, who: str | None = "alice",
             foreign: Path | None = None) -> subprocess.CompletedProcess[str]:
    cmd = ["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-CAfile",
           str(certs / "ca.pem"), "-servername", "localhost", *args]
    if who is not None:
        base = foreign if foreign is not None else certs
        cmd += ["-cert", str(base / f"{who}.pem"), "-key", str(base / f"{who}.key")]
    # A Thrift ping frame on stdin, so a finished handshake is followed by a request
    # (and, with TLS 1.3, a refused client certificate shows as the server's alert).
    ping = b"\x00\x00\x00\x11\x80\x01\x00\x01\x00\x00\x00\x04ping\x00\x00\x00\x01\x00"
    return subprocess.run(cmd, input=ping.decode("latin-1"), capture_output=True,
                          text=True, timeout=60, encoding="latin-1")


@pytest.mark.parametrize("flag,version", [("-tls1_2", "TLSv1.2"), ("-tls1_3", "TLSv1.3")])
def test_openssl_tls12_and_13_without_compression(tls_server, certs, flag, version):
    out = s_client(tls_server.address[1], certs, flag)
    assert f"Protocol  : {version}" in out.stdout or f"New, {version}" in out.stdout, \
        out.stdout + out.stderr
    assert "Verify return code: 0 (ok)" in out.stdout
    assert "Compression: NONE" in out.stdout


def test_openssl_older_protocols_are_refused(tls_server, certs):
    out = s_client(tls_server.address[1], certs, "-tls1_1")
    assert "Cipher is (NONE)" in out.stdout or out.returncode != 0, out.stdout
    assert tls_server.metrics().tls_handshakes == 0


@pytest.mark.parametrize("who", [None, "mallory"])
def test_openssl_without_a_trusted_client_certificate_is_refused(tls_server, certs, foreign,
                                                                  who):
    # With TLS 1.3 the client finishes its side first; the server's refusal follows.
    out = s_client(tls_server.address[1], certs, "-tls1_3", who=who, foreign=foreign)
    wait_for(lambda: tls_server.metrics().tls_handshakes_failed == 1, what="refusal")
    assert tls_server.metrics().tls_handshakes == 0
    assert "ping" not in out.stdout.split("---")[-1]     # no reply came back


def test_the_tls_port_refuses_a_plaintext_thrift_client(tls_server, demo):
    with socket.create_connection(tls_server.address, timeout=5) as plain:
        plain.sendall(b"\x00\x00\x00\x11\x80\x01\x00\x01\x00\x00\x00\x04ping\x00\x00"
                      b"\x00\x01\x00")
        plain.settimeout(5)
        try:
            data = plain.recv(100)
        except ConnectionResetError:
            data = b""
        assert data == b""
    assert tls_server.metrics().tls_handshakes_failed == 1
