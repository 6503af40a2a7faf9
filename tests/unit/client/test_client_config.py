"""The client's connection settings: client.yaml, the environment and the flags, in
that order of precedence; what each setting may be; which transport they mean. And
the sentences TLS failures become (from exceptions built here, no sockets)."""

from __future__ import annotations

import socket
import ssl
from pathlib import Path
from typing import Iterator

import pytest

from nimbus_thrift.client.settings import (ClientSettings, ClientSettingsError, config_path,
                                           load_client_settings)
from nimbus_thrift.client.tls import ClientTls, classify
from nimbus_thrift.idl import NIMBUS_PORT


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A config directory with three PEM-named files (contents do not matter here)."""
    for name in ("a.pem", "a.key", "ca.pem", "b.pem", "b.key", "ca2.pem"):
        (tmp_path / name).write_text("x")
    return tmp_path


def write_config(home: Path, text: str) -> dict[str, str]:
    """client.yaml under XDG_CONFIG_HOME=home; returns that environment."""
    path = home / "nimbus-thrift" / "client.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return {"XDG_CONFIG_HOME": str(home)}


def test_config_path_follows_xdg(tmp_path, monkeypatch):
    assert config_path({"XDG_CONFIG_HOME": "/etc/x"}) == Path("/etc/x/nimbus-thrift/client.yaml")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert config_path({}) == tmp_path / ".config" / "nimbus-thrift" / "client.yaml"


def test_nothing_anywhere_is_nothing_given(tmp_path):
    assert load_client_settings(env={"XDG_CONFIG_HOME": str(tmp_path)}) == ClientSettings()


def test_the_file_relative_paths_are_the_files(home):
    env = write_config(home, "host: nimbus.example\nport: 7000\ntls_cert: ../a.pem\n"
                             "tls-key: ../a.key\ntls_ca: " + str(home / "ca.pem") + "\n")
    settings = load_client_settings(env=env)
    assert settings == ClientSettings(host="nimbus.example", port=7000,
                                      tls_cert=home / "a.pem", tls_key=home / "a.key",
                                      tls_ca=home / "ca.pem")
    assert settings.uses_tls


def test_environment_over_file_and_flags_over_both(home, monkeypatch):
    env = write_config(home, "host: from-file\nport: 7000\ntls_cert: ../a.pem\n"
                             "tls_key: ../a.key\ntls_ca: ../ca.pem\n")
    monkeypatch.chdir(home)
    env.update({"NIMBUS_THRIFT_HOST": "from-env", "NIMBUS_THRIFT_PORT": "7001",
                "NIMBUS_THRIFT_TLS_CA": "ca2.pem", "NIMBUS_THRIFT_TLS_KEY": ""})
    settings = load_client_settings(env=env)
    assert (settings.host, settings.port, settings.tls_ca, settings.tls_key) == \
        ("from-env", 7001, home / "ca2.pem", home / "a.key")   # "" is not set
    settings = load_client_settings({"host": "from-flag", "port": None, "tls_cert": "b.pem",
                                     "tls_key": "b.key"}, env=env)
    assert (settings.host, settings.port, settings.tls_cert, settings.tls_key,
            settings.tls_ca) == ("from-flag", 7001, home / "b.pem", home / "b.key",
                                 home / "ca2.pem")


def test_an_explicit_file_and_the_process_environment(home, monkeypatch):
    path = home / "other.yaml"
    path.write_text("port: 7100\n")
    monkeypatch.setenv("NIMBUS_THRIFT_HOST", "h")
    monkeypatch.delenv("NIMBUS_THRIFT_PORT", raising=False)
    assert load_client_settings(file=path) == ClientSettings(host="h", port=7100)


@pytest.mark.parametrize("text, message", [
    ("hots: x\n", "has an unknown setting 'hots'; known: host, port, tls_ca, tls_cert, "
                  "tls_key, unix_socket."),
    ("port: 70000\n", "port in {path}: port must be an integer from 1 to 65535, not 70000."),
    ("port: true\n", "port must be an integer from 1 to 65535, not True."),
    ("port: '66x'\n", "port must be an integer from 1 to 65535, not '66x'."),
    ("host: ''\n", "host in {path}: host must be a host name or address, not ''."),
    ("host: [a, b]\n", "host must be a host name or address, not ['a', 'b']."),
    ("tls_ca: 5\n", "tls_ca in {path}: tls_ca must be a path, not 5."),
    ("tls_ca: missing.pem\n", "tls_ca in {path}: the CA certificate that signed the "
                              "server's, {dir}/missing.pem, is not a file."),
    ("tls_key: ../a.key\n", "tls_key in {path} is set but no tls_cert: the key belongs to a "
                            "certificate, give both."),
    ("- host\n", "the client config file {path} must be a mapping of settings, not a list."),
    ("host: [\n", "the client config file {path} is not valid YAML: "),
])
def test_bad_files_are_one_sentence_naming_the_file(home, text, message):
    env = write_config(home, text)
    path = home / "nimbus-thrift" / "client.yaml"
    with pytest.raises(ClientSettingsError) as info:
        load_client_settings(env=env)
    assert message.format(path=path, dir=path.parent) in str(info.value)
    assert "\n" not in str(info.value)


def test_an_unreadable_file(home):
    env = write_config(home, "")
    path = home / "nimbus-thrift" / "client.yaml"
    path.write_bytes(b"host: \xff\n")
    with pytest.raises(ClientSettingsError, match="it is not UTF-8 text"):
        load_client_settings(env=env)


@pytest.mark.parametrize("env, flags, message", [
    ({"NIMBUS_THRIFT_PORT": "http"}, {},
     "environment variable NIMBUS_THRIFT_PORT: port must be an integer from 1 to 65535, "
     "not 'http'."),
    ({}, {"tls_cert": "nope.pem"}, "--tls-cert: this client's certificate, {cwd}/nope.pem, "
                                   "is not a file."),
    ({}, {"tls_key": "a.key"}, "--tls-key is set but no tls_cert"),
    ({}, {"colour": "red"}, "unknown client setting 'colour'."),
])
def test_bad_environment_and_flags_name_their_source(home, monkeypatch, env, flags, message):
    monkeypatch.chdir(home)
    with pytest.raises(ClientSettingsError) as info:
        load_client_settings(flags, env={"XDG_CONFIG_HOME": str(home / "none"), **env})
    assert message.format(cwd=home) in str(info.value)


# --------------------------------------------------------------------------- transport


@pytest.fixture
def local_socket(tmp_path: Path) -> Iterator[Path]:
    """A socket file where the daemon's would be (bound; nothing connects to it)."""
    path = tmp_path / "nimbus.sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
        yield path


