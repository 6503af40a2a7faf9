"""NimbusClient: the protocol steps byte by byte, then real sockets against our server
(serving the Nimbus IDL with a small handler) and against a scripted raw-socket fake
for the failures our server never produces (a dropped request, a foreign protocol)."""

from __future__ import annotations

import inspect
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from thriftpy2.thrift import TApplicationException

import nimbus_thrift
from nimbus_thrift.idl import NIMBUS_PORT as DEFAULT_PORT
from nimbus_thrift.rpc import options
from nimbus_thrift.rpc.codec import binary
from nimbus_thrift.client.client import DEFAULT_MAX_FRAME_SIZE, NimbusClient, nimbus_idl
from nimbus_thrift.client.defaults import (DEFAULT_CHUNK_SIZE, DEFAULT_MAX_DOWNLOAD_BYTES,
                                           READ_ONLY_METHODS)
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
from nimbus_thrift.rpc.codec.calls import (
    UnreadableReply,
    backoff_delays,
    bind_args,
    check_reply_length,
    decode_reply,
    encode_call,
    parse_frame_refusal,
)
from nimbus_thrift.rpc.errors import AppErrorCode, FrameSizeError

from support.rawthrift import EXCEPTION, REPLY, frame, message, read_frame, refused_port

nimbus = nimbus_idl()
Nimbus = nimbus.Nimbus


def cluster_summary() -> Any:
    return nimbus.ClusterSummary(
        supervisors=[nimbus.SupervisorSummary(host="w1", uptime_secs=5, num_workers=4,
                                              num_used_workers=1, supervisor_id="s1")],
        nimbus_uptime_secs=7,
        topologies=[nimbus.TopologySummary(id="wc-1-1", name="wc", num_tasks=3,
                                           num_executors=3, num_workers=1, uptime_secs=2,
                                           status="ACTIVE")],
        nimbuses=[nimbus.NimbusSummary(host="n1", port=6627, uptime_secs=7, isLeader=True,
                                       version="0.1.0")])


def topology_info(id: str) -> Any:
    return nimbus.TopologyInfo(id=id, name="wc", uptime_secs=2, executors=[],
                               status="ACTIVE", errors={})


# --------------------------------------------------------------------------- constants


def test_defaults_match_storm_and_the_server():
    assert DEFAULT_PORT == 6627
    assert DEFAULT_CHUNK_SIZE == 307_200
    assert DEFAULT_MAX_FRAME_SIZE == options.DEFAULT_MAX_FRAME_SIZE


def test_every_idl_method_is_a_client_method_with_the_idl_argument_names():
    for method in Nimbus.thrift_services:
        params = list(inspect.signature(getattr(NimbusClient, method)).parameters)[1:]
        idl_names = [e[1] for e in getattr(Nimbus, method + "_args").thrift_spec.values()]
        assert params == idl_names, method


def test_read_only_methods_are_idl_getters():
    assert READ_ONLY_METHODS <= set(Nimbus.thrift_services)
    assert all(m.startswith(("get", "is")) for m in READ_ONLY_METHODS)
    assert not READ_ONLY_METHODS & {"beginFileDownload", "downloadChunk", "killTopology"}


# --------------------------------------------------------------------------- bytes


def test_backoff_doubles_up_to_the_cap():
    assert backoff_delays(1, 0.1, 2.0, 2.0) == []
    assert backoff_delays(3, 0.1, 2.0, 2.0) == pytest.approx([0.1, 0.2])
    assert backoff_delays(7, 0.1, 2.0, 0.5) == pytest.approx([0.1, 0.2, 0.4, 0.5, 0.5, 0.5])


def test_bind_args_positional_keyword_and_mixed():
    for bound in (bind_args(Nimbus, "uploadChunk", ("loc", b"xy"), {}),
                  bind_args(Nimbus, "uploadChunk", (), {"chunk": b"xy", "location": "loc"}),
                  bind_args(Nimbus, "uploadChunk", ("loc",), {"chunk": b"xy"})):
        assert (bound.location, bound.chunk) == ("loc", b"xy")


@pytest.mark.parametrize("args, kwargs, error, text", [
    (("a", b"b", "c"), {}, TypeError, "takes 2 arguments"),
    (("a",), {"chunks": b""}, TypeError, "unexpected keyword argument 'chunks'"),
    (("a",), {"location": "b", "chunk": b""}, TypeError, "multiple values for argument 'location'"),
    (("a",), {}, TypeError, "missing argument(s): chunk"),
])
def test_bind_args_refuses_what_python_would(args, kwargs, error, text):
    with pytest.raises(error) as info:
        bind_args(Nimbus, "uploadChunk", args, kwargs)
    assert text in str(info.value)


