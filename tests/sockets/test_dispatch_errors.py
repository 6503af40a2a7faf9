"""Socket tier: what the dispatcher sends back when a request cannot be served, on a
real connection that must stay usable afterwards: a method the IDL declares but the
handler lacks (UNKNOWN_METHOD), a request over the decoded-size budget
(PROTOCOL_ERROR, its frame's memory returned), and a handler crash (INTERNAL_ERROR
with the exception's type and a short reason, no absolute path; the detail in the log
with the request's context)."""

from __future__ import annotations

import gc
import tracemalloc

import pytest

import nimbus_thrift
from nimbus_thrift.demo import EchoHandler
from nimbus_thrift.idl import nimbus_idl
from nimbus_thrift.rpc.dispatch import MAX_REASON_CHARS
from nimbus_thrift.rpc.errors import AppErrorCode
from nimbus_thrift.rpc.options import DEFAULT_DECODED_SIZE_FACTOR

from support.rawthrift import EXCEPTION, ONEWAY, REPLY, call, connect, frame, message, roundtrip, wait_for

N = nimbus_idl()




def serve(service, handler, **options):
    server = nimbus_thrift.make_server(service, handler, host="127.0.0.1", port=0,
                                       **{"worker_threads": 2, **options})
    server.start()
    return server


# --------------------------------------------------------------------------- UNKNOWN_METHOD


class NoPing:
    """The Echo service without ``ping`` (and without ``notify``, a oneway)."""

    def echo(self, s: str) -> str:
        return s


def test_method_missing_from_the_handler_is_unknown_method_and_the_connection_lives(demo):
    with serve(demo.Echo, NoPing()) as server:
        with connect(server.address) as sock:
            reply = roundtrip(sock, call(demo.Echo, "ping", seqid=4), demo.Echo)
            assert (reply.type, reply.name, reply.seqid) == (EXCEPTION, "ping", 4)
            assert reply.body.type == AppErrorCode.UNKNOWN_METHOD
            assert "declared in the IDL but the handler does not implement it" \
                in reply.body.message
            # A oneway one gets nothing back, and the connection goes on too.
            sock.sendall(call(demo.Echo, "notify", seqid=5, mtype=ONEWAY, event="x"))
            reply = roundtrip(sock, call(demo.Echo, "echo", seqid=6, s="still here"),
                              demo.Echo)
            assert (reply.type, reply.seqid, reply.body.success) == (REPLY, 6, "still here")
        metrics = server.metrics()
    assert metrics.connections_accepted == 1
    assert metrics.requests_failed == 2


def test_unknown_method_on_the_nimbus_idl_through_the_client():
    from nimbus_thrift.client.client import NimbusClient
    from nimbus_thrift.client.errors import ServerError

    class OnlyConf:
        def getNimbusConf(self) -> str:
            return "{}"

    with serve(N.Nimbus, OnlyConf()) as server:
        with NimbusClient(*server.address) as client:
            with pytest.raises(ServerError) as info:
                client.getClusterInfo()
            assert info.value.code == AppErrorCode.UNKNOWN_METHOD
            assert client.connected
            assert client.getNimbusConf() == "{}"
        assert server.metrics().connections_accepted == 1


# --------------------------------------------------------------------------- budget


class Submits:
    def __init__(self) -> None:
        self.submitted = 0

    def submitTopology(self, name, location, conf, topology) -> None:
        self.submitted += 1

    def getNimbusConf(self) -> str:
        return "{}"


def _submit_of_empty_structs(count: int, seqid: int) -> bytes:
    topology = N.StormTopology(spouts={}, state_spouts={}, bolts={"b": N.Bolt(
        bolt_object=N.ComponentObject(java_object=N.JavaObject(
            full_class_name="x", args_list=[N.JavaObjectArg()] * count)),
        common=N.ComponentCommon(inputs={}, streams={}))})
    return frame(message("submitTopology", seqid, N.Nimbus.submitTopology_args(
        name="x", uploadedJarLocation="y", jsonConf="{}", topology=topology)))


