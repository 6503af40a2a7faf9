"""NimbusClient over real sockets, against our server (serving the Nimbus IDL with a
small handler) and against a scripted raw-socket fake for the failures our server
never produces (a dropped request, a foreign protocol). The protocol steps byte by
byte and the arguments are tests/unit/client's (test_client_calls.py,
test_client_options.py)."""

from __future__ import annotations

import inspect
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import nimbus_thrift
from nimbus_thrift.rpc.codec import binary
from nimbus_thrift.client.client import NimbusClient
from nimbus_thrift.client.defaults import DEFAULT_CHUNK_SIZE, DEFAULT_MAX_DOWNLOAD_BYTES
from nimbus_thrift.client.errors import (
    BadReply,
    ConnectionLost,
    DownloadTooLarge,
    FrameRefused,
    NimbusClientError,
    NimbusTimeout,
    NimbusUnavailable,
    ServerError,
)
from nimbus_thrift.rpc.errors import AppErrorCode

from support.nimbus_replies import Nimbus, cluster_summary, nimbus, reply, topology_info
from support.rawthrift import frame, read_frame, refused_port


# --------------------------------------------------------------------------- real server


class Handler:
    """A few Nimbus methods, with hooks for the socket tests."""

    def __init__(self) -> None:
        self.alive = {"wc-1-1"}
        self.killed: list[str] = []
        self.release = threading.Event()   # opens the blocked first getNimbusConf
        self.conf_calls = 0
        self.uploads: dict[str, bytearray] = {}
        self.finished: list[str] = []
        self.files: dict[str, bytes] = {}
        self.sessions: dict[str, list[Any]] = {}
        self.download_chunk = 1000

    def getClusterInfo(self):
        return cluster_summary()

    def getTopologyInfo(self, id):
        if id not in self.alive:
            raise nimbus.NotAliveException(msg=f"no topology {id}")
        return topology_info(id)

    def isTopologyNameAllowed(self, name):
        return not name.startswith("_")

    def killTopology(self, name):
        if name not in self.alive:
            raise nimbus.NotAliveException(msg=f"no topology {name}")
        self.alive.discard(name)
        self.killed.append(name)

    def getNimbusConf(self):
        # The first call blocks (to time the client out) and then answers "stale";
        # later ones answer "fresh" at once.
        self.conf_calls += 1
        if self.conf_calls == 1:
            assert self.release.wait(10), "test never released the handler"
            return '{"answer": "stale"}'
        return '{"answer": "fresh"}'

    def getTopologyConf(self, id):
        raise RuntimeError("boom")

    def beginFileUpload(self):
        location = f"/uploads/{len(self.uploads) + 1}.zip"
        self.uploads[location] = bytearray()
        return location

    def uploadChunk(self, location, chunk):
        self.uploads[location] += chunk

    def finishFileUpload(self, location):
        self.finished.append(location)
        self.files[location] = bytes(self.uploads[location])

    def beginFileDownload(self, file):
        session = f"session-{len(self.sessions) + 1}"
        self.sessions[session] = [file, 0]
        return session

    def getTopology(self, id):
        # "huge": 1M empty JavaObjectArgs, a ~1 MB reply that would decode to ~136 MB.
        count = 1_000_000 if id == "huge" else 1
        return nimbus.StormTopology(spouts={}, state_spouts={}, bolts={"b": nimbus.Bolt(
            bolt_object=nimbus.ComponentObject(java_object=nimbus.JavaObject(
                full_class_name="x", args_list=[nimbus.JavaObjectArg()] * count)),
            common=nimbus.ComponentCommon(inputs={}, streams={}))})

    def downloadChunk(self, id):
        file, pos = self.sessions[id]
        if file == "broken" and pos > 0:
            raise RuntimeError("disk on fire")
        if file == "endless":                      # a server that never stops sending
            self.sessions[id][1] = pos + self.download_chunk
            return b"y" * self.download_chunk
        data = self.files.get(file, b"x" * 1500)
        self.sessions[id][1] = pos + self.download_chunk
        return data[pos:pos + self.download_chunk]


@pytest.fixture
def handler() -> Handler:
    return Handler()


