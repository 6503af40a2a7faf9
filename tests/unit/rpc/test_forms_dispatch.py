"""Fakes tier: the dispatcher serves every form (forms.py) and answers in the client's
own: framed and unframed, binary and compact, THeader with its sequence number, flags,
protocol and ZLIB echoed and its info headers given to the handler; refused forms and
transforms; the decoded-size rules on inflated payloads. No sockets."""

from __future__ import annotations

import struct
import zlib
from types import ModuleType

import pytest
from thriftpy2.thrift import TApplicationException

from nimbus_thrift import current_request
from nimbus_thrift.demo import EchoHandler
from nimbus_thrift.rpc.codec import binary, compact, header
from nimbus_thrift.rpc.dispatch import Dispatcher, Status
from nimbus_thrift.rpc.errors import AppErrorCode, FrameSizeError
from nimbus_thrift.rpc.codec.forms import (FRAMED_COMPACT, HEADER, UNFRAMED_BINARY,
                                     UNFRAMED_COMPACT, Message)


class Recording(EchoHandler):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[object] = []

    def echo(self, s: str) -> str:
        self.seen.append(current_request())
        return s


def dispatcher(demo: ModuleType, **kw: object) -> tuple[Dispatcher, Recording]:
    handler = Recording()
    return Dispatcher((demo.Echo, handler), **kw), handler   # type: ignore[arg-type]


def call(demo: ModuleType, protocol: str, s: str = "hi", seqid: int = 11) -> bytes:
    codec = compact if protocol == "compact" else binary
    return codec.encode_message("echo", 1, seqid, demo.Echo.echo_args(s=s))


def read_reply(demo: ModuleType, protocol: str, data: bytes) -> tuple[str, int, int, object]:
    codec = compact if protocol == "compact" else binary
    head = codec.read_message_header(data)
    cls = TApplicationException if head.type == binary.EXCEPTION else demo.Echo.echo_result
    body, end = codec.decode_struct(cls, data, head.end)
    assert end == len(data)
    return head.name, head.type, head.seqid, body


@pytest.mark.parametrize("form, protocol", [(UNFRAMED_BINARY, "binary"),
                                            (UNFRAMED_COMPACT, "compact")])
def test_unframed_reply_is_unframed(demo: ModuleType, form, protocol: str) -> None:
    disp, _ = dispatcher(demo)
    reply, status = disp.dispatch(Message(call(demo, protocol), form), "peer")
    assert status is Status.OK and isinstance(reply, bytes)
    name, mtype, seqid, body = read_reply(demo, protocol, reply)
    assert (name, mtype, seqid, body.success) == ("echo", binary.REPLY, 11, "hi")


def test_framed_compact_reply_is_framed_compact(demo: ModuleType) -> None:
    disp, _ = dispatcher(demo)
    big = "\u65e5" * 100_000                       # large results too (no scatter path)
    reply, _ = disp.dispatch(Message(call(demo, "compact", big), FRAMED_COMPACT), "peer")
    assert isinstance(reply, bytes)
    assert struct.unpack(">I", reply[:4])[0] == len(reply) - 4
    assert read_reply(demo, "compact", reply[4:])[3].success == big


@pytest.mark.parametrize("protocol_id, protocol", [(0, "binary"), (2, "compact")])
@pytest.mark.parametrize("transforms", [(), (header.TRANSFORM_ZLIB,)])
def test_theader_reply_echoes_the_request(demo: ModuleType, protocol_id: int, protocol: str,
                                          transforms: tuple[int, ...]) -> None:
    disp, handler = dispatcher(demo)
    frame = header.encode(call(demo, protocol), protocol_id, 0x0001, 77, transforms,
                          {b"user": b"alice", b"trace-id": b"\x01\x02"})
    reply, status = disp.dispatch(Message(frame[4:], HEADER), "peer", "bob")
    assert status is Status.OK and isinstance(reply, bytes)
    parsed, _ = header.parse(reply[4:], 1 << 20)
    assert (parsed.flags, parsed.seqid, parsed.protocol_id, parsed.transforms) == \
        (0x0001, 77, protocol_id, transforms)
    assert parsed.info == {}                               # info headers are not echoed
    assert read_reply(demo, protocol, parsed.payload)[3].success == "hi"
    info = handler.seen[-1]
    assert info.headers == {b"user": b"alice", b"trace-id": b"\x01\x02"}
    assert (info.peer, info.method, info.seqid, info.principal) == ("peer", "echo", 11, "bob")


