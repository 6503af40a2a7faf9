"""Who a TCP client on this machine is, over real sockets: the OS user owning its
socket, as the kernel's sock_diag says (rpc/localpeer.py), for IPv4, IPv6, a
dual-stack listener and a dual-stack client, and nobody for a client already gone
(whose time-wait socket the kernel reports as uid 0); and the generic server's
options: ``identify_local_peers`` (off by default), a certificate's principal over the
kernel's user, and a certificate ``principal_from_cert`` refuses closed after the
handshake (CertificateRefused). The daemon's use of them: test_nimbus_principals.py.
"""

from __future__ import annotations

import os
import pwd
import socket
import ssl
from typing import Any, Iterator

import pytest

from support.certs import client_context, make_pki, with_clients
from support.otheruser import NOBODY_UID, SYSTEM_PYTHON, another_account
from support.rawthrift import frame, message, roundtrip, wait_closed
from nimbus_thrift.demo import demo_thrift
from nimbus_thrift.rpc.context import current_request
from nimbus_thrift.rpc.localpeer import PeerLookup
from nimbus_thrift.rpc.make import make_server
from nimbus_thrift.rpc.tls import CertificateRefused, common_name

ME = pwd.getpwuid(os.geteuid()).pw_name


@pytest.fixture(scope="module")
def pki(tmp_path_factory: Any) -> Any:
    return with_clients(make_pki(tmp_path_factory.mktemp("pki"), clients=("alice",)),
                        "root")


# --- the lookup itself --------------------------------------------------------------------

@pytest.mark.parametrize("family, host", [(socket.AF_INET, "127.0.0.1"),
                                          (socket.AF_INET, "127.0.0.2"),
                                          (socket.AF_INET6, "::1")])
def test_the_kernel_names_a_loopback_clients_user(family: int, host: str) -> None:
    lookup = PeerLookup()
    with socket.socket(family) as listener:
        listener.bind((host, 0))
        listener.listen()
        with socket.create_connection(listener.getsockname()[:2]) as client:
            accepted, peer = listener.accept()
            with accepted:
                assert lookup.uid(peer, accepted.getsockname()) == os.geteuid()
                assert lookup.user(peer, accepted.getsockname()) == ME
                # A connection that is not this one (a port nobody uses) is nobody's.
                assert lookup.uid((peer[0], 1, *peer[2:]), accepted.getsockname()) is None
    lookup.close()


def test_a_v4_client_of_a_dual_stack_listener() -> None:
    lookup = PeerLookup()
    with socket.socket(socket.AF_INET6) as listener:
        listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        listener.bind(("::", 0))
        listener.listen()
        with socket.create_connection(("127.0.0.1", listener.getsockname()[1])):
            accepted, peer = listener.accept()
            with accepted:
                assert peer[0] == "::ffff:127.0.0.1"
                assert lookup.uid(peer, accepted.getsockname()) == os.geteuid()
    lookup.close()


def test_a_dual_stack_client_of_an_ipv4_listener() -> None:
    # Java's client sockets are IPv6 ones; to 127.0.0.1 they connect v4-mapped.
    lookup = PeerLookup()
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        with socket.socket(socket.AF_INET6) as client:
            client.connect(("::ffff:127.0.0.1", listener.getsockname()[1]))
            accepted, peer = listener.accept()
            with accepted:
                assert peer[0] == "127.0.0.1"
                assert lookup.uid(peer, accepted.getsockname()) == os.geteuid()
    lookup.close()


def test_a_client_gone_before_the_lookup_is_nobody_not_root() -> None:
    # Its socket is a time-wait one by then, which the kernel reports as uid 0.
    lookup = PeerLookup()
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        client = socket.create_connection(listener.getsockname())
        accepted, peer = listener.accept()
        client.close()
        with accepted:
            assert accepted.recv(1) == b""      # its FIN has arrived
            assert lookup.uid(peer, accepted.getsockname()) is None
    lookup.close()


# --- the generic server: identify_local_peers, principal_from_cert refusing ------------

class WhoHandler:
    """Echo.echo answers the principal of the request it runs in."""

    def echo(self, s: str) -> str:
        request = current_request()
        return repr(request.principal if request is not None else "outside")