def start_server(handler: Handler, port: int = 0, **opts: Any) -> nimbus_thrift.Server:
    server = nimbus_thrift.make_server(Nimbus, handler, host="127.0.0.1", port=port,
                                       **{"worker_threads": 4, **opts})
    server.start()
    return server


@pytest.fixture
def server(handler) -> Iterator[nimbus_thrift.Server]:
    srv = start_server(handler)
    try:
        yield srv
    finally:
        handler.release.set()   # a blocked handler would hold stop() for its grace period
        srv.stop()


def client_of(server: nimbus_thrift.Server, **kwargs: Any) -> NimbusClient:
    host, port = server.address
    return NimbusClient(host, port, **kwargs)


def test_calls_return_idl_structs_positional_or_keyword(server, handler):
    with client_of(server) as client:
        assert client.getClusterInfo() == cluster_summary()
        assert client.getTopologyInfo("wc-1-1") == topology_info("wc-1-1")
        assert client.getTopologyInfo(id="wc-1-1") == topology_info("wc-1-1")
        assert client.call("getTopologyInfo", id="wc-1-1") == topology_info("wc-1-1")
        assert client.isTopologyNameAllowed("wc") is True
        assert client.isTopologyNameAllowed(name="_x") is False
        assert client.killTopology(name="wc-1-1") is None
    assert handler.killed == ["wc-1-1"]
    assert server.metrics().connections_accepted == 1


def test_idl_exceptions_are_raised_as_is_and_keep_the_connection(server, handler):
    with client_of(server) as client:
        with pytest.raises(nimbus.NotAliveException) as info:
            client.getTopologyInfo("nope")
        assert info.value.msg == "no topology nope"
        with pytest.raises(nimbus.NotAliveException):
            client.killTopology("nope")
        assert client.getClusterInfo() == cluster_summary()
    assert server.metrics().connections_accepted == 1


def test_handler_crash_is_a_server_error_with_code_and_message(server):
    with client_of(server) as client:
        with pytest.raises(ServerError) as info:
            client.getTopologyConf("wc-1-1")
        err = info.value
        assert err.code == AppErrorCode.INTERNAL_ERROR
        assert "boom" in err.server_message
        assert err.method == "getTopologyConf"
        assert f"{client.address} failed getTopologyConf: INTERNAL_ERROR (6)" in str(err)
        assert client.getClusterInfo() == cluster_summary()   # connection kept
    assert server.metrics().connections_accepted == 1


def test_unknown_method_and_bad_arguments_send_nothing():
    with refused_port() as port:
        client = NimbusClient("127.0.0.1", port, connect_attempts=1)
        with pytest.raises(AttributeError):
            client.call("getBlob")
        with pytest.raises(TypeError, match="do not match the IDL"):
            client.getTopologyInfo(42)
        with pytest.raises(TypeError, match="missing argument"):
            client.call("killTopology")
        assert not client.connected   # refused before any connection was tried
        client.close()


def test_connection_refused_names_the_address_and_the_attempts():
    with refused_port() as port:
        client = NimbusClient("127.0.0.1", port, connect_attempts=3, backoff_initial=0.05)
        with pytest.raises(NimbusUnavailable) as info:
            client.getClusterInfo()
    err = info.value
    assert str(err).startswith(f"no nimbus at 127.0.0.1:{port}: connection refused "
                               f"(after 3 attempts over ")
    assert (err.host, err.port, err.attempts, err.reason) == (
        "127.0.0.1", port, 3, "connection refused")
    assert err.elapsed >= 0.05 + 0.1   # both back-off waits happened
    assert not client.connected
    client.close()


def test_call_timeout_discards_the_connection_and_the_stale_reply(server, handler):
    with client_of(server, timeout=0.3) as client:
        started = time.monotonic()
        with pytest.raises(NimbusTimeout) as info:
            client.getNimbusConf()
        assert 0.3 <= time.monotonic() - started < 5
        assert str(info.value) == (f"timed out after 0.3 s waiting for getNimbusConf from "
                                   f"{client.address}")
        assert (info.value.timeout, info.value.method) == (0.3, "getNimbusConf")
        assert not client.connected
        # The abandoned call now answers "stale" on the old connection; a client that
        # kept it would read that as the answer to the same call made again.
        handler.release.set()
        assert client.getNimbusConf() == '{"answer": "fresh"}'
    assert server.metrics().connections_accepted == 2


