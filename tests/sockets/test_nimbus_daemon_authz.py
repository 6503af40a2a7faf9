"""A real daemon's authorization over real sockets: local users on its Unix socket
and on loopback TCP (their OS user is the principal, from the kernel; another local
account is tests/support/otheruser.py's), refusals as the IDL's AuthorizationException, audit lines on their own logger; and
what the daemon refuses or warns about when it starts (exposure, root, the socket)."""

from __future__ import annotations

import json
import os
import pwd
import socket
import stat
from pathlib import Path
from typing import Any, Iterator

import pytest

from support.nimbus import (FakeLauncher, N, audit_events, make_test_pki, make_zip,
                            port_of, request_as, tcp, unix, upload, wordcount)
from support.otheruser import NOBODY, another_account, call_as_nobody
from support.rawthrift import frame, message, roundtrip
from nimbus_thrift.nimbus import DaemonError, NimbusDaemon, load_config
from nimbus_thrift.nimbus import daemon as daemon_module

ME = pwd.getpwuid(os.geteuid()).pw_name


def start(tmp_path: Path, **flags: Any) -> NimbusDaemon:
    config = load_config(env={}, flags={"ui_port": 0, "data_dir": str(tmp_path / "data"), "port": 0,
                                        **flags})
    daemon = NimbusDaemon(config, launcher=FakeLauncher())
    daemon.start()
    return daemon


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[Any]:
    started: list[NimbusDaemon] = []

    def make(**flags: Any) -> NimbusDaemon:
        daemon = start(tmp_path, **flags)
        started.append(daemon)
        return daemon
    yield make
    for daemon in started:
        daemon.stop(grace=5.0)


def rpc(sock: socket.socket, method: str, **kwargs: Any) -> Any:
    """One call; its result struct (``success``, or the exception's field set)."""
    # Built here, not with rawthrift.call: its ``name`` would take submitTopology's.
    args = getattr(N.Nimbus, method + "_args")(**kwargs)
    reply = roundtrip(sock, frame(message(method, 1, args)), N.Nimbus)
    assert reply.type == 2, reply             # a REPLY, not a TApplicationException
    return reply.body


def submit(sock: socket.socket, name: str) -> Any:
    location = rpc(sock, "beginFileUpload").success
    assert rpc(sock, "uploadChunk", location=location, chunk=make_zip()).aze is None
    assert rpc(sock, "finishFileUpload", location=location).aze is None
    return rpc(sock, "submitTopology", name=name, uploadedJarLocation=location,
               jsonConf="{}", topology=wordcount())


# --- authorization over the sockets ------------------------------------------------------

def test_a_local_user_not_in_users_is_refused_and_audited(daemons: Any) -> None:
    daemon = daemons(users=["somebody-else"])
    with audit_events() as audit, unix(daemon) as sock:
        result = rpc(sock, "getClusterInfo")
        assert result.success is None
        assert result.aze.msg == (f"{ME!r} may not call getClusterInfo: only the principals "
                                  "in users and admins may use this nimbus")
        assert rpc(sock, "beginFileUpload").aze is not None
    assert list((daemon.config.data_dir / "inbox").iterdir()) == []     # nothing made
    events = audit()
    assert [(e["operation"], e["principal"], e["outcome"]) for e in events] == [
        ("getClusterInfo", ME, "refused"), ("beginFileUpload", ME, "refused")]
    assert all(e["logger"] == "nimbus_thrift.audit" and e["peer"].startswith(f"unix:{ME} ")
               for e in events)


def test_a_local_user_is_itself_on_the_socket_and_on_loopback_tcp(daemons: Any) -> None:
    daemon = daemons()
    with unix(daemon) as local:
        assert submit(local, "mine").aze is None
        (listed,) = rpc(local, "getClusterInfo").success.topologies
        assert (listed.name, listed.owner) == ("mine", ME)
    # The same OS user over loopback TCP is the same principal (the kernel says who
    # owns the client's socket): it reads and controls what it submitted.
    with tcp(daemon) as same:
        assert rpc(same, "getTopologyInfo", id=listed.id).success.owner == ME
        assert rpc(same, "deactivate", name="mine").aze is None
    assert daemon.store is not None
    assert daemon.store.topology(listed.id).status == "INACTIVE"


