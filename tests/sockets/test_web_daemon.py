"""The daemon's HTTP side on real sockets: a daemon with a fake launcher and
``ui_port: -1`` (any free port). Every Storm UI path over HTTP (unknown ids 404,
refused actions 403/400), /metrics parsed with prometheus_client's parser and moving
with the Thrift calls made, keep-alive, abuse (a slow client, 20 KiB of headers, 300
connections) while Thrift calls keep answering, TLS with client certificates, and the
settings (port in use, exposure, the CLI)."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from nimbus_thrift.cli import main
from nimbus_thrift.client import NimbusClient
from nimbus_thrift.nimbus import DaemonError, NimbusDaemon, load_config
from nimbus_thrift.nimbus.launcher import ComponentStats
from nimbus_thrift.nimbus.web import httpserver
from nimbus_thrift.nimbus.web.limits import HttpLimits

from support.certs import make_pki
from support.nimbus import FakeClock, make_zip, port_of, wordcount
from support.rawthrift import closed_by_peer, connect, wait_closed, wait_for
from support.web import FiguresLauncher, http_get

#: Generous: a Thrift call that takes longer while the HTTP side is abused is slowed.
THRIFT_CALL_BOUND_SECS = 2.0


def start(tmp_path: Path, **flags: Any) -> NimbusDaemon:
    config = load_config(env={}, flags={"data_dir": str(tmp_path / "data"), "port": 0,
                                        "ui_port": -1, **flags})
    daemon = NimbusDaemon(config, launcher=FiguresLauncher(FakeClock()))
    daemon.start()
    return daemon


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[NimbusDaemon]:
    d = start(tmp_path)
    yield d
    d.stop(grace=5.0)


def ui(daemon: NimbusDaemon) -> tuple[str, int]:
    assert daemon.web is not None and daemon.web.address is not None
    return daemon.web.address


def thrift(daemon: NimbusDaemon) -> NimbusClient:
    return NimbusClient("127.0.0.1", port_of(daemon), connect_attempts=1)


def submit(daemon: NimbusDaemon, name: str = "wc") -> str:
    with thrift(daemon) as c:
        location = c.beginFileUpload()
        c.uploadChunk(location, make_zip())
        c.finishFileUpload(location)
        c.submitTopology(name, location, "{}", wordcount())
        return next(t.id for t in c.getClusterInfo().topologies if t.name == name)


def get_json(daemon: NimbusDaemon, path: str) -> tuple[int, Any]:
    status, _, body = http_get(ui(daemon), path)
    return status, json.loads(body)


def scrape(daemon: NimbusDaemon) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    status, headers, body = http_get(ui(daemon), "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(body.decode()) for s in f.samples}


# --- every path -----------------------------------------------------------------------

def test_the_url_is_logged_and_exposed(daemon: NimbusDaemon) -> None:
    host, port = ui(daemon)
    assert daemon.ui_url == f"http://127.0.0.1:{port}/"
    assert port != daemon.config.port


@pytest.mark.parametrize("path", [
    "/api/v1/cluster/configuration", "/api/v1/cluster/summary", "/api/v1/nimbus/summary",
    "/api/v1/supervisor/summary", "/api/v1/topology/summary", "/api/v1/topology/{id}",
    "/api/v1/topology/{id}?window=600", "/api/v1/topology/{id}/component/split",
    "/api/v1/topology-workers/{id}", "/api/nimbus-thrift/topology/{id}/history"])
def test_every_get_path_answers_and_unknown_ids_are_404(daemon: NimbusDaemon,
                                                        path: str) -> None:
    tid = submit(daemon)
    status, body = get_json(daemon, path.format(id=tid))
    assert status == 200, body
    if "{id}" in path:
        status, body = get_json(daemon, path.format(id="nope-1-1"))
        assert status == 404 and body["error"] == "404 Not Found"


def test_actions_over_http_and_their_refusals(daemon: NimbusDaemon) -> None:
    tid = submit(daemon)
    status, page = get_json(daemon, f"/api/v1/topology/{tid}")
    token = page["antiForgeryToken"]
    host, port = ui(daemon)
    origin = {"Origin": f"http://{host}:{port}", "x-csrf-token": token}
    status, _, body = http_get(ui(daemon), f"/api/v1/topology/{tid}/deactivate",
                               method="POST", headers=origin)
    assert status == 200 and json.loads(body)["status"] == "success"
    assert get_json(daemon, f"/api/v1/topology/{tid}")[1]["status"] == "INACTIVE"
    for path, headers, expected in [
            (f"/api/v1/topology/{tid}/activate", {}, 403),                 # no token
            (f"/api/v1/topology/{tid}/activate",
             {**origin, "Origin": "http://evil.example"}, 403),
            (f"/api/v1/topology/{tid}/kill/soon", origin, 400),
            (f"/api/v1/topology/{tid}/rebalance/-5", origin, 400),
            ("/api/v1/topology/nope-1-1/activate", origin, 404),
            ("/api/v1/topology/nope-1-1/deactivate", origin, 404),
            ("/api/v1/topology/nope-1-1/rebalance/0", origin, 404),
            ("/api/v1/topology/nope-1-1/kill/0", origin, 404)]:
        status, _, body = http_get(ui(daemon), path, method="POST", headers=headers)
        assert status == expected, (path, body)
        assert set(json.loads(body)) == {"error", "errorMessage"}
    assert get_json(daemon, f"/api/v1/topology/{tid}")[1]["status"] == "INACTIVE"
    # kill/30: it stays KILLED (not yet removed) for the check below.
    for action in ("activate", "rebalance/0", "kill/30"):
        status, _, body = http_get(ui(daemon), f"/api/v1/topology/{tid}/{action}",
                                   method="POST", headers=origin)
        assert status == 200, body
    assert get_json(daemon, f"/api/v1/topology/{tid}")[1]["status"] == "KILLED"
    # GET on an action, POST on a page: 405 with Allow.
    status, headers, _ = http_get(ui(daemon), f"/api/v1/topology/{tid}/activate")
    assert (status, headers["allow"]) == (405, "POST")


def test_page_and_head_and_keep_alive(daemon: NimbusDaemon) -> None:
    host, port = ui(daemon)
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.request("GET", "/")
        first = conn.getresponse()
        assert first.status == 200 and first.getheader("content-type").startswith("text/html")
        first.read()
        sock = conn.sock
        conn.request("HEAD", "/api/v1/cluster/summary")
        head = conn.getresponse()
        assert head.status == 200 and int(head.getheader("content-length")) > 0
        assert head.read() == b""
        conn.request("GET", "/api/v1/cluster/summary")
        assert conn.getresponse().status == 200
        assert conn.sock is sock             # one connection for all three
    finally:
        conn.close()


# --- /metrics ---------------------------------------------------------------------------

def test_metrics_counters_move_with_the_calls_made(daemon: NimbusDaemon) -> None:
    tid = submit(daemon)
    before = scrape(daemon)
    ok = ("nimbus_thrift_requests_total",
          (("method", "getClusterInfo"), ("outcome", "ok")))
    declared = ("nimbus_thrift_requests_total",
                (("method", "getTopologyInfo"), ("outcome", "declared")))
    count = ("nimbus_thrift_request_duration_seconds_count", (("method", "getClusterInfo"),))
    with thrift(daemon) as c:
        for _ in range(5):
            c.getClusterInfo()
        with pytest.raises(Exception):
            c.getTopologyInfo("nope-1-1")
    wait_for(lambda: scrape(daemon)[ok] == before[ok] + 5, what="5 more ok calls")
    after = scrape(daemon)
    assert after[count] == before[count] + 5
    assert after[declared] == before.get(declared, 0) + 1
    accepted = ("nimbus_thrift_connections_accepted_total", ())
    assert after[accepted] >= before[accepted] + 1
    assert after[("nimbus_thrift_topologies", (("status", "ACTIVE"),))] == 1
    assert after[("nimbus_thrift_http_requests_total", ())] > \
        before[("nimbus_thrift_http_requests_total", ())]
    with thrift(daemon) as c:
        c.deactivate("wc")
    assert scrape(daemon)[("nimbus_thrift_topologies", (("status", "INACTIVE"),))] == 1
    emitted = ("nimbus_thrift_component_emitted_total",
               (("component", "split"), ("topology", tid)))
    assert emitted not in after          # the fake launcher reports no figures yet
    assert daemon.handler is not None
    daemon.handler.launcher.stats[tid] = {"split": ComponentStats(emitted=42, processed=7)}
    assert scrape(daemon)[emitted] == 42


# --- abuse --------------------------------------------------------------------------------

@pytest.fixture
def quick(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[NimbusDaemon]:
    """A daemon whose HTTP side gives up on slow clients after 1 s (not 10)."""
    monkeypatch.setattr(httpserver, "HttpLimits",
                        lambda: HttpLimits(header_timeout=1.0, idle_timeout=1.0))
    d = start(tmp_path)
    yield d
    d.stop(grace=5.0)


def timed_thrift_call(daemon: NimbusDaemon) -> float:
    started = time.monotonic()
    with thrift(daemon) as c:
        c.getClusterInfo()
    return time.monotonic() - started


def test_a_slow_client_is_closed_while_thrift_answers(quick: NimbusDaemon) -> None:
    slow = connect(ui(quick))
    idle = connect(ui(quick))
    try:
        slow.sendall(b"GET /api/v1/cluster/summary HTTP/1.1\r\nHost: a\r\nX-Slow: ")
        assert timed_thrift_call(quick) < THRIFT_CALL_BOUND_SECS
        # Closed by the header timeout (1 s), without an answer; generous bound.
        assert wait_closed(slow, timeout=10) == b""
        assert wait_closed(idle, timeout=10) == b""
        assert scrape(quick)[("nimbus_thrift_http_timeouts_total", ())] >= 2
        # Their slots came back.
        assert quick.web is not None
        wait_for(lambda: quick.web.counters.connections_open == 0, what="slots back")
    finally:
        slow.close()
        idle.close()


def test_a_kept_alive_connection_is_closed_when_idle(quick: NimbusDaemon) -> None:
    sock = connect(ui(quick))
    try:
        sock.sendall(b"GET /api/v1/nimbus/summary HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        answer = wait_closed(sock, timeout=10)     # answered, then closed after 1 s idle
        assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
    finally:
        sock.close()


def test_huge_headers_are_431_and_the_connection_closed(daemon: NimbusDaemon) -> None:
    sock = connect(ui(daemon))
    try:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: a\r\nX-Big: " + b"a" * (20 << 10)
                     + b"\r\n\r\n")
        answer = wait_closed(sock, timeout=10)
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 431 ")
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"] == \
        "431 Request Header Fields Too Large"
    assert timed_thrift_call(daemon) < THRIFT_CALL_BOUND_SECS
    assert scrape(daemon)[("nimbus_thrift_http_bad_requests_total", ())] == 1
    assert daemon.web is not None
    wait_for(lambda: daemon.web.counters.connections_open == 0, what="the slot back")


def test_a_body_over_the_limit_is_413(daemon: NimbusDaemon) -> None:
    status, _, body = http_get(ui(daemon), "/api/v1/topology/x/rebalance/0", method="POST",
                               body=b"{" + b" " * (64 << 10) + b"}")
    assert status == 413
    assert json.loads(body)["errorMessage"] == "the request body is over 65536 bytes"


def test_300_connections_are_bounded_and_thrift_keeps_answering(daemon: NimbusDaemon
                                                                ) -> None:
    socks = [connect(ui(daemon)) for _ in range(300)]
    assert daemon.web is not None
    web = daemon.web
    try:
        # From one address, at most max_connections_per_address (32) stay open: each
        # one beyond takes the place of the longest-waiting one (limits.Slots).
        wait_for(lambda: web.counters.connections_evicted >= 268, timeout=20,
                 what="268 evicted connections")
        closed = sum(closed_by_peer(s, wait=0.05) for s in socks)
        assert closed >= 268
        assert web.counters.connections_open <= 32
        assert timed_thrift_call(daemon) < THRIFT_CALL_BOUND_SECS
    finally:
        for s in socks:
            s.close()
    # Once they are gone, their slots come back and the HTTP side serves again.
    assert daemon.web is not None
    wait_for(lambda: daemon.web.counters.connections_open == 0, timeout=20,
             what="every slot back")
    wait_for(lambda: get_json(daemon, "/api/v1/cluster/summary")[0] == 200, timeout=20,
             what="the HTTP side to serve again")


# --- TLS -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return make_pki(tmp_path_factory.mktemp("pki"), clients=("alice", "bob"))


def client_context(pki: Any, who: str | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca.cert))
    context.check_hostname = False
    if who is not None:
        issued = pki.clients[who] if who in pki.clients else pki.foreign_client
        context.load_cert_chain(str(issued.cert), str(issued.key))
    return context


def test_tls_with_client_certificates_and_their_principal(tmp_path: Path, pki: Any) -> None:
    daemon = start(tmp_path, users="alice", tls_cert_file=str(pki.server.cert),
                   tls_key_file=str(pki.server.key), tls_client_ca_file=str(pki.ca.cert))
    try:
        assert daemon.ui_url is not None and daemon.ui_url.startswith("https://")
        status, _, body = http_get(ui(daemon), "/api/v1/cluster/summary",
                                   context=client_context(pki, "alice"))
        assert status == 200, body
        # bob's certificate is good, but only alice may use the cluster: the principal
        # is the certificate's CN, as on the Thrift side.
        status, _, body = http_get(ui(daemon), "/api/v1/cluster/summary",
                                   context=client_context(pki, "bob"))
        assert status == 403 and "'bob'" in json.loads(body)["errorMessage"]
        for who in (None, "stranger"):
            with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
                http_get(ui(daemon), "/api/v1/cluster/summary",
                         context=client_context(pki, who))
        # Plain HTTP to the TLS port gets no answer.
        with pytest.raises((http.client.HTTPException, ConnectionError, OSError)):
            http_get(ui(daemon), "/api/v1/cluster/summary")
        status, _, _ = http_get(ui(daemon), "/api/v1/cluster/summary",
                                context=client_context(pki, "alice"))
        assert status == 200
    finally:
        daemon.stop(grace=5.0)


# --- settings --------------------------------------------------------------------------------

def test_a_ui_port_in_use_is_one_sentence(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(DaemonError) as caught:
            start(tmp_path, ui_port=port)
        assert str(caught.value).startswith(f"ui_port {port} is in use on 127.0.0.1")
    # Nothing was left behind: the same data directory starts at once.
    start(tmp_path).stop(grace=5.0)


def test_a_non_loopback_ui_host_needs_mutual_tls(tmp_path: Path) -> None:
    with pytest.raises(DaemonError) as caught:
        start(tmp_path, ui_host="0.0.0.0")
    assert "ui_host" in str(caught.value) and "mutual TLS" in str(caught.value)
    # ui_port 0 turns the web UI off: nothing is exposed, so nothing is refused.
    start(tmp_path, ui_port=0, ui_host="0.0.0.0").stop(grace=5.0)


def test_ui_port_zero_serves_no_http(tmp_path: Path) -> None:
    daemon = start(tmp_path, ui_port=0)
    try:
        assert daemon.web is None and daemon.ui_url is None
    finally:
        daemon.stop(grace=5.0)


def test_the_cli_prints_the_url_and_passes_ui_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NIMBUS_THRIFT_UI_PORT", "9181")
    monkeypatch.setenv("NIMBUS_THRIFT_UI_HOST", "127.0.0.2")
    result = CliRunner().invoke(main, ["ui"])
    assert (result.exit_code, result.output) == (0, "http://127.0.0.2:9181/\n")
    monkeypatch.setenv("NIMBUS_THRIFT_UI_PORT", "0")
    result = CliRunner().invoke(main, ["ui"])
    assert result.exit_code == 1 and "the web UI is off (ui_port is 0)" in result.output
    monkeypatch.setenv("NIMBUS_THRIFT_UI_PORT", "70000")
    result = CliRunner().invoke(main, ["ui"])
    assert result.exit_code == 2 and "ui_port must be between 0 (off) and 65535" \
        in result.output

    from nimbus_thrift import nimbus as daemon_package
    seen: dict[str, Any] = {}

    def record(file: Any, env: Any, flags: dict[str, Any]) -> Any:
        seen.update(flags)
        raise daemon_package.ConfigError("recorded")
    monkeypatch.setattr(daemon_package, "load_config", record)
    CliRunner().invoke(main, ["nimbus", "--ui-port", "-1"])
    assert seen["ui_port"] == -1
