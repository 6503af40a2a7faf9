"""The `nimbus-thrift` command, as a user runs it: a real process, real signals."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

from thriftpy2.rpc import make_client
from thriftpy2.transport import TFramedTransportFactory

CLI = [str(Path(sys.executable).with_name("nimbus-thrift"))]


def start_demo(*args: str) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(CLI + ["demo", "--port", "0", "--log-format", "json", *args],
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:          # the banner comes once the port is listening
        match = re.search(r"on 127\.0\.0\.1:(\d+)", line)
        if match:
            return proc, int(match.group(1))
    proc.kill()
    raise AssertionError(f"demo exited before listening (rc={proc.wait()})")


def test_demo_serves_and_stops_gracefully_on_sigterm(demo):
    proc, port = start_demo("--workers", "2")
    try:
        client = make_client(demo.Echo, "127.0.0.1", port,
                             trans_factory=TFramedTransportFactory(), timeout=5000)
        assert client.echo("cli") == "cli"
        client.close()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    events = [json.loads(line)["event"] for line in err.splitlines() if line.startswith("{")]
    assert "stopping" in events and "stopped" in events


def test_bad_option_is_one_sentence_and_exit_2():
    result = subprocess.run(CLI + ["demo", "--max-frame-size", "0"], capture_output=True,
                            text=True, timeout=30)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "--max-frame-size" in result.stderr


def test_port_in_use_is_one_sentence_and_exit_1():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(CLI + ["demo", "--port", str(port)], capture_output=True,
                                text=True, timeout=30)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr


# --- where the client commands connect: the local socket, TLS, client.yaml ---------------

import os  # noqa: E402
import pwd  # noqa: E402
from typing import Any, Iterator  # noqa: E402

import pytest  # noqa: E402
from click.testing import CliRunner  # noqa: E402

import nimbus_thrift  # noqa: E402
from nimbus_thrift.cli import main  # noqa: E402
from nimbus_thrift.client.client import nimbus_idl  # noqa: E402

from support.certs import Pki, TlsThriftServer, make_pki, server_context  # noqa: E402

ME = pwd.getpwuid(os.getuid()).pw_name


class WhoAmI:
    """getNimbusConf says who called: the OS user on the Unix socket, None on TCP, and
    over TLS (no request context there) the principal "tls"."""

    def getNimbusConf(self) -> str:
        request = nimbus_thrift.current_request()
        return json.dumps({"principal": request.principal if request else "tls"})


@pytest.fixture
def isolated(tmp_path: Path) -> dict[str, str | None]:
    """An environment with its own config and data directories and no NIMBUS_THRIFT_*
    settings, for CliRunner (None removes a variable) and subprocesses alike."""
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("NIMBUS_THRIFT_")}
    env.update(XDG_CONFIG_HOME=str(tmp_path / "config"), XDG_DATA_HOME=str(tmp_path / "data"))
    return env


def subprocess_env(isolated: dict[str, str | None]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NIMBUS_THRIFT_")}
    env.update({k: v for k, v in isolated.items() if v is not None})
    return env


@pytest.fixture
def local_daemon(isolated: dict[str, str | None]) -> Iterator[nimbus_thrift.Server]:
    """A server on the default local socket of the isolated data directory (and on a
    TCP port 0, which the CLI never finds by itself)."""
    data = Path(str(isolated["XDG_DATA_HOME"])) / "nimbus-thrift"
    data.mkdir(parents=True)
    with nimbus_thrift.make_server(nimbus_idl().Nimbus, WhoAmI(), port=0, worker_threads=2,
                                   unix_socket=str(data / "nimbus.sock")) as server:
        yield server


def conf_json(*args: str, env: dict[str, str | None]) -> Any:
    result = CliRunner().invoke(main, ["conf", "--json", *args], env=env)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_no_host_and_the_local_socket_there_means_the_socket(local_daemon, isolated):
    assert conf_json(env=isolated) == {"principal": ME}


def test_a_port_or_host_means_tcp_even_with_the_local_socket_there(local_daemon, isolated):
    port = str(local_daemon.address[1])
    assert conf_json("--port", port, env=isolated) == {"principal": None}
    assert conf_json(env={**isolated, "NIMBUS_THRIFT_PORT": port,
                          "NIMBUS_THRIFT_HOST": "127.0.0.1"}) == {"principal": None}


def test_an_explicit_unix_socket(isolated, tmp_path):
    path = str(tmp_path / "elsewhere.sock")
    with nimbus_thrift.make_server(nimbus_idl().Nimbus, WhoAmI(), port=0, worker_threads=1,
                                   unix_socket=path):
        assert conf_json("--unix-socket", path, env=isolated) == {"principal": ME}
        assert conf_json(env={**isolated, "NIMBUS_THRIFT_UNIX_SOCKET": path}) == \
            {"principal": ME}


def test_a_missing_unix_socket_is_one_sentence_and_exit_1(isolated, tmp_path):
    path = tmp_path / "none.sock"
    result = CliRunner().invoke(main, ["list", "--unix-socket", str(path)], env=isolated)
    assert result.exit_code == 1
    assert result.output.startswith(f"Error: no nimbus at unix:{path}: no such socket file")
    assert result.output.count("\n") == 1


def test_a_bad_client_yaml_is_one_sentence_and_exit_2(isolated):
    config = Path(str(isolated["XDG_CONFIG_HOME"])) / "nimbus-thrift" / "client.yaml"
    config.parent.mkdir(parents=True)
    config.write_text("hots: nimbus.example\n")
    result = CliRunner().invoke(main, ["list"], env=isolated)
    assert result.exit_code == 2
    assert f"Error: the client config file {config} has an unknown setting 'hots'" \
        in result.output
    assert "Traceback" not in result.output


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def tls_server(pki: Pki) -> Iterator[TlsThriftServer]:
    with TlsThriftServer(nimbus_idl().Nimbus, WhoAmI(),
                         server_context(pki.server, client_ca=pki.ca.cert)) as server:
        yield server


def test_mutual_tls_from_client_yaml(tls_server, pki, isolated):
    config = Path(str(isolated["XDG_CONFIG_HOME"])) / "nimbus-thrift" / "client.yaml"
    config.parent.mkdir(parents=True)
    alice = pki.clients["alice"]
    config.write_text(f"host: localhost\nport: {tls_server.port}\ntls_cert: {alice.cert}\n"
                      f"tls_key: {alice.key}\ntls_ca: {pki.ca.cert}\n")
    assert conf_json(env=isolated) == {"principal": "tls"}
    # A flag over the file: bob's certificate.
    bob = pki.clients["bob"]
    assert conf_json("--tls-cert", str(bob.cert), "--tls-key", str(bob.key),
                     env=isolated) == {"principal": "tls"}
    assert tls_server.peers == ["alice", "bob"]


@pytest.mark.parametrize("case", ["unknown_ca", "no_client_cert"])
def test_a_tls_failure_is_one_line_exit_1_no_traceback(tls_server, pki, isolated, case):
    flags = ["--tls-ca", str(pki.foreign_ca.cert)] if case == "unknown_ca" \
        else ["--tls-ca", str(pki.ca.cert)]
    result = subprocess.run(CLI + ["list", "--port", str(tls_server.port), *flags],
                            capture_output=True, text=True, timeout=60,
                            env=subprocess_env(isolated))
    assert result.returncode == 1
    assert result.stdout == "" and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1
    prefix = f"Error: TLS with nimbus at 127.0.0.1:{tls_server.port} failed: "
    expected = ("this client refused the server's certificate, which is not signed by a "
                "CA this client trusts" if case == "unknown_ca" else
                "the server requires a client certificate and this client presented none")
    assert result.stderr.startswith(prefix + expected)
    assert tls_server.accepted == 1           # not retried


def test_an_unusable_certificate_file_is_one_sentence(isolated, tmp_path):
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate\n")
    result = CliRunner().invoke(main, ["list", "--port", "1", "--tls-ca", str(bad)],
                                env=isolated)
    assert result.exit_code == 1
    assert result.output.startswith(f"Error: ca_file {bad} is not a PEM certificate")


def test_the_daemons_tls_and_socket_flags_are_its_config_keys(monkeypatch, tmp_path):
    """The flags reach load_config under the daemon's setting names (the daemon itself
    is not started: load_config is replaced by one that records and refuses)."""
    import nimbus_thrift.nimbus as daemon_package

    seen: dict[str, Any] = {}

    def record(file: Any, env: Any, flags: dict[str, Any]) -> Any:
        seen.update(flags)
        raise daemon_package.ConfigError("recorded")

    monkeypatch.setattr(daemon_package, "load_config", record)
    result = CliRunner().invoke(main, [
        "nimbus", "--tls-cert", "/s.pem", "--tls-key", "/s.key", "--tls-client-ca", "/ca.pem",
        "--insecure", "--unix-socket", ""])
    assert result.exit_code == 2 and "recorded" in result.output
    assert {k: seen[k] for k in ("tls_cert_file", "tls_key_file", "tls_client_ca_file",
                                 "insecure", "unix_socket")} == {
        "tls_cert_file": "/s.pem", "tls_key_file": "/s.key", "tls_client_ca_file": "/ca.pem",
        "insecure": True, "unix_socket": ""}
    seen.clear()
    CliRunner().invoke(main, ["nimbus"])
    # Flags not given are None: the file and the environment decide.
    assert seen["insecure"] is None and seen["unix_socket"] is None
    assert seen["tls_cert_file"] is None
