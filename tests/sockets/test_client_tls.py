"""NimbusClient over TLS, against a real TLS Thrift server (thriftpy2's processor behind
an ``ssl`` socket, tests/support/certs.py) with certificates made by
scripts/tls/make_certs.py: mutual TLS that works, then each refusal as the one
sentence a user reads, never retried. Also what the script makes."""

from __future__ import annotations

import json
import os
import socket
import ssl
import stat
import subprocess
import sys
import threading
from typing import Any

import pytest

import nimbus_thrift
from nimbus_thrift.client.client import NimbusClient, nimbus_idl
from nimbus_thrift.client.errors import ConnectionLost, NimbusUnavailable, TlsError
from nimbus_thrift.client.tls import client_context

from support.certs import SCRIPT, Pki, TlsThriftServer, make_certs, make_pki, server_context

nimbus = nimbus_idl()
TLS12 = ssl.TLSVersion.TLSv1_2


class Handler:
    def __init__(self) -> None:
        self.calls = 0

    def getNimbusConf(self) -> str:
        self.calls += 1
        return json.dumps({"calls": self.calls})

    def getClusterInfo(self) -> Any:
        return nimbus.ClusterSummary(supervisors=[], nimbus_uptime_secs=1, topologies=[],
                                     nimbuses=[])


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def serve(context: ssl.SSLContext, **kwargs: Any) -> TlsThriftServer:
    return TlsThriftServer(nimbus.Nimbus, Handler(), context, **kwargs)


def mutual(pki: Pki, maximum: ssl.TLSVersion | None = None) -> ssl.SSLContext:
    return server_context(pki.server, client_ca=pki.ca.cert, maximum=maximum)


def as_client(pki: Pki, name: str = "alice") -> dict[str, Any]:
    return {"cert_file": pki.clients[name].cert, "key_file": pki.clients[name].key,
            "ca_file": pki.ca.cert}


def refusal(server: TlsThriftServer, host: str = "127.0.0.1", **kwargs: Any) -> TlsError:
    """The TlsError of a first call with three connection attempts allowed."""
    client = NimbusClient(host, server.port, connect_attempts=3, backoff_initial=0,
                          backoff_max=0, **kwargs)
    with pytest.raises(TlsError) as info:
        client.getNimbusConf()
    client.close()
    return info.value


# --------------------------------------------------------------------------- working


@pytest.mark.parametrize("maximum", [None, TLS12], ids=["tls1.3", "tls1.2"])
def test_mutual_tls_calls_work_and_the_server_sees_the_certificates_name(pki, maximum):
    with serve(mutual(pki, maximum)) as server:
        with NimbusClient("127.0.0.1", server.port, **as_client(pki, "bob")) as client:
            assert json.loads(client.getNimbusConf()) == {"calls": 1}
            assert json.loads(client.getNimbusConf()) == {"calls": 2}
            assert client.getClusterInfo().nimbus_uptime_secs == 1
            assert "tls" in repr(client)
    assert server.peers == ["bob"]
    assert server.accepted == 1          # an idle TLS connection is kept between calls


def test_server_only_tls_with_the_ca_and_a_host_name(pki):
    with serve(server_context(pki.server)) as server:
        with NimbusClient("localhost", server.port, ca_file=pki.ca.cert) as client:
            assert json.loads(client.getNimbusConf()) == {"calls": 1}
    assert server.peers == [None]


def test_a_callers_own_ssl_context(pki):
    context = ssl.create_default_context(cafile=str(pki.ca.cert))
    context.load_cert_chain(pki.clients["alice"].cert, pki.clients["alice"].key)
    with serve(mutual(pki)) as server:
        with NimbusClient("127.0.0.1", server.port, ssl_context=context) as client:
            assert json.loads(client.getNimbusConf()) == {"calls": 1}
    assert server.peers == ["alice"]


