"""Who a caller of the daemon is, over real sockets (issue 24): a TCP client on loopback
is the OS user owning its socket (the kernel's sock_diag, rpc/localpeer.py; its own
tests: test_server_local_peers.py), on the Thrift and the HTTP side, so another local
account (``nobody``, uid 65534, in a child process) is refused as itself while the
daemon's own user is served on the same port; nobody identified (plain TCP from another
address) is ``anonymous`` and refused unless allow_anonymous; a certificate may not
claim root, anonymous or the daemon's user; /metrics shows a reader only the
topologies it may read; the configuration carries no paths and no principals.

The other account's clients are tests/support/otheruser.py's.
"""

from __future__ import annotations

import ipaddress
import json
import os
import pwd
import socket
import ssl
from pathlib import Path
from typing import Any, Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from support.certs import client_context, make_pki, with_clients
from support.nimbus import FakeLauncher, N, make_zip, port_of, tcp, wordcount
from support.otheruser import HTTP_CLIENT, NOBODY, another_account, as_nobody, \
    call_as_nobody
from support.rawthrift import frame, message, roundtrip, wait_closed
from support.web import http_get
from nimbus_thrift.nimbus import NimbusDaemon, load_config

ME = pwd.getpwuid(os.geteuid()).pw_name


def rpc(sock: socket.socket, method: str, **kwargs: Any) -> Any:
    args = getattr(N.Nimbus, method + "_args")(**kwargs)
    reply = roundtrip(sock, frame(message(method, 1, args)), N.Nimbus)
    assert reply.type == 2, reply
    return reply.body


def submit(sock: socket.socket, name: str, conf: dict[str, Any] | None = None) -> str:
    location = rpc(sock, "beginFileUpload").success
    assert rpc(sock, "uploadChunk", location=location, chunk=make_zip()).aze is None
    assert rpc(sock, "finishFileUpload", location=location).aze is None
    result = rpc(sock, "submitTopology", name=name, uploadedJarLocation=location,
                 jsonConf=json.dumps(conf or {}), topology=wordcount())
    assert result.aze is None and result.ite is None, result
    return next(t.id for t in rpc(sock, "getClusterInfo").success.topologies
                if t.name == name)


def ui(daemon: NimbusDaemon) -> tuple[str, int]:
    assert daemon.web is not None and daemon.web.address is not None
    return daemon.web.address


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[Any]:
    started: list[NimbusDaemon] = []

    def make(**flags: Any) -> NimbusDaemon:
        data = tmp_path / f"data{len(started)}"
        config = load_config(env={}, flags={"ui_port": -1, "data_dir": str(data),
                                            "port": 0, **flags})
        daemon = NimbusDaemon(config, launcher=FakeLauncher())
        daemon.start()
        started.append(daemon)
        return daemon
    yield make
    for daemon in started:
        daemon.stop(grace=5.0)


# --- the Thrift side ----------------------------------------------------------------------

@another_account
def test_another_local_account_is_refused_as_itself_on_loopback_tcp(daemons: Any,
                                                                     logs: Any) -> None:
    daemon = daemons()
    result = call_as_nobody(port_of(daemon), "getClusterInfo")
    assert result.success is None
    assert result.aze.msg == (f"{NOBODY!r} may not call getClusterInfo: only the daemon's "
                              "own OS user and admins may use this nimbus (users is not "
                              "set)")
    assert call_as_nobody(port_of(daemon), "beginFileUpload").aze is not None
    assert list((daemon.config.data_dir / "inbox").iterdir()) == []
    # The daemon's own user, on the same port, is served and owns what it submits.
    with tcp(daemon) as sock:
        tid = submit(sock, "mine")
        (listed,) = rpc(sock, "getClusterInfo").success.topologies
        assert listed.owner == ME
    audit = [e for e in logs if e.get("event") == "audit"]
    assert {(e["operation"], e["principal"], e["outcome"]) for e in audit} >= {
        ("getClusterInfo", NOBODY, "refused"), ("beginFileUpload", NOBODY, "refused"),
        ("submitTopology", ME, "ok")}
    assert tid


