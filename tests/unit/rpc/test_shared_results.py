"""Fakes tier: a shared result (rpc/shared.py) is answered with exactly the bytes an
unshared equal value gets, in every form a client may speak, with its body encoded
once per protocol and kept as one buffer for every caller. No sockets."""

from __future__ import annotations

import gc
import struct
from types import ModuleType

import pytest
from thriftpy2.thrift import TApplicationException

from nimbus_thrift.rpc import shared
from nimbus_thrift.rpc.codec import binary, compact, header, replies
from nimbus_thrift.rpc.codec.forms import (FRAMED_COMPACT, HEADER, UNFRAMED_BINARY,
                                           UNFRAMED_COMPACT, Form, Message)
from nimbus_thrift.rpc.dispatch import Dispatcher, Status
from nimbus_thrift.rpc.errors import AppErrorCode

from support.shared_service import BoardHandler, board_thrift


_BOARD = board_thrift()


@pytest.fixture(scope="module")
def board() -> ModuleType:
    return _BOARD


def serve(board: ModuleType, names: list[str] | None = None
          ) -> tuple[Dispatcher, BoardHandler]:
    handler = BoardHandler(board, ["alpha", "beta", "gamma"] if names is None else names)
    return Dispatcher((board.Board, handler)), handler   # type: ignore[arg-type]


def request(method: str, protocol: str, seqid: int) -> bytes:
    codec = compact if protocol == "compact" else binary
    return codec.encode_message(method, binary.CALL, seqid,
                                getattr(_BOARD.Board, method + "_args")())


def joined(reply: object) -> bytes:
    return b"".join(reply) if isinstance(reply, list) else bytes(reply)  # type: ignore


def framed_binary(method: str, seqid: int) -> bytes:
    return request(method, "binary", seqid)      # a framed binary frame's payload


FORMS: list[tuple[Form | None, str]] = [
    (None, "binary"), (FRAMED_COMPACT, "compact"), (UNFRAMED_BINARY, "binary"),
    (UNFRAMED_COMPACT, "compact")]


def ask(disp: Dispatcher, form: Form | None, protocol: str, method: str, seqid: int
        ) -> object:
    if form is None:                       # framed binary: the frame's bytes as they are
        reply, status = disp.dispatch(framed_binary(method, seqid), "peer")
    else:
        reply, status = disp.dispatch(Message(request(method, protocol, seqid), form),
                                      "peer")
    assert status is Status.OK
    return reply


@pytest.mark.parametrize("form, protocol", FORMS)
def test_a_shared_reply_is_byte_for_byte_the_unshared_one(board, form, protocol) -> None:
    disp, _ = serve(board)
    got = ask(disp, form, protocol, "shared", 77)
    unshared = ask(disp, form, protocol, "fresh", 77)
    codec = compact if protocol == "compact" else binary
    result = board.Board.shared_result(success=board.Summary(names=["alpha", "beta", "gamma"],
                                                             count=3))
    message = codec.encode_message("shared", binary.REPLY, 77, result)
    expected = message if form is not None and form.transport == "unframed" \
        else struct.pack(">I", len(message)) + message
    assert joined(got) == expected
    assert isinstance(got, list) and type(got[1]) is shared.SharedBuffer
    assert isinstance(unshared, bytes)           # an unmarked value: encoded per call


@pytest.mark.parametrize("protocol", ["binary", "compact"])
def test_a_theader_reply_wraps_the_shared_message_and_echoes_the_request(board, protocol
                                                                          ) -> None:
    disp, _ = serve(board)
    proto_id = header.PROTOCOL_COMPACT if protocol == "compact" else header.PROTOCOL_BINARY
    frame = header.encode(request("shared", protocol, 9), proto_id, 0, 4242)
    reply, status = disp.dispatch(Message(frame[4:], HEADER), "peer")
    assert status is Status.OK
    parsed, _ = header.parse(joined(reply)[4:], 1 << 20)
    assert parsed.seqid == 4242 and parsed.protocol_id == proto_id
    codec = compact if protocol == "compact" else binary
    head = codec.read_message_header(parsed.payload)
    body, end = codec.decode_struct(board.Board.shared_result, parsed.payload, head.end)
    assert (head.name, head.seqid, end) == ("shared", 9, len(parsed.payload))
    assert body.success.names == ["alpha", "beta", "gamma"]


def test_the_body_is_encoded_once_per_protocol_and_kept_for_every_caller(board) -> None:
    disp, handler = serve(board)
    first = ask(disp, None, "binary", "shared", 1)
    second = ask(disp, None, "binary", "shared", 2)
    third = ask(disp, FRAMED_COMPACT, "compact", "shared", 3)
    fourth = ask(disp, UNFRAMED_COMPACT, "compact", "shared", 4)
    assert first[1] is second[1]                           # type: ignore[index]
    assert third[1] is fourth[1] and third[1] is not first[1]   # type: ignore[index]
    # Each caller's own header: its seqid, in the first buffer.
    assert binary.read_message_header(first[0][4:]).seqid == 1     # type: ignore[index]
    assert binary.read_message_header(second[0][4:]).seqid == 2    # type: ignore[index]
    # A new value is a new body.
    handler.replace(["delta"])
    fifth = ask(disp, None, "binary", "shared", 5)
    assert fifth[1] is not first[1]                        # type: ignore[index]
    payload = joined(fifth)[4:]
    head = binary.read_message_header(payload)
    body, _ = binary.decode_struct(board.Board.shared_result, payload, head.end)
    assert body.success.names == ["delta"] and body.success.count == 1