def test_bind_args_unknown_method():
    with pytest.raises(AttributeError, match="no method 'uploadBlob'"):
        bind_args(Nimbus, "uploadBlob", (), {})


def test_encode_call_is_a_strict_call_header_and_the_args():
    payload = encode_call("getTopologyInfo", 9, Nimbus.getTopologyInfo_args(id="t"))
    # 0x80010001 CALL, name, seqid 9, field 1 STRING "t", STOP
    assert payload.hex() == ("80010001" + "0000000f" + b"getTopologyInfo".hex() + "00000009"
                             + "0b0001" + "00000001" + "74" + "00")


def test_encode_call_wrong_type_is_a_type_error():
    with pytest.raises(TypeError, match="arguments of getTopologyInfo do not match the IDL"):
        encode_call("getTopologyInfo", 1, Nimbus.getTopologyInfo_args(id=5))


def reply(method: str, seqid: int, **result: Any) -> bytes:
    """A REPLY payload encoded by thriftpy2's own writer (independent of the client)."""
    return message(method, seqid, getattr(Nimbus, method + "_result")(**result), REPLY)


def test_decode_reply_success_void_and_declared_exception():
    summary = cluster_summary()
    assert decode_reply(Nimbus, "getClusterInfo", 3,
                        reply("getClusterInfo", 3, success=summary)) == summary
    assert decode_reply(Nimbus, "isTopologyNameAllowed", 4,
                        reply("isTopologyNameAllowed", 4, success=False)) is False
    assert decode_reply(Nimbus, "killTopology", 5, reply("killTopology", 5)) is None
    with pytest.raises(nimbus.NotAliveException) as info:
        decode_reply(Nimbus, "killTopology", 6,
                     reply("killTopology", 6, e=nimbus.NotAliveException(msg="gone")))
    assert info.value.msg == "gone"


def test_decode_reply_application_exception_is_raised_for_the_shell():
    payload = message("", 0, TApplicationException(7, "frame of 9 bytes refused"), EXCEPTION)
    with pytest.raises(TApplicationException) as info:
        decode_reply(Nimbus, "uploadChunk", 12, payload)
    assert (info.value.type, info.value.message) == (7, "frame of 9 bytes refused")


@pytest.mark.parametrize("payload, text", [
    (reply("getClusterInfo", 4, success=cluster_summary()), "not getClusterInfo #3"),
    (reply("getLeader", 3), "not getClusterInfo #3"),
    (reply("getClusterInfo", 3), "neither a result nor a declared exception"),
    (message("getClusterInfo", 3, Nimbus.getClusterInfo_args()), "message type 1"),
    (b"\x00\x01", "truncated"),
])
def test_decode_reply_refuses_what_is_not_our_reply(payload, text):
    with pytest.raises(UnreadableReply, match=text):
        decode_reply(Nimbus, "getClusterInfo", 3, payload)


def test_decode_reply_every_truncation_is_unreadable_never_garbage():
    payload = reply("getClusterInfo", 3, success=cluster_summary())
    for cut in range(len(payload)):
        with pytest.raises(UnreadableReply):
            decode_reply(Nimbus, "getClusterInfo", 3, payload[:cut])


def test_check_reply_length():
    assert check_reply_length(b"\x00\x00\x03\xe8", 1000) == 1000
    with pytest.raises(UnreadableReply, match="1001 bytes exceeds max_frame_size 1000"):
        check_reply_length(b"\x00\x00\x03\xe9", 1000)
    with pytest.raises(UnreadableReply, match="length of 0"):
        check_reply_length(b"\x00\x00\x00\x00", 1000)
    with pytest.raises(UnreadableReply, match="starts with 'HTTP': not framed Thrift"):
        check_reply_length(b"HTTP", DEFAULT_MAX_FRAME_SIZE)


@pytest.mark.parametrize("text, expected", [
    (str(FrameSizeError(5026, 1000, "the max frame size")), (5026, 1000)),
    (str(FrameSizeError(300_000_000, 268_435_456, "the server's whole read-buffer budget "
                                                  "(max_read_buffer_bytes)")),
     (300_000_000, 268_435_456)),
    ("Frame size (20000000) larger than max length (16384000)!", (20_000_000, 16_384_000)),
    ("frame of 16,384,001 bytes refused (limit 16,384,000)", (16_384_001, 16_384_000)),
    ("string at offset 12 is not valid UTF-8 (invalid start byte at byte 3)", None),
    ("frame of 10 bytes is fine under 1000 bytes", None),
    ("", None),
    (None, None),
])
def test_parse_frame_refusal(text, expected):
    assert parse_frame_refusal(text) == expected