def test_request_over_the_decoded_size_budget_is_refused_and_its_memory_returns():
    # Row 7 of issue 13: a 1 MB frame of a million empty structs decoded to ~136 MB.
    handler = Submits()
    attack = _submit_of_empty_structs(1_000_000, seqid=7)
    small = _submit_of_empty_structs(10, seqid=8)
    with serve(N.Nimbus, handler) as server:
        with connect(server.address) as sock:
            gc.collect()
            tracemalloc.start()
            try:
                base, _ = tracemalloc.get_traced_memory()
                reply = roundtrip(sock, attack, N.Nimbus)
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            assert (reply.type, reply.seqid) == (EXCEPTION, 7)
            assert reply.body.type == AppErrorCode.PROTOCOL_ERROR
            text = reply.body.message
            assert "decoded-size limit exceeded" in text
            assert f"decoded_size_factor {DEFAULT_DECODED_SIZE_FACTOR} times" in text
            assert f"{len(attack) - 4:,} bytes" in text
            # The frame, the objects made before the limit and a little more; not the
            # ~136 MB the frame would have become.
            assert peak - base < 4 * DEFAULT_DECODED_SIZE_FACTOR * len(attack)
            assert peak - base < 100 * 1024 * 1024
            # The connection goes on, the frame's bytes are back while it is still open.
            wait_for(lambda: server.metrics().bytes_reserved == 0, what="bytes released")
            assert roundtrip(sock, small, N.Nimbus).type == REPLY
            reply = roundtrip(sock, frame(message("getNimbusConf", 9,
                                                  N.Nimbus.getNimbusConf_args())), N.Nimbus)
            assert (reply.type, reply.body.success) == (REPLY, "{}")
            wait_for(lambda: server.metrics().bytes_reserved == 0, what="bytes released")
        metrics = server.metrics()
    assert handler.submitted == 1                  # only the small one reached it
    assert metrics.connections_accepted == 1
    assert metrics.requests_failed == 1


# --------------------------------------------------------------------------- INTERNAL_ERROR


class Crashes(EchoHandler):
    """echo raises what a failing mkdir raises, with the daemon's absolute path."""

    PATH = "/home/nimbus/.local/share/nimbus-thrift/topologies/" + "n" * 250 + "-1-17"

    def echo(self, s: str) -> str:
        if s == "mkdir":
            raise OSError(36, "File name too long", self.PATH)
        if s == "traceback":
            raise RuntimeError("wrapped failure\nTraceback (most recent call last):\n"
                               '  File "/opt/secret/app.py", line 3, in run\n')
        return s


def test_handler_crash_tells_the_client_the_type_and_a_short_reason_without_paths(demo, logs):
    with serve(demo.Echo, Crashes()) as server:
        with connect(server.address) as sock:
            reply = roundtrip(sock, call(demo.Echo, "echo", seqid=21, s="mkdir"), demo.Echo)
            assert reply.body.type == AppErrorCode.INTERNAL_ERROR
            text = reply.body.message
            assert text.startswith("Internal error processing echo: OSError: [Errno 36] "
                                   "File name too long: 'nnnn")
            assert "/home" not in text and "nimbus-thrift" not in text
            assert len(text) <= len("Internal error processing echo: OSError: ") \
                + MAX_REASON_CHARS
            reply = roundtrip(sock, call(demo.Echo, "echo", seqid=22, s="traceback"),
                              demo.Echo)
            assert reply.body.message == ("Internal error processing echo: RuntimeError: "
                                          "wrapped failure")
            # And the connection carries on.
            assert roundtrip(sock, call(demo.Echo, "echo", seqid=23, s="ok"),
                             demo.Echo).body.success == "ok"
            peer = "%s:%d" % sock.getsockname()[:2]
    failed = [e for e in logs if e["event"] == "handler_failed"]
    assert [(e["peer"], e["method"], e["seqid"]) for e in failed] == [
        (peer, "echo", 21), (peer, "echo", 22)]
    # The log keeps everything the client was not told: the full path, the traceback.
    assert Crashes.PATH in failed[0]["error"]
    assert isinstance(failed[0]["exc_info"], OSError)
    assert "/opt/secret/app.py" in failed[1]["error"]