def test_nothing_given_and_the_local_socket_there_means_the_socket(local_socket):
    assert ClientSettings().client_args(local_socket) == {"unix_socket": str(local_socket)}
    # The TLS settings are for remote daemons; the local socket needs none.
    settings = ClientSettings(tls_ca=Path("/ca.pem"))
    assert settings.client_args(local_socket) == {"unix_socket": str(local_socket)}


@pytest.mark.parametrize("settings", [ClientSettings(host="127.0.0.1"),
                                      ClientSettings(port=7000)])
def test_a_host_or_a_port_means_tcp_even_with_the_local_socket_there(local_socket, settings):
    args = settings.client_args(local_socket)
    assert "unix_socket" not in args
    assert (args["host"], args["port"]) == (settings.host or "127.0.0.1",
                                            settings.port or NIMBUS_PORT)


def test_no_local_socket_means_tcp_to_the_default(tmp_path):
    regular = tmp_path / "nimbus.sock"
    regular.write_text("")                     # a file by that name is not a socket
    for missing in (regular, tmp_path / "absent.sock"):
        assert ClientSettings().client_args(missing) == {"host": "127.0.0.1",
                                                         "port": NIMBUS_PORT}


def test_tls_settings_become_the_clients_files(tmp_path):
    settings = ClientSettings(host="n", tls_cert=Path("/c.pem"), tls_key=Path("/k.pem"),
                              tls_ca=Path("/ca.pem"))
    assert settings.client_args(tmp_path / "none") == {
        "host": "n", "port": NIMBUS_PORT, "cert_file": "/c.pem", "key_file": "/k.pem",
        "ca_file": "/ca.pem"}


def test_an_explicit_unix_socket_wins_and_drops_tls(tmp_path):
    settings = ClientSettings(host="n", tls_ca=Path("/ca.pem"), unix_socket=Path("/s.sock"))
    assert settings.client_args(tmp_path / "none") == {"unix_socket": "/s.sock"}


def test_the_default_local_socket_is_in_the_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    (tmp_path / "nimbus-thrift").mkdir()
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "nimbus-thrift" / "nimbus.sock"))
        assert ClientSettings().client_args() == {
            "unix_socket": str(tmp_path / "nimbus-thrift" / "nimbus.sock")}


# --------------------------------------------------------------------------- TLS words

FILES = ClientTls(ssl.create_default_context(), cert_file="/me.pem", ca_file="/ca.pem",
                  from_files=True)
NO_CERT = ClientTls(ssl.create_default_context(), ca_file="/ca.pem", from_files=True)
OWN = ClientTls(ssl.create_default_context())