def test_a_tls_connection_the_server_closed_while_idle_is_replaced(pki):
    with serve(mutual(pki), close_after=1) as server:
        with NimbusClient("127.0.0.1", server.port, **as_client(pki)) as client:
            assert json.loads(client.getNimbusConf()) == {"calls": 1}
            # The close is seen before the next call sends anything (TLS cannot peek).
            assert json.loads(client.getNimbusConf()) == {"calls": 2}
    assert server.accepted == 2


# --------------------------------------------------------------------------- refusals
# Each: the class, who refused, why, in the message; one connection (no retry).


def test_server_certificate_from_an_unknown_ca(pki):
    with serve(server_context(pki.server)) as server:
        err = refusal(server, ca_file=pki.foreign_ca.cert)
    assert (err.refused, err.cause) == ("server", "unknown_ca")
    assert str(err) == (f"TLS with nimbus at 127.0.0.1:{server.port} failed: this client "
                        f"refused the server's certificate, which is not signed by a CA "
                        f"this client trusts (ca_file {pki.foreign_ca.cert}) "
                        f"[unable to get local issuer certificate]")
    assert server.accepted == 1


def test_expired_server_certificate(pki):
    with serve(server_context(pki.expired_server)) as server:
        err = refusal(server, ca_file=pki.ca.cert)
    assert (err.refused, err.cause) == ("server", "expired")
    assert "refused the server's certificate, which has expired [certificate has expired]" \
        in str(err)
    assert server.accepted == 1


def test_server_certificate_for_another_host_name(pki):
    with serve(server_context(pki.other_host_server)) as server:
        err = refusal(server, ca_file=pki.ca.cert)
    assert (err.refused, err.cause) == ("server", "hostname")
    assert "refused the server's certificate, which is not issued for '127.0.0.1'" in str(err)
    assert server.accepted == 1


@pytest.mark.parametrize("maximum, alert", [
    (None, "TLSV13_ALERT_CERTIFICATE_REQUIRED"),     # after the client's handshake
    (TLS12, "SSLV3_ALERT_HANDSHAKE_FAILURE"),        # in it
], ids=["tls1.3", "tls1.2"])
def test_server_requires_a_client_certificate_and_none_was_given(pki, maximum, alert):
    with serve(mutual(pki, maximum)) as server:
        err = refusal(server, ca_file=pki.ca.cert)
    assert (err.refused, err.cause) == ("client", "no_client_cert")
    assert str(err) == (f"TLS with nimbus at 127.0.0.1:{server.port} failed: the server "
                        f"requires a client certificate and this client presented none "
                        f"(give it a certificate and key) [{alert}]")
    assert server.accepted == 1
    assert server.peers == []


@pytest.mark.parametrize("maximum", [None, TLS12], ids=["tls1.3", "tls1.2"])
def test_server_refuses_a_client_certificate_from_another_ca(pki, maximum):
    foreign = pki.foreign_client
    with serve(mutual(pki, maximum)) as server:
        err = refusal(server, cert_file=foreign.cert, key_file=foreign.key,
                      ca_file=pki.ca.cert)
    assert (err.refused, err.cause) == ("client", "unknown_ca")
    assert f"the server refused this client's certificate ({foreign.cert}), which is not " \
           f"signed by a CA it trusts [TLSV1_ALERT_UNKNOWN_CA]" in str(err)
    assert server.accepted == 1


def test_server_refuses_an_expired_client_certificate(pki):
    expired = pki.expired_client
    with serve(mutual(pki)) as server:
        err = refusal(server, cert_file=expired.cert, key_file=expired.key,
                      ca_file=pki.ca.cert)
    assert (err.refused, err.cause) == ("client", "expired")
    assert f"this client's certificate ({expired.cert}), which has expired" in str(err)


def test_a_tls13_refusal_waiting_on_a_connected_client_is_read_as_one(pki):
    # connect() succeeds (TLS 1.3: the client's handshake ends before the server has
    # checked anything); the refusal then waits on the idle connection, where the
    # check for a dropped connection before the call must read it as a refusal.
    with serve(mutual(pki)) as server:
        client = NimbusClient("127.0.0.1", server.port, ca_file=pki.ca.cert)
        client.connect()
        assert server.refused.wait(10)      # the alert is on its way, over loopback
        with pytest.raises(TlsError) as info:
            client.getNimbusConf()
        client.close()
    assert info.value.cause == "no_client_cert"
    assert server.accepted == 1