def test_server_refuses_a_frame_over_its_limit(handler):
    server = start_server(handler, max_frame_size=1000)
    try:
        with client_of(server) as client:
            location = client.beginFileUpload()
            with pytest.raises(FrameRefused) as info:
                client.uploadChunk(location, b"z" * 5000)
            err = info.value
            assert err.refused_by == "server"
            assert err.limit == 1000
            assert 5000 <= err.size < 5100   # the chunk plus the message header and fields
            assert str(err).startswith(f"server refused a frame of {err.size} bytes "
                                       f"(limit 1000)")
            assert "max frame size" in err.server_message
            assert handler.uploads[location] == b""
            assert not client.connected        # the server closes after refusing
            assert client.getClusterInfo() == cluster_summary()
    finally:
        server.stop()


def test_client_refuses_a_frame_over_its_limit_before_sending(server, handler):
    with client_of(server, max_frame_size=1000) as client:
        location = client.beginFileUpload()
        with pytest.raises(FrameRefused) as info:
            client.uploadChunk(location, b"z" * 5000)
        err = info.value
        assert (err.refused_by, err.limit) == ("client", 1000)
        assert 5000 <= err.size < 5100
        assert "refused to send a frame of" in str(err)
        assert client.connected                 # nothing was sent: the connection is fine
        client.uploadChunk(location, b"ok")
    assert handler.uploads[location] == b"ok"
    metrics = server.metrics()
    assert (metrics.connections_accepted, metrics.frames_refused) == (1, 0)


def test_getter_works_across_a_server_restart_on_the_same_port(handler):
    first = start_server(handler)
    host, port = first.address
    try:
        client = NimbusClient(host, port)
        assert client.getClusterInfo() == cluster_summary()
    finally:
        first.stop()
    second = start_server(handler, port=port)
    try:
        with client:
            assert client.getClusterInfo() == cluster_summary()
        assert second.metrics().connections_accepted == 1
    finally:
        second.stop()


def test_upload_then_download_round_trip(server, handler, tmp_path):
    source = tmp_path / "topology.zip"
    data = os.urandom(2500)
    source.write_bytes(data)
    seen: list[tuple[int, int]] = []
    with client_of(server) as client:
        location = client.upload_file(source, chunk_size=1000,
                                      progress=lambda sent, total: seen.append((sent, total)))
        assert seen == [(1000, 2500), (2000, 2500), (2500, 2500)]
        assert handler.finished == [location]
        assert handler.files[location] == data
        dest = tmp_path / "copy.zip"
        assert client.download_file(location, dest) == 2500
    assert dest.read_bytes() == data
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.zip", "topology.zip"]


def test_upload_with_default_chunks(server, handler, tmp_path):
    source = tmp_path / "big.zip"
    source.write_bytes(b"q" * (DEFAULT_CHUNK_SIZE + 1))
    seen: list[tuple[int, int]] = []
    with client_of(server) as client:
        location = client.upload_file(str(source), progress=lambda *a: seen.append(a))
    assert seen == [(DEFAULT_CHUNK_SIZE, DEFAULT_CHUNK_SIZE + 1),
                    (DEFAULT_CHUNK_SIZE + 1, DEFAULT_CHUNK_SIZE + 1)]
    assert len(handler.files[location]) == DEFAULT_CHUNK_SIZE + 1


def test_upload_of_a_missing_file_sends_nothing(server, handler, tmp_path):
    with client_of(server) as client:
        with pytest.raises(FileNotFoundError):
            client.upload_file(tmp_path / "absent.zip")
    assert handler.uploads == {}


def test_failed_download_leaves_neither_dest_nor_temp_file(server, tmp_path):
    dest = tmp_path / "out.zip"
    dest.write_bytes(b"previous")
    with client_of(server) as client:
        with pytest.raises(ServerError, match="disk on fire"):
            client.download_file("broken", dest)
    assert dest.read_bytes() == b"previous"
    assert [p.name for p in tmp_path.iterdir()] == ["out.zip"]


