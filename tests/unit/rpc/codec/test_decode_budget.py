"""Bytes tier: the decoded-size budget (nimbus_thrift.rpc.codec.decoded) as the decoders
charge it (binary.py and _wire.c, which must agree to the byte), as the dispatcher
applies it to requests and as the client applies it to replies."""

from __future__ import annotations

import json
import sys
import tempfile
import tracemalloc
from pathlib import Path
from types import ModuleType

import pytest
from thriftpy2.thrift import TApplicationException

from nimbus_thrift.demo import EchoHandler, demo_thrift
from nimbus_thrift.idl import nimbus_idl
from nimbus_thrift.rpc.codec import binary, decoded
from nimbus_thrift.rpc.codec.calls import UnreadableReply, decode_reply
from nimbus_thrift.rpc.codec.decoded import DECODED_SIZE_FLOOR, UNLIMITED, decoded_size_limit
from nimbus_thrift.rpc.dispatch import Dispatcher, Status
from nimbus_thrift.rpc.errors import AppErrorCode, DecodeBudgetError, DecodeError
from nimbus_thrift.rpc.options import DEFAULT_DECODED_SIZE_FACTOR, OptionError, ServerOptions
from support.binary_cases import (ALL_HEX, c_outcome, encode_cy, h, load_cases,
                                  python_outcome, round_trip_cases, spent)

N = nimbus_idl()