@pytest.fixture
def who_server() -> Iterator[Any]:
    started: list[Any] = []

    def make(**options: Any) -> tuple[str, int]:
        server = make_server(demo_thrift().Echo, WhoHandler(), host="127.0.0.1", port=0,
                             **options)
        started.append(server)
        return server.start()
    yield make
    for server in started:
        server.stop(grace=5.0)


def _who(sock: socket.socket) -> str:
    demo = demo_thrift()
    reply = roundtrip(sock, frame(message("echo", 1, demo.Echo.echo_args(s=""))),
                      demo.Echo)
    return reply.body.success


def test_the_generic_server_names_local_peers_only_when_asked(who_server: Any) -> None:
    plain = who_server()
    asked = who_server(identify_local_peers=True)
    with socket.create_connection(plain, timeout=10) as sock:
        assert _who(sock) == "None"             # the default: benchmarks unchanged
    with socket.create_connection(asked, timeout=10) as sock:
        assert _who(sock) == repr(ME)


def test_a_certificate_principal_wins_and_a_refused_one_is_closed(
        who_server: Any, pki: Any, logs: Any) -> None:
    def mapping(cert: dict[str, Any]) -> str | None:
        name = common_name(cert)
        if name == "root":
            raise CertificateRefused(name, "it is the superuser's name")
        return name
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(pki.server.cert), str(pki.server.key))
    context.load_verify_locations(cafile=str(pki.ca.cert))
    context.verify_mode = ssl.CERT_OPTIONAL
    address = who_server(ssl_context=context, principal_from_cert=mapping,
                         identify_local_peers=True)

    def connect(context: ssl.SSLContext) -> ssl.SSLSocket:
        return context.wrap_socket(socket.create_connection(address, timeout=10),
                                   server_hostname="127.0.0.1")
    with connect(client_context(pki, "alice")) as sock:
        assert _who(sock) == "'alice'"          # the certificate, over the kernel's user
    with connect(ssl.create_default_context(cafile=str(pki.ca.cert))) as sock:
        assert _who(sock) == repr(ME)           # no certificate: the kernel's user
    with connect(client_context(pki, "root")) as sock:
        try:
            sock.sendall(frame(message("echo", 1, demo_thrift().Echo.echo_args(s=""))))
            answer = wait_closed(sock)
        except (ssl.SSLError, OSError):
            answer = b""
    assert answer == b""
    (refused,) = [e for e in logs if e.get("event") == "tls_client_refused"]
    assert (refused["principal"], refused["reason"]) == ("root",
                                                         "it is the superuser's name")


#: Another account's client holding connections: open ``n`` to the port, each answered
#: once (so each was accepted), print "held", keep them until stdin closes.
HOLDER = """
import socket, struct, sys
host, port, n, request = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), bytes.fromhex(sys.argv[4])
held = []
for _ in range(n):
    s = socket.create_connection((host, port), timeout=20)
    try:
        s.sendall(request)
        head = s.recv(4)
    except OSError:           # reset: closed at the accept
        head = b""
    print("answered" if len(head) == 4 else "closed", flush=True)
    held.append(s)
print("held", flush=True)
sys.stdin.read()
"""


@another_account
def test_each_local_user_has_its_own_share_of_the_loopback_address(
        who_server: Any) -> None:
    """Counted per local user, as on the Unix socket: another account holding its
    whole per-peer share of 127.0.0.1 does not lock the daemon's user out."""
    import subprocess

    host, port = who_server(identify_local_peers=True, max_connections_per_peer=2,
                              evict_idle=False)
    request = frame(message("echo", 1, demo_thrift().Echo.echo_args(s=""))).hex()
    with subprocess.Popen([SYSTEM_PYTHON, "-I", "-c", HOLDER, host, str(port), "3",
                           request], user=NOBODY_UID, stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as holder:
        _hold_and_check(holder, host, port, request)


def _hold_and_check(holder: Any, host: str, port: int, request: str) -> None:
    try:
        assert holder.stdout is not None
        lines = [holder.stdout.readline().strip() for _ in range(4)]
        # Its third is over its own share of two.
        assert lines == ["answered", "answered", "closed", "held"]
        with socket.create_connection((host, port), timeout=10) as one, \
                socket.create_connection((host, port), timeout=10) as two:
            assert _who(one) == _who(two) == repr(ME)
            with socket.create_connection((host, port), timeout=10) as three:
                three.sendall(bytes.fromhex(request))
                assert wait_closed(three) == b""      # and ours is two as well
    finally:
        holder.stdin.close()
        holder.wait(20)