def test_read_only_calls_are_not_retried_after_a_tls13_refusal(pki):
    # getNimbusConf is retried once after a lost connection; a refusal is not one.
    with serve(mutual(pki)) as server:
        client = NimbusClient("127.0.0.1", server.port, ca_file=pki.ca.cert)
        with pytest.raises(TlsError):
            client.getNimbusConf()
        assert not client.connected
        client.close()
    assert server.accepted == 1


def test_our_plaintext_server_closing_on_a_client_hello_is_unavailable_after_retries(pki):
    handler = Handler()
    with nimbus_thrift.make_server(nimbus.Nimbus, handler, host="127.0.0.1", port=0,
                                   worker_threads=1) as server:
        client = NimbusClient("127.0.0.1", server.address[1], ca_file=pki.ca.cert,
                              connect_attempts=2, backoff_initial=0, backoff_max=0)
        with pytest.raises(NimbusUnavailable) as info:
            client.getNimbusConf()
        client.close()
    # A close is what a restarting TLS server does too: retried, not a TlsError.
    assert not isinstance(info.value, TlsError)
    assert "the server closed the connection during the TLS handshake (does this port " \
           "speak TLS?) (after 2 attempts" in str(info.value)
    assert handler.calls == 0


def test_a_server_answering_in_plaintext_is_named_as_such(pki):
    with socket.create_server(("127.0.0.1", 0)) as listener:
        def answer() -> None:
            conn, _ = listener.accept()
            with conn:
                conn.recv(4096)
                conn.sendall(b"HTTP/1.0 400 Bad Request\r\n\r\n")
        thread = threading.Thread(target=answer)
        thread.start()
        client = NimbusClient("127.0.0.1", listener.getsockname()[1], ca_file=pki.ca.cert,
                              connect_attempts=3)
        with pytest.raises(TlsError) as info:
            client.connect()
        thread.join(10)
    # Not retried: a second attempt would find no one answering its handshake.
    assert (info.value.refused, info.value.cause) == (None, "not_tls")
    assert "failed: the server does not speak TLS on this port (a plaintext port?) " \
           "[WRONG_VERSION_NUMBER]" in str(info.value)


def test_a_plaintext_client_at_a_tls_port_is_told_what_it_may_be(pki):
    with serve(mutual(pki)) as server:
        client = NimbusClient("127.0.0.1", server.port)
        with pytest.raises(ConnectionLost) as info:
            client.getNimbusConf()
        client.close()
    assert "(a nimbus that speaks only TLS does this to plaintext clients: give this one " \
           "the CA certificate that signed the server's); failed again after reconnecting " \
           "once" in str(info.value)


def test_a_server_that_is_not_there_is_still_unavailable(pki):
    from support.rawthrift import refused_port
    with refused_port() as port:
        client = NimbusClient("127.0.0.1", port, connect_attempts=2, backoff_initial=0,
                              backoff_max=0, ca_file=pki.ca.cert)
        with pytest.raises(NimbusUnavailable, match="connection refused .after 2 attempts"):
            client.connect()


# --------------------------------------------------------------------------- files


def test_client_context_is_tls12_at_least_and_checks_the_server(pki):
    tls = client_context(**as_client(pki))
    assert tls.context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert tls.context.verify_mode == ssl.CERT_REQUIRED and tls.context.check_hostname
    assert tls.cert_file == str(pki.clients["alice"].cert)