@another_account
def test_another_local_account_may_not_touch_a_users_topology(daemons: Any) -> None:
    daemon = daemons(users=f"{ME},{NOBODY}")
    with audit_events() as audit:
        with unix(daemon) as local:
            assert submit(local, "mine").aze is None
            (listed,) = rpc(local, "getClusterInfo").success.topologies
        port = port_of(daemon)
        # A user may list, not control nor read another's topology.
        assert [t.owner for t in call_as_nobody(port, "getClusterInfo").success
                .topologies] == [ME]
        refused = call_as_nobody(port, "killTopology", name="mine").aze
        assert refused.msg == (f"{NOBODY!r} may not call killTopology on topology "
                               f"{listed.id!r}: only its owner {ME!r}, admins and the "
                               "principals in its topology.users may")
        assert call_as_nobody(port, "getTopologyConf", id=listed.id).aze is not None
        assert call_as_nobody(port, "beginFileDownload", file=listed.id).aze is not None
        assert daemon.store is not None
        assert daemon.store.topology(listed.id).status == "ACTIVE"     # unchanged
        with unix(daemon) as local:
            assert rpc(local, "killTopologyWithOpts", name="mine",
                       options=N.KillOptions(wait_secs=0)).aze is None
    assert daemon.store.topology(listed.id).status == "KILLED"
    outcomes = [(e["operation"], e["principal"], e["outcome"], e.get("topology"))
                for e in audit() if e["operation"] in ("submitTopology", "killTopology",
                                                         "killTopologyWithOpts")]
    assert outcomes == [("submitTopology", ME, "ok", "mine"),
                        ("killTopology", NOBODY, "refused", "mine"),
                        ("killTopologyWithOpts", ME, "ok", "mine")]
    tcp_refusal = next(e for e in audit() if e["principal"] == NOBODY)
    assert tcp_refusal["peer"].startswith("127.0.0.1:")


def test_an_admin_controls_every_topology(daemons: Any) -> None:
    daemon = daemons(admins=[ME], users=["alice"])
    assert daemon.handler is not None
    with request_as("alice"):           # alice's topology (through the handler itself)
        location = upload(daemon.handler, make_zip())
        daemon.handler.submitTopology("theirs", location, "{}", wordcount())
    with tcp(daemon) as remote:
        (listed,) = rpc(remote, "getClusterInfo").success.topologies
        assert listed.owner == "alice"
    with unix(daemon) as local:
        conf = json.loads(rpc(local, "getTopologyConf", id=listed.id).success)
        assert conf["topology.submitter.user"] == "alice"
        assert rpc(local, "deactivate", name="theirs").aze is None
    assert daemon.store is not None
    assert daemon.store.topology(listed.id).status == "INACTIVE"


# --- the Unix socket --------------------------------------------------------------------

def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_the_socket_is_in_the_owner_only_data_directory(daemons: Any) -> None:
    daemon = daemons()
    path = daemon.config.data_dir / "nimbus.sock"
    assert stat.S_ISSOCK(os.lstat(path).st_mode)
    assert _mode(path) == 0o660 and _mode(daemon.config.data_dir) == 0o700
    daemon.stop(grace=5.0)
    assert not path.exists()


def test_the_socket_turned_off_or_elsewhere(daemons: Any, tmp_path: Path) -> None:
    off = daemons(unix_socket="")
    assert not (off.config.data_dir / "nimbus.sock").exists()
    off.stop(grace=5.0)
    shared = tmp_path / "shared"
    shared.mkdir()
    elsewhere = daemons(unix_socket=str(shared / "team.sock"))
    assert _mode(shared / "team.sock") == 0o660
    with unix(elsewhere) as sock:
        assert rpc(sock, "getLeader").success.isLeader