# --------------------------------------------------------------------------- arguments


@pytest.mark.parametrize("kwargs, text", [
    ({"host": ""}, "host must be a non-empty string"),
    ({"port": 0}, "port must be an integer from 1 to 65535, not 0."),
    ({"port": 65536}, "port must be an integer from 1 to 65535"),
    ({"port": "6627"}, "port must be an integer"),
    ({"port": True}, "port must be an integer"),
    ({"timeout": 0}, "timeout must be a positive number of seconds, not 0."),
    ({"timeout": -1.5}, "timeout must be a positive number"),
    ({"timeout": float("nan")}, "timeout must be a positive number"),
    ({"timeout": float("inf")}, "timeout must be a positive number"),
    ({"timeout": None}, "timeout must be a positive number"),
    ({"connect_timeout": 0.0}, "connect_timeout must be a positive number"),
    ({"connect_attempts": 0}, "connect_attempts must be an integer of at least 1, not 0."),
    ({"connect_attempts": 2.5}, "connect_attempts must be an integer"),
    ({"backoff_initial": -0.1}, "backoff_initial must be a number of seconds of at least 0"),
    ({"backoff_factor": 0.5}, "backoff_factor must be a number of at least 1"),
    ({"backoff_initial": 3.0, "backoff_max": 2.0}, "backoff_max must be a number of seconds "
                                                   "of at least backoff_initial (3.0)"),
    ({"max_frame_size": 0}, "max_frame_size must be an integer of at least 1"),
    ({"decoded_size_factor": 0.5}, "decoded_size_factor must be a number of at least 1"),
    ({"decoded_size_factor": float("nan")}, "decoded_size_factor must be a number of at least"),
    ({"decoded_size_factor": True}, "decoded_size_factor must be a number of at least 1"),
])
def test_invalid_arguments_are_value_errors_with_a_sentence(kwargs, text):
    with pytest.raises(ValueError) as info:
        NimbusClient(**{"host": "127.0.0.1", **kwargs})
    assert text in str(info.value)


def test_upload_chunk_size_is_validated(tmp_path):
    client = NimbusClient("127.0.0.1", 1)
    with pytest.raises(ValueError, match="chunk_size must be an integer of at least 1"):
        client.upload_file(tmp_path / "x", chunk_size=0)


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


# --------------------------------------------------------------------------- TLS and Unix arguments


@pytest.mark.parametrize("kwargs, text", [
    ({"unix_socket": "/tmp/n.sock", "ca_file": "/ca.pem"},
     "unix_socket and TLS settings exclude each other"),
    ({"unix_socket": "/tmp/n.sock", "ssl_context": "ctx"},
     "unix_socket and TLS settings exclude each other"),
    ({"ssl_context": "ctx"}, "ssl_context must be an ssl.SSLContext, not 'ctx'."),
    ({"unix_socket": ""}, "unix_socket must be a path, not ''."),
    ({"unix_socket": 5}, "unix_socket must be a path, not 5."),
    ({"ca_file": 5}, "ca_file must be a path, not 5."),
    ({"cert_file": ""}, "cert_file must be a path, not ''."),
    ({"ssl_context": None, "key_file": "/k.pem"},
     "key_file /k.pem was given without cert_file"),
])
def test_tls_and_unix_arguments_are_value_errors_with_a_sentence(kwargs, text):
    with pytest.raises(ValueError) as info:
        NimbusClient("127.0.0.1", **kwargs)
    assert text in str(info.value)


def test_ssl_context_excludes_certificate_files():
    import ssl
    with pytest.raises(ValueError, match="give either ssl_context or cert_file, ca_file, "
                                         "not both"):
        NimbusClient("127.0.0.1", ssl_context=ssl.create_default_context(),
                     cert_file="/c.pem", ca_file="/ca.pem")


def test_with_a_unix_socket_host_and_port_are_its_path_and_port_0():
    client = NimbusClient("ignored", 1, unix_socket="/run/nimbus.sock")
    assert (client.host, client.port, client.address) == ("/run/nimbus.sock", 0,
                                                          "unix:/run/nimbus.sock")
    assert client.tls is None
    client.close()
