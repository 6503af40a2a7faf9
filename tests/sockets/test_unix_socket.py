"""Real sockets: the server's Unix domain socket listener (unix_socket=PATH). Its
clients' principal is their OS user, from the kernel (SO_PEERCRED); handlers read it,
with the peer, through nimbus_thrift.current_request(), and every log line of the
request carries it."""

from __future__ import annotations

import os
import pwd
import socket
import stat

import pytest

import nimbus_thrift
from nimbus_thrift.demo import EchoHandler

from support.rawthrift import call, closed_by_peer, connect, roundtrip

ME = pwd.getpwuid(os.getuid()).pw_name


class WhoAmI(EchoHandler):
    """echo answers with what the request context says about the caller."""

    def echo(self, s: str) -> str:
        request = nimbus_thrift.current_request()
        assert request is not None and request.method == "echo"
        nimbus_thrift.rpc.server.log.info("whoami_called")
        return f"{request.principal}|{request.peer}"


def unix_connect(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(5)
    sock.connect(path)
    return sock


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "nimbus.sock")


def test_unix_clients_are_their_os_user_and_tcp_clients_nobody(demo, path, logs):
    with nimbus_thrift.make_server(demo.Echo, WhoAmI(), port=0, worker_threads=2,
                                   unix_socket=path) as server:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o660
        assert stat.S_ISSOCK(os.stat(path).st_mode)
        with unix_connect(path) as local:
            reply = roundtrip(local, call(demo.Echo, "echo", s="?"), demo.Echo)
            principal, peer = reply.body.success.split("|")
            assert principal == ME
            assert peer == f"unix:{ME} (pid {os.getpid()})"
        with connect(server.address) as remote:
            reply = roundtrip(remote, call(demo.Echo, "echo", s="?"), demo.Echo)
            principal, peer = reply.body.success.split("|")
            assert principal == "None" and peer.startswith("127.0.0.1:")
    lines = [e for e in logs if e["event"] == "whoami_called"]
    assert [e.get("principal") for e in lines] == [ME, None]
    assert lines[0]["peer"].startswith("unix:")
    # Stopping removes the socket file.
    assert not os.path.exists(path)


def test_the_mode_is_a_setting(demo, path):
    with nimbus_thrift.make_server(demo.Echo, EchoHandler(), port=0, worker_threads=1,
                                   unix_socket=path, unix_socket_mode=0o600):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_a_stale_socket_file_is_replaced_a_live_one_is_not(demo, path):
    # A socket file nobody listens on: what a killed server leaves.
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(path)
    stale.close()
    with nimbus_thrift.make_server(demo.Echo, EchoHandler(), port=0, worker_threads=1,
                                   unix_socket=path):
        with unix_connect(path) as local:
            assert roundtrip(local, call(demo.Echo, "echo", s="up"),
                             demo.Echo).body.success == "up"
        second = nimbus_thrift.make_server(demo.Echo, EchoHandler(), port=0,
                                           unix_socket=path)
        with pytest.raises(OSError, match="another server listens on this socket"):
            second.start()
        # The refused server took nothing: the first still answers there.
        with unix_connect(path) as local:
            assert roundtrip(local, call(demo.Echo, "echo", s="still"),
                             demo.Echo).body.success == "still"


def test_a_path_that_is_not_a_socket_is_left_alone(demo, path):
    with open(path, "w") as f:
        f.write("precious")
    server = nimbus_thrift.make_server(demo.Echo, EchoHandler(), port=0, unix_socket=path)
    with pytest.raises(FileExistsError, match="not a socket"):
        server.start()
    with open(path) as f:
        assert f.read() == "precious"


def test_per_address_limits_count_each_local_user_as_one_address(demo, path):
    with nimbus_thrift.make_server(demo.Echo, EchoHandler(), port=0, worker_threads=1,
                                   unix_socket=path, max_connections_per_peer=2,
                                   evict_idle=False) as server:
        kept = [unix_connect(path) for _ in range(2)]
        try:
            for sock in kept:
                assert roundtrip(sock, call(demo.Echo, "echo", s="k"),
                                 demo.Echo).body.success == "k"
            with unix_connect(path) as third:
                assert closed_by_peer(third, wait=5)     # closed at once
            assert server.metrics().connections_refused_per_peer == 1
            # TCP from 127.0.0.1 is another address: unaffected.
            with connect(server.address) as remote:
                assert roundtrip(remote, call(demo.Echo, "echo", s="tcp"),
                                 demo.Echo).body.success == "tcp"
        finally:
            for sock in kept:
                sock.close()


def test_unix_socket_options_are_checked():
    with pytest.raises(nimbus_thrift.OptionError, match="unix_socket_mode"):
        nimbus_thrift.ServerOptions(unix_socket="/tmp/x.sock", unix_socket_mode=0o1777)
    with pytest.raises(nimbus_thrift.OptionError, match="unix_socket must be a path"):
        nimbus_thrift.ServerOptions(unix_socket="")