def test_a_mark_goes_with_its_value(board) -> None:
    value = shared.share(board.Summary(names=["x"], count=1))
    key = id(value)
    assert shared.mark_of(value) is not None and key in shared.MARKED
    del value
    gc.collect()
    assert key not in shared.MARKED
    # An equal value never marked is not shared.
    assert shared.mark_of(board.Summary(names=["x"], count=1)) is None


def test_a_shared_value_the_idl_refuses_is_an_internal_error(board) -> None:
    disp, handler = serve(board)
    handler.value = shared.share(board.Summary(names=[1, 2], count="three"))
    reply, status = disp.dispatch(framed_binary("shared", 5), "peer")
    assert status is Status.FAILED
    payload = joined(reply)[4:]
    head = binary.read_message_header(payload)
    exc, _ = binary.decode_struct(TApplicationException, payload, head.end)
    assert head.type == binary.EXCEPTION and exc.type == AppErrorCode.INTERNAL_ERROR
    assert "does not match the IDL" in exc.message


def test_held_bytes_split_into_own_and_shared() -> None:
    body = shared.SharedBuffer(b"s" * 1000)
    own = b"h" * 30
    assert shared.split_held([own, body]) == (30, [body])
    # After a partial send: views into both still keep the whole buffers alive.
    rest = [memoryview(own)[10:], memoryview(body)[500:]]
    size, bodies = shared.split_held(rest)
    assert size == 30 and bodies[0] is body
    assert shared.split_held([memoryview(body)[999:]]) == (0, [body])


@pytest.mark.parametrize("protocol", ["binary", "compact"])
@pytest.mark.parametrize("name, seqid", [("shared", 0), ("sérvice:shared", -5),
                                         ("x" * 300, (1 << 31) - 1), ("", -(1 << 31))])
def test_head_and_body_are_the_whole_message(board, protocol, name, seqid) -> None:
    codec = compact if protocol == "compact" else binary
    result = board.Board.shared_result(success=board.Summary(names=["a"], count=1))
    assert replies.head(protocol, name, seqid) + replies.result_body(protocol, result) \
        == codec.encode_message(name, binary.REPLY, seqid, result)
    with pytest.raises(ValueError):
        replies.head(protocol, name, 1 << 31)


# --- a shared value's list of structs, item by item (the ClusterSummary's topologies)

def cluster(idl: ModuleType, topologies: list[object]) -> object:
    return idl.ClusterSummary(
        supervisors=[idl.SupervisorSummary(host="h", uptime_secs=3, num_workers=2,
                                           num_used_workers=1, supervisor_id="s")],
        nimbus_uptime_secs=5, topologies=topologies,
        nimbuses=[idl.NimbusSummary(host="h", port=6627, uptime_secs=4, isLeader=True,
                                    version="2")])


def topology(idl: ModuleType, i: int, status: str = "ACTIVE") -> object:
    return idl.TopologySummary(id=f"wc-{i}-1", name=f"wc-{i}", num_tasks=2, num_executors=2,
                               num_workers=1, uptime_secs=i, status=status, owner="ann")


@pytest.fixture(scope="module")
def storm() -> ModuleType:
    from nimbus_thrift.nimbus.daemon import nimbus_idl
    return nimbus_idl()


@pytest.mark.parametrize("count", [0, 1, 300])
@pytest.mark.parametrize("protocol", ["binary", "compact"])
def test_a_value_shared_item_by_item_encodes_as_a_whole_one(storm, count, protocol) -> None:
    items = [topology(storm, i) for i in range(count)]
    value = shared.share(cluster(storm, items), elements="topologies")
    result_cls = storm.Nimbus.getClusterInfo_result
    whole = replies.result_body(protocol, result_cls(success=value))
    assert b"".join(shared.body(shared.mark_of(value), result_cls, protocol)) == whole


def test_the_next_value_reuses_the_chunks_and_items_it_kept(storm) -> None:
    result_cls = storm.Nimbus.getClusterInfo_result
    size = shared.CHUNK_ITEMS
    items = [topology(storm, i) for i in range(2 * size + 10)]
    first = shared.share(cluster(storm, items), elements="topologies")
    body1 = shared.body(shared.mark_of(first), result_cls, "binary")
    assert len(body1) == 2 + 3                    # around the list, and three chunks
    assert all(type(chunk) is shared.SharedBuffer for chunk in body1[1:-1])
    kept = {i: shared._ELEMENTS[id(item)][1] for i, item in enumerate(items)}
    # One topology changed: a new summary for it, every other object reused.
    items2 = list(items)
    items2[size + 7] = topology(storm, size + 7, status="INACTIVE")
    second = shared.share(cluster(storm, items2), elements="topologies")
    body2 = shared.body(shared.mark_of(second), result_cls, "binary")
    assert b"".join(body2) == replies.result_body("binary", result_cls(success=second))
    # Only the changed item's chunk is new, made of the kept encodings and one new.
    assert body2[1] is body1[1] and body2[3] is body1[3] and body2[2] is not body1[2]
    assert all(shared._ELEMENTS[id(items2[i])][1] is kept[i] for i in kept if i != size + 7)
    # An item no value or chunk holds any more is forgotten with it.
    gone = id(items[size + 7])
    del first, items, body1
    third = shared.share(cluster(storm, items2), elements="topologies")
    shared.body(shared.mark_of(third), result_cls, "binary")     # the chunks of now
    gc.collect()
    assert gone not in shared._ELEMENTS
