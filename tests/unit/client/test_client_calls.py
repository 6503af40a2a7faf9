"""NimbusClient's constants and the protocol steps of a call, byte by byte (binding
arguments, encoding the call, decoding the reply, the reply's length, the server's
refusal), over the Nimbus IDL. No sockets: tests/sockets/test_nimbus_client.py has
them."""

from __future__ import annotations

import inspect

import pytest
from thriftpy2.thrift import TApplicationException

from nimbus_thrift.client.client import DEFAULT_MAX_FRAME_SIZE, NimbusClient
from nimbus_thrift.client.defaults import DEFAULT_CHUNK_SIZE, READ_ONLY_METHODS
from nimbus_thrift.idl import NIMBUS_PORT as DEFAULT_PORT
from nimbus_thrift.rpc import options
from nimbus_thrift.rpc.codec.calls import (
    UnreadableReply,
    bind_args,
    check_reply_length,
    decode_reply,
    encode_call,
    parse_frame_refusal,
)
from nimbus_thrift.rpc.errors import FrameSizeError

from support.nimbus_replies import Nimbus, cluster_summary, nimbus, reply
from support.rawthrift import EXCEPTION, message


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