def test_framed_binary_requests_carry_no_headers(demo: ModuleType) -> None:
    disp, handler = dispatcher(demo)
    disp.dispatch(call(demo, "binary"), "peer")
    assert handler.seen[-1].headers == {}


@pytest.mark.parametrize("transform, code", [(2, AppErrorCode.INVALID_TRANSFORM),
                                             (3, AppErrorCode.INVALID_TRANSFORM)])
def test_unsupported_transform_gets_a_clear_application_exception(demo: ModuleType,
                                                                  transform: int,
                                                                  code: int) -> None:
    disp, handler = dispatcher(demo)
    frame = header.encode(call(demo, "binary"), 0, 0, 5)[4:]
    frame = frame[:8] + struct.pack(">H", 1) + bytes([0, 1, transform, 0]) + call(demo, "binary")
    reply, status = disp.dispatch(Message(frame, HEADER), "peer")
    assert status is Status.FAILED and isinstance(reply, bytes)
    parsed, _ = header.parse(reply[4:], 1 << 20)
    assert parsed.seqid == 5 and parsed.transforms == ()
    exc = read_reply(demo, "binary", parsed.payload)[3]
    assert exc.type == code
    assert ("SNAPPY" if transform == 3 else "HMAC") in exc.message
    assert handler.seen == []


def test_zlib_bomb_is_refused_within_the_limit(demo: ModuleType) -> None:
    disp, handler = dispatcher(demo, max_message_size=1 << 20)
    payload = call(demo, "binary", "q" * (4 << 20))           # 4 MiB of one letter
    frame = header.encode(payload, 0, 0, 3, (header.TRANSFORM_ZLIB,))[4:]
    assert len(frame) < 10_000
    reply, status = disp.dispatch(Message(frame, HEADER), "peer")
    assert status is Status.FAILED and isinstance(reply, bytes)
    exc = read_reply(demo, "binary", header.parse(reply[4:], 1 << 20)[0].payload)[3]
    assert exc.type == AppErrorCode.PROTOCOL_ERROR and "inflates to more than" in exc.message
    assert handler.seen == []


def test_malformed_theader_closes(demo: ModuleType, logs: list[dict[str, object]]) -> None:
    disp, _ = dispatcher(demo)
    reply, status = disp.dispatch(Message(b"\x0f\xff\x00\x00\x00\x00\x00\x01\x00\x09",
                                          HEADER), "peer")
    assert (reply, status) == (None, Status.CLOSE)
    assert [e for e in logs if e["event"] == "bad_theader"]


def test_scan_refusal_is_answered_in_the_form(demo: ModuleType) -> None:
    disp, _ = dispatcher(demo)
    msg = Message(b"", UNFRAMED_COMPACT, FrameSizeError(2000, 1000, "the max frame size"),
                  "echo", 8)
    reply, status = disp.dispatch(msg, "peer")
    assert status is Status.FAILED and isinstance(reply, bytes)
    name, mtype, seqid, exc = read_reply(demo, "compact", reply)
    assert (name, mtype, seqid, exc.type) == ("echo", binary.EXCEPTION, 8,
                                             AppErrorCode.PROTOCOL_ERROR)


