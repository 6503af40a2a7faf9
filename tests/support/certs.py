"""Certificates for the TLS tests, made by scripts/tls/make_certs.py (the script users
run, so the tests also check what it makes), and a small TLS Thrift server.

The script is loaded from its path: scripts/ is not a package.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import socket
import ssl
import struct
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from thriftpy2.protocol import TBinaryProtocol
from thriftpy2.thrift import TProcessor
from thriftpy2.transport import TMemoryBuffer

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "tls" / "make_certs.py"


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_certs", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_certs"] = module        # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


make_certs = _load_script()


@dataclass(frozen=True)
class Pki:
    """A CA with a server and clients, and the bad certificates the tests need."""

    dir: Path
    ca: Any                    # make_certs.Issued
    server: Any
    clients: dict[str, Any]
    expired_server: Any
    expired_client: Any
    #: Names only nimbus.invalid: refused when connecting to 127.0.0.1.
    other_host_server: Any
    #: Another CA, and a client it signed (with a name the main CA also issued).
    foreign_ca: Any
    foreign_client: Any


def make_pki(root: Path, clients: tuple[str, ...] = ("alice", "bob")) -> Pki:
    """Everything in ``root``: the script's own output (``make_all``) plus the
    expired, foreign and misnamed certificates made with its functions."""
    m = make_certs
    m.make_all(root, clients=clients)
    ca = m.Issued(root / "ca.pem", root / "ca.key")
    issued = {name: m.Issued(root / f"{name}.pem", root / f"{name}.key") for name in clients}
    now = dt.datetime.now(dt.timezone.utc)
    past = dict(not_before=now - dt.timedelta(days=30), not_after=now - dt.timedelta(days=1))
    expired_server = m.issue(root, "expired-server", "server", kind="server", ca=ca, **past)
    expired_client = m.issue(root, "expired-client", "carol", kind="client", ca=ca, **past)
    other_host = m.issue(root, "other-host", "server", kind="server", ca=ca,
                         hosts=["nimbus.invalid"], local_names=False)
    foreign_dir = root / "foreign"
    foreign_ca = m.make_ca(foreign_dir)
    foreign_client = m.issue(foreign_dir, "alice", "alice", kind="client", ca=foreign_ca)
    server = m.Issued(root / "server.pem", root / "server.key")
    return Pki(root, ca, server, issued, expired_server, expired_client, other_host,
               foreign_ca, foreign_client)


def with_clients(pki: Pki, *names: str) -> Pki:
    """``pki`` with a client certificate for each of ``names`` as its CN too (any name:
    the tests of names a server must refuse need them), files ``cn-<name>.*``."""
    for name in names:
        if name not in pki.clients:
            pki.clients[name] = make_certs.issue(pki.dir, f"cn-{name}", name,
                                                 kind="client", ca=pki.ca)
    return pki


def client_context(pki: Pki, who: str) -> ssl.SSLContext:
    """A client context trusting ``pki``'s CA and presenting ``who``'s certificate."""
    context = ssl.create_default_context(cafile=str(pki.ca.cert))
    context.load_cert_chain(str(pki.clients[who].cert), str(pki.clients[who].key))
    return context


def server_context(cert: Any, client_ca: Path | None = None,
                   maximum: ssl.TLSVersion | None = None) -> ssl.SSLContext:
    """A server context with ``cert`` (an Issued); with ``client_ca`` every client
    must present a certificate it signed."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert.cert, cert.key)
    if client_ca is not None:
        context.load_verify_locations(cafile=str(client_ca))
        context.verify_mode = ssl.CERT_REQUIRED
    if maximum is not None:
        context.maximum_version = maximum
    return context


@dataclass
class TlsThriftServer:
    """A threaded TLS server of framed binary Thrift: thriftpy2's processor behind an
    ``ssl`` socket (our own server's TLS is tested with the server). Bound to
    127.0.0.1:0 and listening before :meth:`start` returns; a thread per connection.

    ``accepted`` counts connections, ``peers`` records the common name of each
    verified client certificate (None when none was asked for), ``failures`` each
    handshake or read that failed on the server's side. With ``close_after``, a
    connection is closed after that many replies.
    """

    service: Any
    handler: Any
    context: ssl.SSLContext
    close_after: int | None = None
    accepted: int = 0
    peers: list[str | None] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    #: Set when a handshake fails on the server's side (its alert is then sent).
    refused: threading.Event = field(default_factory=threading.Event)

    def start(self) -> "TlsThriftServer":
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._stopping = False
        self._threads: list[threading.Thread] = []
        self._accepter = threading.Thread(target=self._accept, daemon=True)
        self._accepter.start()
        return self

    def stop(self) -> None:
        self._stopping = True
        # accept() does not wake when its socket closes; a connection wakes it.
        socket.create_connection(("127.0.0.1", self.port)).close()
        self._accepter.join(10)
        self._listener.close()
        for thread in self._threads:
            thread.join(10)

    def __enter__(self) -> "TlsThriftServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _accept(self) -> None:
        while True:
            conn, _ = self._listener.accept()
            if self._stopping:
                conn.close()
                return
            self.accepted += 1
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, raw: socket.socket) -> None:
        raw.settimeout(10)
        try:
            conn = self.context.wrap_socket(raw, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            self.failures.append(getattr(exc, "reason", None) or str(exc))
            self.refused.set()
            raw.close()
            return
        with conn:
            cert = conn.getpeercert()
            subject = dict(pair[0] for pair in cert["subject"]) if cert else {}
            self.peers.append(subject.get("commonName"))
            processor = TProcessor(self.service, self.handler)
            replies = 0
            while self.close_after is None or replies < self.close_after:
                try:
                    header = _read(conn, 4)
                    if header is None:
                        return
                    payload = _read(conn, struct.unpack(">i", header)[0])
                except (ssl.SSLError, OSError) as exc:
                    self.failures.append(getattr(exc, "reason", None) or str(exc))
                    return
                if payload is None:
                    return
                out = TMemoryBuffer()
                processor.process(TBinaryProtocol(TMemoryBuffer(payload)),
                                  TBinaryProtocol(out))
                reply = out.getvalue()
                conn.sendall(struct.pack(">i", len(reply)) + reply)
                replies += 1


def _read(conn: socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data
