"""Issue 27, item 4: the web side's slots against connections without credentials, on
a real ``nimbus-thrift nimbus`` with mutual TLS. Before: a connection counted from its
accept, before its TLS handshake, and had header_timeout (10 s) to finish it, so 256
silent connections from one address kept every slot and a good browser got 0 of 25
answers in 25 s. Now an address holds at most 32, the handshake has 5 s, and a full
side evicts the longest-waiting connection (web/limits.py, Slots)."""

from __future__ import annotations

import json
import socket
import ssl
from pathlib import Path
from typing import Any, Iterator

import pytest

from nimbus_thrift.nimbus.web import HttpServer
from nimbus_thrift.nimbus.web.limits import HANDSHAKE_TIMEOUT, HttpLimits
from nimbus_thrift.nimbus.web.messages import Response

from support.attacked_daemon import AttackedDaemon
from support.certs import make_pki
from support.rawthrift import closed_by_peer
from support.web import http_get

#: Requests the good browser makes during each attack (the issue's count).
GOOD_REQUESTS = 25


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return make_pki(tmp_path_factory.mktemp("pki"), clients=("alice",))


@pytest.fixture
def daemon(tmp_path: Path, pki: Any) -> Iterator[AttackedDaemon]:
    d = AttackedDaemon(tmp_path, ui_port=-1, users="alice",
                       tls_cert_file=str(pki.server.cert), tls_key_file=str(pki.server.key),
                       tls_client_ca_file=str(pki.ca.cert))
    yield d
    d.stop()


def ui_address(daemon: AttackedDaemon) -> tuple[str, int]:
    url = daemon.events("ui_listening")[0]["url"]
    host, _, port = url.removeprefix("https://").rstrip("/").rpartition(":")
    return host, int(port)


def browser(pki: Any) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca.cert))
    context.check_hostname = False
    context.load_cert_chain(str(pki.clients["alice"].cert), str(pki.clients["alice"].key))
    return context


def silent(address: tuple[str, int], source: str) -> socket.socket:
    return socket.create_connection(address, timeout=10, source_address=(source, 0))


def good_answers(address: tuple[str, int], context: ssl.SSLContext) -> list[int]:
    statuses = []
    for _ in range(GOOD_REQUESTS):
        status, _, body = http_get(address, "/api/v1/cluster/summary", context=context)
        assert json.loads(body)
        statuses.append(status)
    return statuses


@pytest.mark.parametrize("sources", [["127.0.0.2"], [f"127.0.0.{i}" for i in range(2, 12)]],
                         ids=["one-address", "ten-addresses"])
def test_silent_connections_leave_a_browser_served(daemon: AttackedDaemon, pki: Any,
                                                   sources: list[str]) -> None:
    address = ui_address(daemon)
    # 300 connections that never start a handshake: more than the side's 256 slots.
    attack = [silent(address, sources[i % len(sources)]) for i in range(300)]
    try:
        assert good_answers(address, browser(pki)) == [200] * GOOD_REQUESTS
        # The side kept its bound: most of the attacker's connections were closed.
        assert sum(closed_by_peer(s, wait=0.01) for s in attack) >= 300 - 256
    finally:
        for sock in attack:
            sock.close()


def test_a_connection_that_never_shakes_hands_is_closed_at_the_handshake_deadline(
        daemon: AttackedDaemon) -> None:
    with silent(ui_address(daemon), "127.0.0.2") as sock:
        # Well before header_timeout (10 s) ran out for it, as it did before.
        assert closed_by_peer(sock, wait=HANDSHAKE_TIMEOUT + 3.0)


def test_a_plain_connection_must_send_its_first_byte_within_first_bytes_timeout() -> None:
    # In process, with a short first-bytes deadline and a long header_timeout: the
    # silent connection goes at the first, the one that started a request is read on.
    server = HttpServer(lambda request: Response.text("ok"), host="127.0.0.1", port=0,
                        limits=HttpLimits(first_bytes_timeout=0.5, header_timeout=30.0))
    address = server.start()
    try:
        with silent(address, "127.0.0.2") as quiet, silent(address, "127.0.0.3") as started:
            started.sendall(b"GET / HTTP/1.1\r\n")
            assert closed_by_peer(quiet, wait=10.0)
            assert not closed_by_peer(started)
            started.sendall(b"Host: x\r\n\r\n")
            assert started.recv(100).startswith(b"HTTP/1.1 200")
        assert server.counters.timeouts >= 1
    finally:
        server.stop()