@pytest.fixture(scope="module")
def t(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    return load_cases(tmp_path_factory.mktemp("idl"))


# --------------------------------------------------------------------------- charges


def test_c_exports_the_same_cost_table() -> None:
    assert binary._wire is not None
    assert binary._wire.COSTS == decoded.COSTS


def test_charges_by_hand(t: ModuleType) -> None:
    # Pair(a=5, b=6): the struct (80 + 8 per declared field) and two ints.
    pair = h("08 0001 00000005  08 0002 00000006  00")
    assert spent(t.Pair, pair) == (80 + 8 * 2) + 2 * 32
    # Ints(li=[1, -1]): the struct, the list (56) and per element its slot and int.
    ints = h("0f 0001 08 00000002 00000001 ffffffff 00")
    assert spent(t.Ints, ints) == (80 + 8) + 56 + 2 * (8 + 32)
    # Str: ASCII is exact (49 + length); any other string 80 + 4 per character.
    assert spent(t.Str, h("0b 0001 00000002 6162 00")) == 88 + 49 + 2
    assert spent(t.Str, h("0b 0001 00000005 68c3a96c6c 00")) == 88 + 80 + 4 * 4
    # Bin: 33 + length, charged on the bytes (not characters).
    assert spent(t.Bin, h("0b 0001 00000003 00ff80 00")) == 88 + 33 + 3
    # IntMap {1: 2}: the dict (64), per entry 72 plus both ints; IntSet {7}: 216, 128 + 32.
    assert spent(t.IntMap, h("0d 0001 08 08 00000001 00000001 00000002 00")) \
        == 88 + 64 + 72 + 32 + 32
    assert spent(t.IntSet, h("0e 0001 08 00000001 00000007 00")) == 88 + 216 + 128 + 32
    # A skipped (unknown) field makes nothing, so costs nothing.
    assert spent(t.Pair, h("0b 0063 00000003 616263 00")) == 96


def test_string_charge_bounds_its_real_size() -> None:
    for value in ("", "abc", "\u00e9" * 10, "\u4e2d" * 10, "a" * 9 + "\U0001f600"):
        assert decoded.string_cost(value) >= sys.getsizeof(value)
    assert decoded.string_cost("abc") == sys.getsizeof("abc")      # exact for ASCII


def _cases(t: ModuleType) -> list[tuple[type, bytes]]:
    return [(t.All, h(ALL_HEX))] + [(type(o), encode_cy(o)) for o in round_trip_cases(t)]


def test_c_and_python_accept_at_exactly_the_spent_budget_and_refuse_one_below(
        t: ModuleType) -> None:
    # The two decoders charge the same total: both take a budget of exactly what the
    # frame costs, both refuse one byte less (C by None, Python by DecodeBudgetError).
    for cls, data in _cases(t):
        cost = spent(cls, data)
        ok = python_outcome(cls, data, budget=cost)
        assert ok is not DecodeError
        assert c_outcome(cls, data, budget=cost) == ok
        assert python_outcome(cls, data, budget=cost - 1) is DecodeError
        assert c_outcome(cls, data, budget=cost - 1) is DecodeError
        with pytest.raises(DecodeBudgetError) as info:
            binary.decode_struct(cls, data, budget=cost - 1)
        assert info.value.limit == cost - 1
        assert f"{cost - 1:,} bytes" in str(info.value)
        assert binary.decode_struct(cls, data, budget=cost)[1] == len(data)


def test_every_budget_below_the_cost_is_refused_by_both(t: ModuleType) -> None:
    data = h(ALL_HEX)
    cost = spent(t.All, data)
    for budget in range(-1, cost, 7):
        assert python_outcome(t.All, data, budget=budget) is DecodeError, budget
        assert c_outcome(t.All, data, budget=budget) is DecodeError, budget


def test_budget_error_is_raised_as_itself_from_inside_nested_fields(t: ModuleType) -> None:
    # The struct reader prefixes field names to decode errors; a budget error is about
    # the whole frame and keeps its type (the dispatcher tells it apart by it).
    data = encode_cy(t.All(inners=[t.Inner(s="x" * 100)] * 50))
    with pytest.raises(DecodeBudgetError):
        binary.decode_struct(t.All, data, budget=spent(t.All, data) // 2)


def test_a_frame_of_empty_structs_is_refused_before_the_objects_exist(t: ModuleType) -> None:
    # Row 7 of issue 13: ~1M empty structs in a 1 MiB frame were ~136 MB of objects.
    count = 1_000_000
    data = h("0f 000e 0c") + count.to_bytes(4, "big") + bytes(count) + b"\x00"
    limit = decoded_size_limit(len(data), DEFAULT_DECODED_SIZE_FACTOR)
    assert limit < 20 * 1024 * 1024
    tracemalloc.start()
    try:
        with pytest.raises(DecodeBudgetError):
            binary.decode_struct(t.All, data, budget=limit)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The list's slots are charged up front: nothing near 136 MB is ever made.
    assert peak < limit + 1024 * 1024
    assert c_outcome(t.All, data, budget=limit) is DecodeError


def test_charges_track_real_memory(t: ModuleType) -> None:
    # The estimates are meant to be the objects' real size (tracemalloc, CPython 3.11):
    # within a factor of 1.5 either way on the shapes that dominate big frames.
    shapes = [
        t.All(inners=[t.Inner() for _ in range(20_000)]),
        t.All(counts={f"key{i}": i * 2**40 for i in range(20_000)}),
        t.All(ints=list(range(10**6, 10**6 + 50_000))),
        t.All(blobs=[b"x" * 30 for _ in range(20_000)]),
        t.All(longs=set(range(2**40, 2**40 + 20_000))),
    ]
    for obj in shapes:
        data = encode_cy(obj)
        charged = spent(t.All, data)
        tracemalloc.start()
        try:
            value, _ = binary.decode_struct(t.All, data, budget=UNLIMITED)
            real, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        del value
        assert real / 1.5 <= charged <= real * 1.5, (charged, real)


# --------------------------------------------------------------------------- limits


def test_decoded_size_limit() -> None:
    assert decoded_size_limit(0, 16) == DECODED_SIZE_FLOOR
    assert decoded_size_limit(1000, 16) == DECODED_SIZE_FLOOR
    assert decoded_size_limit(1024 * 1024, 16) == 16 * 1024 * 1024
    assert decoded_size_limit(1024 * 1024, 2.5) == int(2.5 * 1024 * 1024)
    assert decoded_size_limit(10, 16, floor=0) == 160


def test_decode_struct_defaults_to_the_default_budget(t: ModuleType) -> None:
    count = 200_000
    data = h("0f 000e 0c") + count.to_bytes(4, "big") + bytes(count) + b"\x00"
    with pytest.raises(DecodeBudgetError) as info:
        binary.decode_struct(t.All, data)
    assert info.value.limit == decoded_size_limit(len(data), DEFAULT_DECODED_SIZE_FACTOR)
    assert len(binary.decode_struct(t.All, data, budget=UNLIMITED)[0].inners) == count


@pytest.mark.parametrize("value", [0, 0.5, -1, float("nan"), float("inf"), True, "16", None])
def test_decoded_size_factor_option_is_validated(value: object) -> None:
    with pytest.raises(OptionError, match="decoded_size_factor must be a number of at least 1"):
        ServerOptions(decoded_size_factor=value)  # type: ignore[arg-type]


def test_decoded_size_factor_option_accepts_numbers() -> None:
    assert ServerOptions().decoded_size_factor == DEFAULT_DECODED_SIZE_FACTOR
    assert ServerOptions(decoded_size_factor=1).decoded_size_factor == 1
    assert ServerOptions(decoded_size_factor=2.5).decoded_size_factor == 2.5


# --------------------------------------------------------------------------- real traffic


def _submit_args(path: str) -> object:
    from nimbus_thrift.topology.package import prepare
    with tempfile.TemporaryDirectory() as tmp:
        p = prepare(path, Path(tmp) / "code.zip")
    return N.Nimbus.submitTopologyWithOpts_args(
        name=p.name, uploadedJarLocation="abc-123", jsonConf=p.json_conf,
        topology=p.struct, options=N.SubmitOptions(initial_status=1))


def _cluster_summary(topologies: int) -> object:
    return N.ClusterSummary(supervisors=[], nimbus_uptime_secs=5, nimbuses=[], topologies=[
        N.TopologySummary(id=f"topology-{i}-1700000000", name=f"topology-{i}", num_tasks=8,
                          num_executors=8, num_workers=2, uptime_secs=1234, status="ACTIVE",
                          sched_status="running: batch 12", owner="user")
        for i in range(topologies)])


def _topology_info(executors: int) -> object:
    # Stats maps keyed by GlobalStreamId structs: the densest message of the IDL.
    windows = [":all-time", "600", "10800", "86400"]
    stream = N.GlobalStreamId(componentId="split", streamId="default")
    counts = {w: {stream: 12} for w in windows}
    avgs = {w: {stream: 1.5} for w in windows}
    emitted = {w: {"default": 1000} for w in windows}
    bolt = N.ExecutorSpecificStats(bolt=N.BoltStats(
        acked=counts, failed=counts, process_ms_avg=avgs, executed=counts,
        execute_ms_avg=avgs))
    return N.TopologyInfo(
        id="wc-1-1", name="wc", uptime_secs=5, status="ACTIVE", errors={}, executors=[
            N.ExecutorSummary(executor_info=N.ExecutorInfo(task_start=i, task_end=i),
                              component_id="count", host="localhost", port=0,
                              uptime_secs=100, stats=N.ExecutorStats(
                                  emitted=emitted, transferred=emitted, specific=bolt,
                                  rate=1.0))
            for i in range(executors)])


REAL = {
    "wordcount submit": lambda: (N.Nimbus.submitTopologyWithOpts_args,
                                 _submit_args("examples/wordcount.py")),
    "uploadChunk 300 KiB": lambda: (N.Nimbus.uploadChunk_args, N.Nimbus.uploadChunk_args(
        location="abc-123", chunk=bytes(307_200))),
    "getClusterInfo 50": lambda: (N.Nimbus.getClusterInfo_result,
                                  N.Nimbus.getClusterInfo_result(success=_cluster_summary(50))),
    "getClusterInfo 5000": lambda: (N.Nimbus.getClusterInfo_result,
                                    N.Nimbus.getClusterInfo_result(
                                        success=_cluster_summary(5000))),
    "getTopologyInfo 2000 executors": lambda: (
        N.Nimbus.getTopologyInfo_result,
        N.Nimbus.getTopologyInfo_result(success=_topology_info(2000))),
    "getTopologyConf 1 MB": lambda: (N.Nimbus.getTopologyConf_result,
                                     N.Nimbus.getTopologyConf_result(success=json.dumps(
                                         {f"key.{i}": "v" * 50 for i in range(15_000)}))),
}


@pytest.mark.parametrize("name", list(REAL))
def test_real_messages_fit_the_default_budget_with_room(name: str, monkeypatch) -> None:
    monkeypatch.chdir(Path(__file__).parents[4])
    cls, obj = REAL[name]()
    data = binary.encode_message("m", binary.REPLY, 1, obj)
    end = binary.read_message_header(data).end
    cost = spent(cls, data, end)
    # Room: every real message costs under two thirds of the default factor, so none
    # is near the limit even where the floor does not cover it.
    assert cost <= len(data) * DEFAULT_DECODED_SIZE_FACTOR * 2 / 3, cost / len(data)
    binary.decode_struct(cls, data, end)     # the default budget takes it


# --------------------------------------------------------------------------- dispatcher


def _echo_dispatcher(**kw: object) -> Dispatcher:
    demo = demo_thrift()
    return Dispatcher(default=(demo.Echo, EchoHandler()), **kw)  # type: ignore[arg-type]


def _reply_exception(reply: bytes | list[bytes] | None) -> TApplicationException:
    assert isinstance(reply, bytes)
    message = reply[4:]
    header = binary.read_message_header(message)
    assert header.type == binary.EXCEPTION
    exc, _ = binary.decode_struct(TApplicationException, message, header.end)
    return exc


def _echo_call(s: str, seqid: int = 1) -> bytes:
    demo = demo_thrift()
    return binary.encode_message("echo", binary.CALL, seqid, demo.Echo.echo_args(s=s))


def test_dispatcher_refuses_over_budget_with_protocol_error_naming_the_limit() -> None:
    # With factor 1, an ASCII string as long as the floor allows passes (ASCII costs
    # its bytes and a few more).
    dispatcher = _echo_dispatcher(decoded_size_factor=1)
    ok = _echo_call("x" * (DECODED_SIZE_FLOOR - 200))
    reply, status = dispatcher.dispatch(ok, "peer")
    assert status is Status.OK
    # Non-ASCII text is charged 4 bytes a character: 500,000 "é" (1 MB of UTF-8)
    # charge ~2 MB, over factor 1 times the 1 MB frame.
    big = _echo_call("\u00e9" * 500_000, seqid=7)
    reply, status = dispatcher.dispatch(big, "peer")
    assert status is Status.FAILED              # the connection carries on
    exc = _reply_exception(reply)
    assert exc.type == AppErrorCode.PROTOCOL_ERROR
    limit = decoded_size_limit(len(big), 1)
    assert f"more than {limit:,} bytes" in exc.message
    assert "decoded_size_factor 1 " in exc.message
    assert f"{len(big):,} bytes" in exc.message
    # The same dispatcher serves the next call.
    assert dispatcher.dispatch(_echo_call("again", seqid=8), "peer")[1] is Status.OK
    # With the default factor the same frame is fine.
    assert _echo_dispatcher().dispatch(big, "peer")[1] is Status.OK


def test_dispatcher_budget_on_a_submit_of_empty_structs() -> None:
    service = N.Nimbus

    class Handler:
        def submitTopology(self, *args: object) -> None:
            raise AssertionError("must not be called")

    dispatcher = Dispatcher(default=(service, Handler()))
    count = 1_000_000
    topology = N.StormTopology(spouts={}, state_spouts={}, bolts={"b": N.Bolt(
        bolt_object=N.ComponentObject(java_object=N.JavaObject(
            full_class_name="x", args_list=[N.JavaObjectArg()] * count)),
        common=N.ComponentCommon(inputs={}, streams={}))})
    frame = binary.encode_message("submitTopology", binary.CALL, 3, service.submitTopology_args(
        name="x", uploadedJarLocation="y", jsonConf="{}", topology=topology))
    assert len(frame) < 1_100_000
    tracemalloc.start()
    try:
        reply, status = dispatcher.dispatch(frame, "peer")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert status is Status.FAILED
    exc = _reply_exception(reply)
    assert exc.type == AppErrorCode.PROTOCOL_ERROR
    assert "decoded-size limit" in exc.message
    assert peak < 2 * DEFAULT_DECODED_SIZE_FACTOR * len(frame)     # not ~136 MB


def test_oneway_over_budget_sends_nothing() -> None:
    demo = demo_thrift()
    handler = EchoHandler()
    dispatcher = Dispatcher(default=(demo.Echo, handler), decoded_size_factor=1)
    frame = binary.encode_message("notify", binary.ONEWAY, 1,
                                  demo.Echo.notify_args(event="\u00e9" * 500_000))
    assert dispatcher.dispatch(frame, "peer") == (None, Status.FAILED)
    assert handler.events() == []


# --------------------------------------------------------------------------- client


def test_client_reply_decoding_charges_the_budget() -> None:
    service = N.Nimbus
    info = N.Nimbus.getTopologyInfo_result(success=_topology_info(300))
    payload = binary.encode_message("getTopologyInfo", binary.REPLY, 5, info)
    assert len(payload) > 64 * 1024            # past the floor for factor 16
    assert decode_reply(service, "getTopologyInfo", 5, payload).id == "wc-1-1"
    with pytest.raises(UnreadableReply) as caught:
        decode_reply(service, "getTopologyInfo", 5, payload, decoded_size_factor=1)
    text = str(caught.value)
    assert "decoded-size limit exceeded" in text
    assert "the client's limit: decoded_size_factor 1 " in text
    assert f"{len(payload):,} bytes" in text


def test_client_refuses_a_reply_of_a_million_empty_structs() -> None:
    count = 1_000_000
    topology = N.StormTopology(spouts={}, state_spouts={}, bolts={"b": N.Bolt(
        bolt_object=N.ComponentObject(java_object=N.JavaObject(
            full_class_name="x", args_list=[N.JavaObjectArg()] * count)),
        common=N.ComponentCommon(inputs={}, streams={}))})
    payload = binary.encode_message("getTopology", binary.REPLY, 9,
                                    N.Nimbus.getTopology_result(success=topology))
    with pytest.raises(UnreadableReply, match="decoded-size limit exceeded"):
        decode_reply(N.Nimbus, "getTopology", 9, payload)


def test_client_budget_applies_to_exception_replies_too() -> None:
    payload = binary.encode_message("x", binary.EXCEPTION, 1, TApplicationException(
        type=6, message="\u00e9" * 600_000))
    with pytest.raises(UnreadableReply, match="decoded-size limit exceeded"):
        decode_reply(N.Nimbus, "getNimbusConf", 1, payload, decoded_size_factor=1)
    with pytest.raises(TApplicationException):
        decode_reply(N.Nimbus, "getNimbusConf", 1, payload)


@pytest.mark.parametrize("value", [0, 0.9, float("nan"), float("inf"), True])
def test_dispatcher_refuses_a_factor_below_one(value: float) -> None:
    with pytest.raises(ValueError, match="decoded_size_factor must be a number of at least 1"):
        _echo_dispatcher(decoded_size_factor=value)


def test_the_server_option_reaches_the_dispatcher() -> None:
    import nimbus_thrift
    from nimbus_thrift.demo import EchoHandler, demo_thrift
    server = nimbus_thrift.make_server(demo_thrift().Echo, EchoHandler(), port=0,
                                       decoded_size_factor=3)
    assert server.dispatcher.decoded_size_factor == 3