def test_download_over_max_bytes_stops_and_removes_the_partial_file(server, handler,
                                                                   tmp_path):
    dest = tmp_path / "out.zip"
    dest.write_bytes(b"previous")
    with client_of(server) as client:
        with pytest.raises(DownloadTooLarge) as info:
            client.download_file("endless", dest, max_bytes=10_500)
        err = info.value
        assert (err.file, err.limit, err.received) == ("endless", 10_500, 11_000)
        assert "sent more than 10,500 bytes" in str(err)
        assert "partial file was removed" in str(err)
        # It stopped at the chunk that crossed the cap, not later.
        assert handler.sessions["session-1"][1] == 11_000
        assert client.getClusterInfo() == cluster_summary()     # connection kept
    assert dest.read_bytes() == b"previous"
    assert [p.name for p in tmp_path.iterdir()] == ["out.zip"]
    assert server.metrics().connections_accepted == 1


def test_download_of_exactly_max_bytes_is_complete(server, handler, tmp_path):
    handler.files["f"] = b"z" * 2500
    with client_of(server) as client:
        assert client.download_file("f", tmp_path / "a", max_bytes=2500) == 2500
        with pytest.raises(DownloadTooLarge):
            client.download_file("f", tmp_path / "b", max_bytes=2499)
        with pytest.raises(ValueError, match="max_bytes must be an integer of at least 1"):
            client.download_file("f", tmp_path / "c", max_bytes=0)
    assert (tmp_path / "a").read_bytes() == b"z" * 2500
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]


def test_download_cap_defaults_to_a_generous_constant():
    default = inspect.signature(NimbusClient.download_file).parameters["max_bytes"].default
    assert default == DEFAULT_MAX_DOWNLOAD_BYTES >= 4 * 256 * 1024 * 1024


def test_reply_over_the_decoded_size_budget_is_a_bad_reply(server):
    with client_of(server) as client:
        assert client.getTopology("small").bolts["b"].common.inputs == {}
        with pytest.raises(BadReply) as info:
            client.getTopology("huge")
        assert "decoded-size limit exceeded" in str(info.value)
        assert "the client's limit: decoded_size_factor 16 " in str(info.value)
        assert not client.connected                   # discarded, as for any bad reply
        assert client.getClusterInfo() == cluster_summary()
    assert server.metrics().connections_accepted == 2


def test_threads_share_one_client_one_call_at_a_time(server):
    errors: list[BaseException] = []
    results: list[Any] = []
    with client_of(server) as client:
        def work(i: int) -> None:
            try:
                for _ in range(20):
                    results.append(client.getTopologyInfo("wc-1-1"))
                    assert client.isTopologyNameAllowed(f"t{i}") is True
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
        threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    assert errors == []
    assert len(results) == 160 and all(r == topology_info("wc-1-1") for r in results)
    assert server.metrics().connections_accepted == 1


def test_context_manager_connects_and_close_is_final(server):
    client = client_of(server)
    assert not client.connected
    with client:
        assert client.connected
    assert not client.connected
    with pytest.raises(NimbusClientError, match="is closed"):
        client.getClusterInfo()
    assert "closed" in repr(client)


# --------------------------------------------------------------------------- fake server


class FakeNimbus:
    """Listens on 127.0.0.1 (before the constructor returns); runs one script per
    accepted connection, in order, on a background thread."""

    def __init__(self, *scripts: Callable[["FakeNimbus", socket.socket], None]) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = self.listener.getsockname()[:2]
        self.scripts = scripts
        self.calls: list[tuple[int, str]] = []    # (connection number, method)
        self.errors: list[BaseException] = []
        self.conn_no = 0
        self.idle_closed = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        for script in self.scripts:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.conn_no += 1
            with conn:
                try:
                    script(self, conn)
                except BaseException as exc:  # noqa: BLE001 - reported by close()
                    self.errors.append(exc)

    def read_call(self, conn: socket.socket) -> binary.MessageHeader:
        header = binary.read_message_header(read_frame(conn))
        self.calls.append((self.conn_no, header.name))
        return header

    def client(self, **kwargs: Any) -> NimbusClient:
        return NimbusClient(*self.address, **kwargs)

    def close(self) -> None:
        self.listener.shutdown(socket.SHUT_RDWR)   # wakes a blocked accept() on Linux
        self.listener.close()
        self.thread.join(5)
        assert self.errors == []