def test_a_socket_in_a_missing_directory_is_refused(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "n.sock"
    with pytest.raises(DaemonError) as info:
        start(tmp_path, unix_socket=str(missing))
    assert str(info.value) == (f"cannot listen on unix_socket {missing}: its directory "
                               f"{missing.parent} does not exist")


def test_a_socket_where_a_file_is_is_refused(tmp_path: Path) -> None:
    taken = tmp_path / "taken"
    taken.write_text("not a socket")
    with pytest.raises(DaemonError) as info:
        start(tmp_path, unix_socket=str(taken))
    assert str(info.value) == (f"cannot listen on unix_socket {taken}: exists and is not "
                               "a socket")
    assert taken.read_text() == "not a socket"


def test_a_data_directory_too_deep_for_the_default_socket(daemons: Any, tmp_path: Path,
                                                          logs: list[dict[str, Any]]) -> None:
    deep = tmp_path / ("d" * 110)
    daemon = daemons(data_dir=str(deep))
    assert not (deep / "nimbus.sock").exists()
    (warning,) = [e for e in logs if e["event"] == "unix_socket_off"]
    assert warning["path"] == str(deep / "nimbus.sock")
    with tcp(daemon) as sock:                   # it serves all the same
        assert rpc(sock, "getLeader").success.isLeader


# --- what the daemon refuses or warns about at start -------------------------------------

@pytest.mark.parametrize("host,loopback", [
    ("127.0.0.1", True), ("127.0.0.2", True), ("::1", True), ("localhost", True),
    ("0.0.0.0", False), ("::", False), ("192.0.2.1", False), ("nimbus.invalid", False)])
def test_is_loopback(host: str, loopback: bool) -> None:
    assert daemon_module.is_loopback(host) is loopback


def test_a_public_address_without_mutual_tls_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DaemonError) as info:
        start(tmp_path, host="0.0.0.0")
    assert str(info.value) == (
        "refusing to listen on 0.0.0.0, which is not a loopback address, without mutual "
        "TLS: set tls_cert_file, tls_key_file and tls_client_ca_file (--tls-cert, "
        "--tls-key, --tls-client-ca), or insecure: true (--insecure) to let anyone who "
        "reaches the port connect as 'anonymous' (who may call nothing unless "
        "allow_anonymous is set)")
    assert not (tmp_path / "data").exists()         # refused before touching anything


def test_what_allows_a_public_address(tmp_path: Path) -> None:
    pki = make_test_pki(tmp_path)
    tls = {"tls_cert_file": str(pki / "server.pem"), "tls_key_file": str(pki / "server.key")}
    allowed = [{"insecure": True}, {**tls, "tls_client_ca_file": str(pki / "ca.pem")}]
    for flags in allowed:
        daemon_module.check_exposure(load_config(env={}, flags={"host": "0.0.0.0", **flags}))
    with pytest.raises(DaemonError):    # TLS without client certificates is not enough
        daemon_module.check_exposure(load_config(env={}, flags={"host": "0.0.0.0", **tls}))


def test_the_tls_context_goes_to_the_server_only_when_configured(
        tmp_path: Path, daemons: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    given: list[dict[str, Any]] = []
    real = daemon_module.make_server

    def recording(*args: Any, **kwargs: Any) -> Any:
        given.append(dict(kwargs))
        kwargs.pop("ssl_context", None)     # the server's TLS is tested with the server
        return real(*args, **kwargs)
    monkeypatch.setattr(daemon_module, "make_server", recording)
    daemons().stop(grace=5.0)
    assert "ssl_context" not in given[0]
    assert given[0]["unix_socket"] == str(tmp_path / "data" / "nimbus.sock")
    pki = make_test_pki(tmp_path)
    daemons(tls_cert_file=str(pki / "server.pem"), tls_key_file=str(pki / "server.key"),
            tls_client_ca_file=str(pki / "ca.pem"))
    context = given[1]["ssl_context"]
    assert context.verify_mode.name == "CERT_REQUIRED"


def test_an_unusable_key_stops_the_start_in_one_sentence(tmp_path: Path) -> None:
    (tmp_path / "pki").mkdir()
    pki = make_test_pki(tmp_path / "pki")
    with pytest.raises(DaemonError, match=r"^tls_key_file '.*encrypted\.key' is encrypted"):
        start(tmp_path, tls_cert_file=str(pki / "server.pem"),
              tls_key_file=str(pki / "encrypted.key"))
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("uid,warned", [(0, True), (1000, False)])
def test_running_as_root_is_a_warning(daemons: Any, monkeypatch: pytest.MonkeyPatch,
                                      logs: list[dict[str, Any]], uid: int,
                                      warned: bool) -> None:
    monkeypatch.setattr(daemon_module.os, "geteuid", lambda: uid)
    daemons()
    warnings = [e for e in logs if e["event"] == "running_as_root"]
    assert len(warnings) == (1 if warned else 0)
    if warned:
        assert warnings[0]["log_level"] == "warning"
        assert "topologies run as the daemon's user" in warnings[0]["detail"]