def verify_error(code: int, message: str) -> ssl.SSLCertVerificationError:
    exc = ssl.SSLCertVerificationError(1, f"[SSL: CERTIFICATE_VERIFY_FAILED] {message}")
    exc.verify_code, exc.verify_message, exc.reason = code, message, "CERTIFICATE_VERIFY_FAILED"
    return exc


def alert(reason: str) -> ssl.SSLError:
    exc = ssl.SSLError(1, f"[SSL: {reason}] {reason.lower()}")
    exc.reason = reason
    return exc


@pytest.mark.parametrize("exc, tls, expected", [
    (verify_error(20, "unable to get local issuer certificate"), FILES,
     ("server", "unknown_ca", "this client refused the server's certificate, which is not "
      "signed by a CA this client trusts (ca_file /ca.pem) [unable to get local issuer "
      "certificate]")),
    (verify_error(18, "self-signed certificate"), OWN,
     ("server", "unknown_ca", "this client refused the server's certificate, which is not "
      "signed by a CA this client trusts (its ssl_context's CAs) [self-signed certificate]")),
    (verify_error(10, "certificate has expired"), FILES,
     ("server", "expired", "this client refused the server's certificate, which has "
      "expired [certificate has expired]")),
    (verify_error(9, "certificate is not yet valid"), FILES,
     ("server", "not_yet_valid", "this client refused the server's certificate, which is "
      "not valid yet (are the two clocks right?) [certificate is not yet valid]")),
    (verify_error(62, "Hostname mismatch, certificate is not valid for 'h'."), FILES,
     ("server", "hostname", "this client refused the server's certificate, which is not "
      "issued for 'h' (connect with a name it lists, or reissue it with 'h' among its "
      "names) [Hostname mismatch, certificate is not valid for 'h'.]")),
    (verify_error(26, "unsuitable certificate purpose"), FILES,
     ("server", "other", "this client refused the server's certificate: unsuitable "
      "certificate purpose")),
    (alert("TLSV13_ALERT_CERTIFICATE_REQUIRED"), NO_CERT,
     ("client", "no_client_cert", "the server requires a client certificate and this "
      "client presented none (give it a certificate and key) "
      "[TLSV13_ALERT_CERTIFICATE_REQUIRED]")),
    (alert("SSLV3_ALERT_HANDSHAKE_FAILURE"), NO_CERT,
     ("client", "no_client_cert", "the server requires a client certificate and this "
      "client presented none (give it a certificate and key) "
      "[SSLV3_ALERT_HANDSHAKE_FAILURE]")),
    # With a certificate, the same alert cannot say whose fault it is.
    (alert("SSLV3_ALERT_HANDSHAKE_FAILURE"), FILES,
     (None, "handshake_failure", "the server ended the handshake (it may require a client "
      "certificate it did not accept, or share no cipher with this client) "
      "[SSLV3_ALERT_HANDSHAKE_FAILURE]")),
    (alert("TLSV1_ALERT_UNKNOWN_CA"), FILES,
     ("client", "unknown_ca", "the server refused this client's certificate (/me.pem), "
      "which is not signed by a CA it trusts [TLSV1_ALERT_UNKNOWN_CA]")),
    (alert("SSLV3_ALERT_CERTIFICATE_EXPIRED"), OWN,
     ("client", "expired", "the server refused this client's certificate, which has "
      "expired [SSLV3_ALERT_CERTIFICATE_EXPIRED]")),
    (alert("SSLV3_ALERT_BAD_CERTIFICATE"), FILES,
     ("client", "bad_cert", "the server refused this client's certificate (/me.pem) "
      "[SSLV3_ALERT_BAD_CERTIFICATE]")),
    (alert("WRONG_VERSION_NUMBER"), FILES,
     (None, "not_tls", "the server does not speak TLS on this port (a plaintext port?) "
      "[WRONG_VERSION_NUMBER]")),
    (alert("TLSV1_ALERT_PROTOCOL_VERSION"), FILES,
     (None, "protocol", "the server and this client share no TLS version or cipher (this "
      "client speaks TLS 1.2 and 1.3) [TLSV1_ALERT_PROTOCOL_VERSION]")),
    (alert("SOMETHING_NEW"), FILES,
     (None, "other", "the TLS handshake failed [SOMETHING_NEW]")),
])
def test_each_tls_failure_is_one_sentence_saying_who_refused_what(exc, tls, expected):
    assert classify(exc, "h", tls) == expected


@pytest.mark.parametrize("exc", [ssl.SSLEOFError(8, "EOF occurred in violation of protocol"),
                                 ssl.SSLZeroReturnError(6, "TLS/SSL connection closed"),
                                 ssl.SSLSyscallError(5, "syscall")])
def test_a_connection_that_ended_is_not_a_refusal(exc):
    assert classify(exc, "h", FILES) is None
