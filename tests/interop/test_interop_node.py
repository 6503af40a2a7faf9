"""Interoperability: Node.js with npm ``thrift`` (framed transport, binary protocol).

tests/interop/node/client.js runs a fixed script of calls against the demo server and prints
one JSON object; this test checks every value in it. Node's client keeps many calls in flight
on one connection, so the server sees several frames pipelined on one socket.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from typing import Any

import pytest

from interop import (
    GEN_NODEJS, NODE_CLIENT, NODE_DIR, SETUP_HINT, require_file, require_generated,
)

pytestmark = pytest.mark.interop

# client.js gives up by itself after 20 s and says where; this only catches a wedged node.
NODE_TIMEOUT_S = 60

# The same literal as UNICODE in client.js.
UNICODE = "h\u00e9llo w\u00f6rld \u65e5\u672c\u8a9e \u0416 \U0001f680"


@pytest.fixture(scope="module")
def node() -> str:
    path = shutil.which("node")
    if path is None:
        pytest.fail(f"node is not on PATH: {SETUP_HINT}", pytrace=False)
    require_file(NODE_DIR / "node_modules" / "thrift" / "package.json", "npm thrift")
    require_generated(GEN_NODEJS / "Echo.js", "Node generated code")
    return path


@pytest.fixture
def node_results(node: str, demo_server) -> Callable[[], dict[str, Any]]:
    """Run client.js against the demo server; the returned function checks the run and gives
    its parsed JSON (checked inside the test, so a failed run is a FAILED test, not an ERROR)."""
    host, port = demo_server.address
    proc = subprocess.run(
        [node, str(NODE_CLIENT), host, str(port)],
        capture_output=True, text=True, timeout=NODE_TIMEOUT_S, check=False,
    )

    def parsed() -> dict[str, Any]:
        detail = f"exit {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
        assert proc.returncode == 0, f"the Node client failed: {detail}"
        lines = proc.stdout.strip().splitlines()
        assert len(lines) == 1, f"expected one JSON line: {detail}"
        results: dict[str, Any] = json.loads(lines[0])
        return results

    return parsed


def test_node_client(node_results: Callable[[], dict[str, Any]]) -> None:
    r = node_results()
    assert r["echo"] == "hello from node"
    assert r["unicode"] == UNICODE
    assert r["empty"] == ""
    assert r["large_length"] == 256 * 1024
    assert r["binary_is_buffer"] is True
    assert bytes.fromhex(r["binary_hex"]) == bytes(range(256))
    assert r["ping"] is None
    assert r["events"] == ["node-1", "node-2"]
    assert r["declared"] == {"message": "declared failure", "code": 42}
    assert r["internal"]["type"] == 6          # TApplicationException.INTERNAL_ERROR
    assert r["after_internal"] == "still alive"


def test_node_pipelined_calls_on_one_connection(
    node_results: Callable[[], dict[str, Any]],
) -> None:
    r = node_results()
    p = r["pipelined"]
    # Each reply reached the call with its seqid (npm thrift matches replies by seqid).
    assert p["sleeps"] == [300, 100]
    assert p["echoes"] == [f"pipelined-{i}" for i in range(20)]
    assert sorted(p["completion_order"]) == sorted(
        ["sleep300", "sleep100"] + [f"echo{i}" for i in range(20)]
    )
    assert r["after_pipelined"] == "after pipelined"


def test_node_multiplexed(node_results: Callable[[], dict[str, Any]]) -> None:
    r = node_results()
    assert r["add"] == 42
    assert r["add_negative"] == -4
    assert r["add_int64_max_hex"] == "7fffffffffffffff"
    assert r["mux_echo"] == "multiplexed " + UNICODE
    assert r["mux_concurrent"] == [3, "m1", 7, "m2"]


def test_node_unknown_method_on_multiplexed_service(
    node_results: Callable[[], dict[str, Any]],
) -> None:
    # "Echo:add": Echo has no `add`. npm thrift finds the pending call by the reply's method
    # name, so the reply must say "add" (as Apache's TMultiplexedProcessor does), not "Echo:add".
    assert node_results()["mux_unknown_method"] == {"type": 1, "name": "TApplicationException"}
