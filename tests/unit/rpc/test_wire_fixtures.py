"""Golden wire fixtures (tests/wire/*.hex + *.json, format in tests/wire/README.md), each
fed to Dispatcher.dispatch as one frame's payload."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from thriftpy2.thrift import TApplicationException

from nimbus_thrift.rpc.codec import binary
from nimbus_thrift.demo import CalculatorHandler, EchoHandler, demo_thrift
from nimbus_thrift.rpc.dispatch import Dispatcher, Status

WIRE = Path(__file__).parents[2] / "wire"
FIXTURES = sorted(WIRE.glob("*.hex"))
OUTCOMES = {"reply", "exception", "close", "none"}


def read_hex(path: Path) -> bytes:
    text = re.sub(r"#[^\n]*", "", path.read_text())
    return bytes.fromhex("".join(text.split()))


def unframe(reply: bytes | list[bytes]) -> bytes:
    """The message of a reply frame (a large result comes as several buffers), after
    checking its length prefix."""
    frame = b"".join(reply) if isinstance(reply, list) else reply
    assert binary.FRAME_HEADER.unpack_from(frame)[0] == len(frame) - 4
    return frame[4:]


def make_dispatcher(demo: ModuleType) -> tuple[Dispatcher, EchoHandler]:
    echo = EchoHandler()
    dispatcher = Dispatcher(default=(demo.Echo, echo),
                            services={"Echo": (demo.Echo, echo),
                                      "Calculator": (demo.Calculator, CalculatorHandler())})
    return dispatcher, echo


def test_fixtures_come_in_pairs() -> None:
    hexes = {p.stem for p in WIRE.glob("*.hex")}
    jsons = {p.stem for p in WIRE.glob("*.json")}
    assert hexes == jsons
    assert len(hexes) >= 12


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_wire_fixture(path: Path) -> None:
    demo = demo_thrift()
    expected: dict[str, Any] = json.loads(path.with_suffix(".json").read_text())
    outcome = expected["outcome"]
    assert outcome in OUTCOMES, f"{path.name}: unknown outcome {outcome!r}"
    payload = read_hex(path)
    dispatcher, echo = make_dispatcher(demo)

    reply, status = dispatcher.dispatch(payload, "test-peer")

    if "status" in expected:
        assert status is Status[expected["status"]]
    if "events" in expected:
        assert echo.events() == expected["events"]

    if outcome in ("close", "none"):
        assert reply is None
        if outcome == "close":
            assert status is Status.CLOSE
        else:
            assert status is not Status.CLOSE
        return

    assert reply is not None
    reply = unframe(reply)
    header = binary.read_message_header(reply, strict_read=True)  # we write strict headers
    assert header.name == expected["name"]
    assert header.seqid == expected["seqid"]

    if outcome == "exception":
        assert header.type == binary.EXCEPTION
        exc, end = binary.decode_struct(TApplicationException, reply, header.end)
        assert end == len(reply)
        assert exc.type == expected["code"]
        assert exc.message  # a sentence for the client, never empty
        if "message_contains" in expected:
            assert expected["message_contains"] in exc.message
        if "message_excludes" in expected:
            assert expected["message_excludes"] not in exc.message
        return

    assert header.type == binary.REPLY
    service = getattr(demo, expected.get("service", "Echo"))
    result_cls = getattr(service, header.name + "_result")
    result, end = binary.decode_struct(result_cls, reply, header.end)
    assert end == len(reply)
    field = expected["field"]
    set_fields = {k for k, v in result.__dict__.items() if v is not None}
    assert set_fields == ({field} if field else set())
    if "value" in expected:
        assert getattr(result, field) == expected["value"]
    if "value_hex" in expected:
        assert getattr(result, field) == bytes.fromhex(expected["value_hex"])
    if field == "err":
        assert isinstance(result.err, demo.DemoError)
        assert (result.err.code, result.err.message) == (42, "declared failure")


def test_strict_read_dispatcher_closes_on_old_header() -> None:
    demo = demo_thrift()
    dispatcher = Dispatcher(default=(demo.Echo, EchoHandler()), strict_read=True)
    payload = read_hex(WIRE / "echo_old_header.hex")
    assert dispatcher.dispatch(payload, "test-peer") == (None, Status.CLOSE)
    # The same call with a strict header is fine.
    reply, status = dispatcher.dispatch(read_hex(WIRE / "echo_strict.hex"), "test-peer")
    assert status is Status.OK and reply is not None


@pytest.mark.parametrize("method, value", [
    ("echo", "x" * 70_000),
    ("echo", "\u00e9" * 40_000),        # 80 000 bytes of UTF-8
    ("echo_binary", bytes(range(256)) * 300),
    ("echo", "small"),
])
def test_reply_bytes_equal_the_encoder_for_any_size(method: str, value: str | bytes) -> None:
    # Large string/binary results may come back as a list of buffers; on the wire they
    # must be exactly what thriftpy2's encoder writes for the same result.
    demo = demo_thrift()
    dispatcher, _ = make_dispatcher(demo)
    args = getattr(demo.Echo, method + "_args")(value)
    request = binary.encode_message(method, binary.CALL, 77, args)
    reply, status = dispatcher.dispatch(request, "test-peer")
    assert status is Status.OK
    assert reply is not None
    result = getattr(demo.Echo, method + "_result")(success=value)
    assert unframe(reply) == binary.encode_message(method, binary.REPLY, 77, result)
