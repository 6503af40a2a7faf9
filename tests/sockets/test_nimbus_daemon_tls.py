"""A team's daemon, end to end: the nimbus daemon on mutual TLS (its own settings:
tls_cert_file, tls_key_file, tls_client_ca_file), our client and CLI with each
person's certificate (scripts/tls/make_certs.py). The certificate's common name is the
principal: it owns what it submits, and another person's kill is refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from support.certs import make_pki
from support.nimbus import FakeLauncher, N, make_zip, port_of, wordcount
from support.rawthrift import wait_for
from nimbus_thrift.client import NimbusClient, TlsError
from nimbus_thrift.nimbus import NimbusDaemon, load_config

CLI = [sys.executable, "-m", "nimbus_thrift.cli"]


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Any:
    return make_pki(tmp_path_factory.mktemp("pki"), clients=("alice", "bob", "ops"))


@pytest.fixture
def daemon(tmp_path: Path, pki: Any) -> Iterator[NimbusDaemon]:
    config = load_config(env={}, flags={"ui_port": 0,
        "data_dir": str(tmp_path / "data"), "port": 0, "admins": "ops",
        "users": "alice,bob",
        "tls_cert_file": str(pki.server.cert), "tls_key_file": str(pki.server.key),
        "tls_client_ca_file": str(pki.ca.cert)})
    d = NimbusDaemon(config, launcher=FakeLauncher())
    d.start()
    yield d
    d.stop(grace=5.0)


def client(daemon: NimbusDaemon, pki: Any, who: str) -> NimbusClient:
    issued = pki.clients[who]
    return NimbusClient("127.0.0.1", port_of(daemon), cert_file=str(issued.cert),
                        key_file=str(issued.key), ca_file=str(pki.ca.cert),
                        connect_attempts=1)


def submit(c: NimbusClient, name: str) -> str:
    location = c.beginFileUpload()
    c.uploadChunk(location, make_zip())
    c.finishFileUpload(location)
    c.submitTopology(name, location, "{}", wordcount())
    return next(t.id for t in c.getClusterInfo().topologies if t.name == name)


def test_the_certificate_name_owns_what_it_submits(daemon, pki):
    with client(daemon, pki, "alice") as alice, client(daemon, pki, "bob") as bob, \
            client(daemon, pki, "ops") as ops:
        tid = submit(alice, "wc")
        listed = bob.getClusterInfo().topologies       # any user may list
        assert [(t.name, t.owner) for t in listed] == [("wc", "alice")]
        with pytest.raises(N.AuthorizationException) as refused:
            bob.killTopology("wc")
        assert "'bob'" in refused.value.msg and "killTopology" in refused.value.msg
        assert alice.getTopologyInfo(tid).status == "ACTIVE"   # nothing changed
        alice.deactivate("wc")
        ops.killTopologyWithOpts("wc", N.KillOptions(wait_secs=0))   # an admin may
        assert alice.getTopologyInfo(tid).status == "KILLED"
    metrics = daemon.server.metrics()
    assert metrics.tls_handshakes == 3 and metrics.tls_handshakes_failed == 0


def test_without_a_certificate_the_client_gets_one_sentence(daemon, pki):
    c = NimbusClient("127.0.0.1", port_of(daemon), ca_file=str(pki.ca.cert),
                     connect_attempts=1)
    with pytest.raises(TlsError) as failed:
        c.getClusterInfo()
    assert "presented none" in str(failed.value)
    c.close()
    # The client reads the server's alert before the selector has counted the failure
    # (the same step, on another thread): wait for the count, do not race it.
    wait_for(lambda: daemon.server.metrics().tls_handshakes_failed == 1,
             what="the failed handshake counted")


def test_the_cli_lists_over_tls_with_a_certificate(daemon, pki, tmp_path):
    with client(daemon, pki, "alice") as alice:
        submit(alice, "wc")
    bob = pki.clients["bob"]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path),
           "XDG_DATA_HOME": str(tmp_path / "nowhere")}
    listed = subprocess.run(
        CLI + ["list", "--port", str(port_of(daemon)), "--tls-cert", str(bob.cert),
               "--tls-key", str(bob.key), "--tls-ca", str(pki.ca.cert)],
        capture_output=True, text=True, timeout=60, env=env)
    assert listed.returncode == 0, listed.stderr
    header, row = listed.stdout.splitlines()[:2]
    assert header.split()[:4] == ["NAME", "ID", "STATUS", "OWNER"]
    assert row.split()[0] == "wc" and row.split()[3] == "alice"
    killed = subprocess.run(
        CLI + ["kill", "wc", "--port", str(port_of(daemon)), "--tls-cert", str(bob.cert),
               "--tls-key", str(bob.key), "--tls-ca", str(pki.ca.cert)],
        capture_output=True, text=True, timeout=60, env=env)
    assert killed.returncode == 1
    assert "Traceback" not in killed.stderr
    assert "'bob' may not" in killed.stderr
