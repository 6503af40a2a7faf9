"""NimbusClient over a Unix domain socket, against our real server
(``make_server(..., unix_socket=PATH)``): the daemon sees the caller's OS user, and a
missing, stale or refused socket is one sentence naming it."""

from __future__ import annotations

import json
import os
import pwd
import socket
from pathlib import Path
from typing import Iterator

import pytest

import nimbus_thrift
from nimbus_thrift.client.client import NimbusClient, nimbus_idl
from nimbus_thrift.client.errors import NimbusUnavailable

nimbus = nimbus_idl()
ME = pwd.getpwuid(os.getuid()).pw_name


class WhoAmI:
    """getNimbusConf answers with who called, as the server saw it."""

    def __init__(self) -> None:
        self.killed: list[str] = []

    def getNimbusConf(self) -> str:
        request = nimbus_thrift.current_request()
        assert request is not None
        return json.dumps({"principal": request.principal, "peer": request.peer})

    def killTopology(self, name: str) -> None:
        self.killed.append(name)


@pytest.fixture
def path(tmp_path: Path) -> str:
    return str(tmp_path / "s.sock")


@pytest.fixture
def handler() -> WhoAmI:
    return WhoAmI()


@pytest.fixture
def server(handler: WhoAmI, path: str) -> Iterator[nimbus_thrift.Server]:
    with nimbus_thrift.make_server(nimbus.Nimbus, handler, port=0, worker_threads=2,
                                   unix_socket=path) as srv:
        yield srv


def test_calls_over_the_unix_socket_are_the_os_user(server, handler, path):
    # host and port are ignored: this port has nothing listening.
    with NimbusClient("192.0.2.1", 1, unix_socket=path) as client:
        assert json.loads(client.getNimbusConf()) == {"principal": ME,
                                                      "peer": f"unix:{ME} (pid {os.getpid()})"}
        client.killTopology("wc")
        assert client.address == f"unix:{path}"
        assert repr(client) == f"<NimbusClient unix:{path} connected>"
    assert handler.killed == ["wc"]


def test_tcp_to_the_same_server_is_no_principal(server, path):
    host, port = server.address
    with NimbusClient(host, port) as client:
        assert json.loads(client.getNimbusConf())["principal"] is None


def test_a_path_like_unix_socket(server, path):
    with NimbusClient(unix_socket=Path(path)) as client:
        assert json.loads(client.getNimbusConf())["principal"] == ME


def test_an_idle_unix_connection_the_server_dropped_is_replaced(handler, path):
    with nimbus_thrift.make_server(nimbus.Nimbus, handler, port=0, worker_threads=1,
                                   unix_socket=path, idle_timeout=0.2) as server:
        with NimbusClient(unix_socket=path) as client:
            client.getNimbusConf()
            accepted_before = server.metrics().connections_accepted
            # Wait (bounded) for the server to close the idle connection.
            sock = client._transport._sock
            assert sock is not None
            sock.settimeout(10)
            assert sock.recv(1, socket.MSG_PEEK) == b""
            client.killTopology("after-idle")    # a mutating call: only safe if not sent
            assert server.metrics().connections_accepted == accepted_before + 1
    assert handler.killed == ["after-idle"]


def test_no_socket_file(tmp_path):
    path = tmp_path / "none.sock"
    client = NimbusClient(unix_socket=path, connect_attempts=2, backoff_initial=0,
                          backoff_max=0)
    with pytest.raises(NimbusUnavailable) as info:
        client.connect()
    assert str(info.value).startswith(f"no nimbus at unix:{path}: no such socket file (is "
                                      f"the daemon running?) (after 2 attempts")
    assert (info.value.host, info.value.port) == (str(path), 0)


def test_a_stale_socket_file(tmp_path):
    path = tmp_path / "stale.sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))              # bound, never listening: what a crash leaves
        client = NimbusClient(unix_socket=path, connect_attempts=1)
        with pytest.raises(NimbusUnavailable, match="nothing listens on the socket"):
            client.connect()


def test_a_socket_path_that_is_too_long_is_refused_before_connecting(tmp_path):
    path = "/tmp/" + "x" * 110
    with pytest.raises(ValueError, match=r"unix_socket /tmp/x+ is 115 bytes long; a Unix "
                                         r"socket path must be under 108 bytes."):
        NimbusClient(unix_socket=path)