@another_account
def test_another_local_account_named_in_users_is_served_as_itself(daemons: Any) -> None:
    daemon = daemons(users=f"{ME},{NOBODY}")
    with tcp(daemon) as sock:
        submit(sock, "roots")
    result = call_as_nobody(port_of(daemon), "getClusterInfo")
    assert [(t.name, t.owner) for t in result.success.topologies] == [("roots", ME)]
    refused = call_as_nobody(port_of(daemon), "killTopology", name="roots").aze
    assert refused.msg.startswith(f"{NOBODY!r} may not call killTopology")


def _non_loopback_address() -> str | None:
    """An address of this machine that is not loopback (a connection to it from here
    is not a loopback connection), or None."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.1", 9))         # TEST-NET-1: no packet is sent
        address = probe.getsockname()[0]
    except OSError:
        return None
    finally:
        probe.close()
    return None if ipaddress.ip_address(address).is_loopback else address


EXTERNAL = _non_loopback_address()
external = pytest.mark.skipif(EXTERNAL is None, reason="no non-loopback address here")


@external
@pytest.mark.parametrize("allowed", [False, True])
def test_a_client_nobody_identified_is_anonymous(daemons: Any, allowed: bool) -> None:
    assert EXTERNAL is not None
    daemon = daemons(host=EXTERNAL, insecure=True, allow_anonymous=allowed)
    with socket.create_connection((EXTERNAL, port_of(daemon)), timeout=10) as sock:
        result = rpc(sock, "getClusterInfo")
    status, _, body = http_get(ui(daemon), "/api/v1/cluster/summary")
    if allowed:
        assert result.aze is None and result.success is not None
        assert status == 200
    else:
        assert result.aze.msg == ("'anonymous' may not call getClusterInfo: the caller is "
                                  "not identified (plain TCP from another machine, or a "
                                  "certificate without a common name) and allow_anonymous "
                                  "is off")
        assert status == 403


# --- the HTTP side ------------------------------------------------------------------------

@another_account
def test_another_local_account_is_refused_over_http(daemons: Any) -> None:
    daemon = daemons()
    host, port = ui(daemon)
    status, *body = as_nobody(HTTP_CLIENT, host, str(port), "/api/v1/cluster/summary")
    assert status == "403", body
    status, *body = as_nobody(HTTP_CLIENT, host, str(port), "/metrics")
    assert status == "403" and "nimbus_thrift_" not in "".join(body)
    status, _, _ = http_get((host, port), "/api/v1/cluster/summary")     # root
    assert status == 200
    status, _, scraped = http_get((host, port), "/metrics")
    assert status == 200 and b"nimbus_thrift_topologies" in scraped


@another_account
def test_metrics_show_a_reader_only_the_topologies_it_may_read(daemons: Any) -> None:
    daemon = daemons(users=f"{ME},{NOBODY}")
    with tcp(daemon) as sock:
        mine = submit(sock, "mine")
        shared = submit(sock, "shared", {"topology.readonly.users": [NOBODY]})
    host, port = ui(daemon)

    def topologies_in(text: str) -> tuple[set[str], dict[str, float]]:
        families = list(text_string_to_metric_families(text))
        labelled = {s.labels["topology"] for f in families for s in f.samples
                    if "topology" in s.labels}
        counts = {s.labels["status"]: s.value for f in families
                  if f.name == "nimbus_thrift_topologies" for s in f.samples}
        return labelled, counts
    status, *body = as_nobody(HTTP_CLIENT, host, str(port), "/metrics")
    assert status == "200"
    labelled, counts = topologies_in("\n".join(body))
    assert labelled == {shared}
    assert counts["ACTIVE"] == 2                # the daemon-wide series stay whole
    status, _, scraped = http_get((host, port), "/metrics")        # root: both
    assert topologies_in(scraped.decode())[0] == {mine, shared}


# --- certificates may not claim reserved names -------------------------------------------

@pytest.fixture(scope="module")
def pki(tmp_path_factory: Any) -> Any:
    return with_clients(make_pki(tmp_path_factory.mktemp("pki"), clients=("alice",)),
                        "root", "anonymous", ME)


@pytest.mark.parametrize("cn", ["root", "anonymous", "me"])
def test_a_certificate_for_a_reserved_name_is_closed_after_the_handshake(
        daemons: Any, pki: Any, logs: Any, cn: str) -> None:
    cn = ME if cn == "me" else cn
    daemon = daemons(users="alice", tls_cert_file=str(pki.server.cert),
                     tls_key_file=str(pki.server.key), tls_client_ca_file=str(pki.ca.cert))
    request = frame(message("getClusterInfo", 1, N.Nimbus.getClusterInfo_args()))
    # alice is served ...
    with client_context(pki, "alice").wrap_socket(
            socket.create_connection(("127.0.0.1", port_of(daemon)), timeout=10),
            server_hostname="127.0.0.1") as alice:
        assert rpc(alice, "getClusterInfo").success is not None
    # ... a certificate naming a reserved name gets no answer at all, on both sides.
    with client_context(pki, cn).wrap_socket(
            socket.create_connection(("127.0.0.1", port_of(daemon)), timeout=10),
            server_hostname="127.0.0.1") as claimed:
        try:
            claimed.sendall(request)
            answer = wait_closed(claimed)
        except (ssl.SSLError, OSError):
            answer = b""
    assert answer == b""
    with pytest.raises((ssl.SSLError, OSError)):
        http_get(ui(daemon), "/api/v1/cluster/summary", context=client_context(pki, cn))
    status, _, _ = http_get(ui(daemon), "/api/v1/cluster/summary",
                            context=client_context(pki, "alice"))
    assert status == 200
    refusals = [(e["event"], e["principal"]) for e in logs
                if e.get("event") in ("tls_client_refused", "http_tls_client_refused")]
    assert refusals == [("tls_client_refused", cn), ("http_tls_client_refused", cn)]
    assert all(e["log_level"] == "warning" and "no certificate may claim" in e["reason"]
               for e in logs if e.get("event", "").endswith("tls_client_refused"))
    assert daemon.server is not None
    assert daemon.server.metrics().tls_handshakes_failed == 1


def test_a_local_client_without_a_certificate_principal_stays_its_os_user(
        daemons: Any, pki: Any) -> None:
    # TLS without client certificates: the kernel's word for a loopback client stands.
    daemon = daemons(tls_cert_file=str(pki.server.cert), tls_key_file=str(pki.server.key))
    context = ssl.create_default_context(cafile=str(pki.ca.cert))
    with context.wrap_socket(socket.create_connection(("127.0.0.1", port_of(daemon)),
                                                      timeout=10),
                             server_hostname="127.0.0.1") as sock:
        tid = submit(sock, "mine")
        assert rpc(sock, "getTopologyInfo", id=tid).success.owner == ME


# --- the configuration --------------------------------------------------------------------

def test_the_configuration_shows_no_paths_and_no_principals(daemons: Any,
                                                           tmp_path: Path) -> None:
    daemon = daemons(admins="ops-person", users=f"{ME},alice-person",
                     principal_users="ci-cert=ci-person")
    with tcp(daemon) as sock:
        text = rpc(sock, "getNimbusConf").success
    status, _, body = http_get(ui(daemon), "/api/v1/cluster/configuration")
    assert status == 200
    for shown in (text, body.decode()):
        for word in (str(tmp_path), "nimbus.sock", "ops-person", "alice-person",
                     "ci-person", "ci-cert"):
            assert word not in shown
        conf = json.loads(shown)
        assert "storm.local.dir" not in conf and conf["nimbus.thrift.port"] == \
            port_of(daemon)
        assert not {"nimbus-thrift.data_dir", "nimbus-thrift.unix_socket",
                    "nimbus-thrift.admins", "nimbus-thrift.users"} & set(conf)