def test_unusable_certificate_files_are_one_sentence(pki, tmp_path):
    missing = tmp_path / "nope.pem"
    with pytest.raises(ValueError, match=f"cannot read ca_file {missing}: No such file"):
        NimbusClient("127.0.0.1", 1, ca_file=missing)
    not_pem = tmp_path / "x.pem"
    not_pem.write_text("hello\n")
    with pytest.raises(ValueError, match=f"ca_file {not_pem} is not a PEM certificate"):
        NimbusClient("127.0.0.1", 1, ca_file=not_pem)
    alice, bob = pki.clients["alice"], pki.clients["bob"]
    with pytest.raises(ValueError, match="the key does not belong to the certificate"):
        NimbusClient("127.0.0.1", 1, cert_file=alice.cert, key_file=bob.key)
    with pytest.raises(ValueError, match="key_file .* was given without cert_file"):
        NimbusClient("127.0.0.1", 1, key_file=alice.key)
    encrypted = tmp_path / "enc.key"
    subprocess.run(["openssl", "pkey", "-in", str(alice.key), "-aes256", "-passout",
                    "pass:secret", "-out", str(encrypted)], check=True)
    with pytest.raises(ValueError, match=f"key_file {encrypted} is encrypted"):
        NimbusClient("127.0.0.1", 1, cert_file=alice.cert, key_file=encrypted)


# --------------------------------------------------------------------------- the script


def test_the_script_makes_what_it_says_with_private_keys(pki):
    for name in ("ca", "server", "alice", "bob"):
        assert stat.S_IMODE(os.stat(pki.dir / f"{name}.key").st_mode) == 0o600
        assert stat.S_IMODE(os.stat(pki.dir / f"{name}.pem").st_mode) == 0o644
    text = subprocess.run(["openssl", "x509", "-in", str(pki.server.cert), "-noout", "-ext",
                           "subjectAltName,extendedKeyUsage"], capture_output=True,
                          text=True, check=True).stdout
    assert "DNS:localhost, IP Address:127.0.0.1, IP Address:0:0:0:0:0:0:0:1" in text
    assert "TLS Web Server Authentication" in text
    verified = subprocess.run(["openssl", "verify", "-CAfile", str(pki.ca.cert),
                               str(pki.server.cert), str(pki.clients["alice"].cert)],
                              capture_output=True, text=True)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_the_script_refuses_to_overwrite_and_adds_clients_with_the_same_ca(tmp_path):
    out = tmp_path / "certs"
    run = [sys.executable, str(SCRIPT), str(out)]
    first = subprocess.run(run + ["--client", "alice"], capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    ca = (out / "ca.pem").read_bytes()
    again = subprocess.run(run + ["--client", "alice"], capture_output=True, text=True)
    assert again.returncode == 1
    assert again.stderr.count("\n") == 1 and "Traceback" not in again.stderr
    assert "already exist; pass --force" in again.stderr
    added = subprocess.run(run + ["--no-server", "--client", "carol", "--p12-password",
                                  "secret1"], capture_output=True, text=True)
    assert added.returncode == 0, added.stderr
    assert (out / "ca.pem").read_bytes() == ca
    assert stat.S_IMODE(os.stat(out / "carol.p12").st_mode) == 0o600
    listing = subprocess.run(["openssl", "pkcs12", "-in", str(out / "carol.p12"), "-nokeys",
                              "-passin", "pass:secret1"], capture_output=True, text=True)
    assert listing.returncode == 0 and "subject=CN = carol" in listing.stdout
    forced = subprocess.run(run + ["--client", "alice", "--force"], capture_output=True,
                            text=True)
    assert forced.returncode == 0, forced.stderr
    assert (out / "ca.pem").read_bytes() == ca


@pytest.mark.parametrize("args, text", [
    (["--client", "a/b"], "client name 'a/b' must be"),
    (["--client", "server"], "client name 'server' is taken"),
    (["--client", "x", "--client", "x"], "client 'x' is given twice"),
    (["--host", "no such host"], "--host 'no such host' is neither"),
    (["--no-server"], "nothing to make"),
    (["--client", "x", "--p12-password", "abc"], "--p12-password must be at least 6"),
])
def test_the_script_refuses_bad_requests_before_writing(tmp_path, capsys, args, text):
    out = tmp_path / "out"
    assert make_certs.main([str(out), *args]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"make_certs: {text}") and err.count("\n") == 1
    assert not out.exists()