@pytest.mark.parametrize("options, message", [
    ({"transports": ("framed",)}, lambda d: Message(call(d, "binary"), UNFRAMED_BINARY)),
    ({"protocols": ("binary",)}, lambda d: Message(call(d, "compact"), FRAMED_COMPACT)),
    ({"transports": ("unframed", "header")}, lambda d: call(d, "binary")),
    ({"protocols": ("compact",)}, lambda d: call(d, "binary")),
    ({"protocols": ("binary",)},
     lambda d: Message(header.encode(call(d, "compact"), 2, 0, 0)[4:], HEADER)),
    ({"transports": ("framed", "unframed")},
     lambda d: Message(header.encode(call(d, "binary"), 0, 0, 0)[4:], HEADER)),
])
def test_forms_not_accepted_are_closed_with_a_log_line(demo: ModuleType, logs, options,
                                                       message) -> None:
    disp, handler = dispatcher(demo, **options)
    assert disp.dispatch(message(demo), "peer") == (None, Status.CLOSE)
    assert handler.seen == []
    lines = [e for e in logs if e["event"] == "client_form_not_accepted"]
    assert len(lines) == 1 and lines[0]["peer"] == "peer"


def test_accepted_forms_still_served_when_restricted(demo: ModuleType) -> None:
    disp, _ = dispatcher(demo, transports=("unframed",), protocols=("compact",))
    reply, status = disp.dispatch(Message(call(demo, "compact"), UNFRAMED_COMPACT), "p")
    assert status is Status.OK


def test_overload_reply_in_the_form(demo: ModuleType) -> None:
    disp, _ = dispatcher(demo)
    reply = disp.overload_reply(Message(call(demo, "compact"), UNFRAMED_COMPACT), "busy")
    assert reply is not None
    name, mtype, seqid, exc = read_reply(demo, "compact", reply)
    assert (name, seqid, exc.type, exc.message) == ("echo", 11, AppErrorCode.INTERNAL_ERROR,
                                                    "busy")
    frame = header.encode(call(demo, "binary", seqid=4), 0, 0, 4, (header.TRANSFORM_ZLIB,))
    reply = disp.overload_reply(Message(frame[4:], HEADER), "busy")
    assert reply is not None and header.parse(reply[4:], 1 << 20)[0].transforms == (1,)


def test_compact_args_decoded_with_the_budget(demo: ModuleType) -> None:
    disp, _ = dispatcher(demo, decoded_size_factor=1)
    # A 2 MiB string: its frame's budget (2 MiB x 1) cannot hold its decoded str object.
    msg = Message(call(demo, "compact", "w" * (2 << 20)), UNFRAMED_COMPACT)
    reply, status = disp.dispatch(msg, "peer")
    assert status is Status.FAILED and isinstance(reply, bytes)
    assert read_reply(demo, "compact", reply)[3].type == AppErrorCode.PROTOCOL_ERROR


def test_zlib_round_trip_matches_zlib() -> None:
    assert header.inflate(zlib.compress(b"abc" * 10), 30) == b"abc" * 10


def test_request_context_without_headers_still_reads() -> None:
    from nimbus_thrift.rpc.context import REQUEST
    token = REQUEST.set(("p", "m", 1, None))       # what older callers set: 4 items
    try:
        info = current_request()
        assert info is not None and info.headers == {} and info.principal is None
    finally:
        REQUEST.reset(token)


def test_other_forms_always_go_to_the_worker_pool(demo: ModuleType) -> None:
    """inline.py keys framed binary calls only: a Message never runs in the selector."""
    from nimbus_thrift.rpc.inline import method_key
    assert method_key(call(demo, "binary")) == b"echo"
    assert method_key(Message(call(demo, "binary"), UNFRAMED_BINARY)) is None
    assert method_key(Message(call(demo, "compact"), UNFRAMED_COMPACT)) is None
    frame = header.encode(call(demo, "binary"), 0, 0, 0)[4:]
    assert method_key(Message(frame, HEADER)) is None