def drop_after_request(fake: FakeNimbus, conn: socket.socket) -> None:
    fake.read_call(conn)


def answer(fake: FakeNimbus, conn: socket.socket) -> None:
    header = fake.read_call(conn)
    result = {"getClusterInfo": {"success": cluster_summary()}}.get(header.name, {})
    conn.sendall(frame(reply(header.name, header.seqid, **result)))


def answer_then_close_idle(fake: FakeNimbus, conn: socket.socket) -> None:
    answer(fake, conn)
    conn.close()
    fake.idle_closed.set()


@pytest.fixture
def fake_factory() -> Iterator[Callable[..., FakeNimbus]]:
    fakes: list[FakeNimbus] = []

    def make(*scripts: Any) -> FakeNimbus:
        fakes.append(FakeNimbus(*scripts))
        return fakes[-1]
    yield make
    for fake in fakes:
        fake.close()


def test_getter_is_retried_once_after_the_connection_drops(fake_factory):
    fake = fake_factory(drop_after_request, answer)
    with fake.client() as client:
        assert client.getClusterInfo() == cluster_summary()
    assert fake.calls == [(1, "getClusterInfo"), (2, "getClusterInfo")]


def test_getter_retried_once_only(fake_factory):
    fake = fake_factory(drop_after_request, drop_after_request, answer)
    with fake.client() as client:
        with pytest.raises(ConnectionLost) as info:
            client.getLeader()
        assert info.value.retried
        assert "failed again after reconnecting once" in str(info.value)
    assert fake.calls == [(1, "getLeader"), (2, "getLeader")]


def test_mutating_call_is_never_retried(fake_factory):
    fake = fake_factory(drop_after_request, answer)
    with fake.client() as client:
        with pytest.raises(ConnectionLost) as info:
            client.killTopology("wc")
        err = info.value
        assert (err.method, err.retried) == ("killTopology", False)
        assert str(err) == (f"lost the connection to nimbus at {client.address} during "
                            f"killTopology: the server closed the connection without "
                            f"replying; not retried: killTopology changes state and may "
                            f"already have taken effect")
        assert not client.connected
    assert fake.calls == [(1, "killTopology")]


def test_idle_connection_closed_by_the_server_is_replaced_before_sending(fake_factory):
    fake = fake_factory(answer_then_close_idle, answer)
    with fake.client() as client:
        assert client.getClusterInfo() == cluster_summary()
        assert fake.idle_closed.wait(5)
        assert client.killTopology("wc") is None   # mutating: only safe if not yet sent
    assert fake.calls == [(1, "getClusterInfo"), (2, "killTopology")]


def test_reply_cut_short_is_a_lost_connection(fake_factory):
    def half_reply(fake: FakeNimbus, conn: socket.socket) -> None:
        header = fake.read_call(conn)
        whole = frame(reply(header.name, header.seqid))
        conn.sendall(whole[:10])
    fake = fake_factory(half_reply)
    with fake.client() as client:
        with pytest.raises(ConnectionLost, match=r"6 bytes into a \d+-byte read"):
            client.activate("wc")


def test_http_server_is_a_bad_reply(fake_factory):
    def http(fake: FakeNimbus, conn: socket.socket) -> None:
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
    fake = fake_factory(http)
    with fake.client() as client:
        with pytest.raises(BadReply) as info:
            client.getClusterInfo()
        assert "starts with 'HTTP': not framed Thrift" in str(info.value)
        assert not client.connected


def test_reply_to_another_call_is_a_bad_reply(fake_factory):
    def wrong_seqid(fake: FakeNimbus, conn: socket.socket) -> None:
        header = fake.read_call(conn)
        conn.sendall(frame(reply(header.name, header.seqid + 1)))
    fake = fake_factory(wrong_seqid)
    with fake.client() as client:
        with pytest.raises(BadReply, match="answers deactivate #2, not deactivate #1"):
            client.deactivate("wc")
        assert not client.connected
