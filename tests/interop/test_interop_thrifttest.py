"""Interoperability, issue 17: Apache Thrift's own cross-language test clients against ONE
server of ours serving Apache's ThriftTest service, with no options restricting the forms it
accepts (every client below talks to the same port).

* ``test/py/TestClient.py`` (Apache's Python client and its unittest suite, 22 tests per
  run) over framed and buffered transport with the binary and compact protocols, THeader,
  the C-accelerated protocols, and multiplexed binary and header;
* ``lib/nodejs/test/client.js`` (Apache's Node client and its tape suite, on npm thrift
  0.22.0) over framed and buffered transport with the binary, compact and header protocols,
  in both of its styles (promises and callbacks);
* thriftpy2's ``make_client`` with its defaults (buffered binary) calling every method.

Apache's files come from Apache Thrift 0.17.0's source release as Debian's mirror serves it,
installed unmodified by scripts/install_interop.sh (see tests/interop/thrifttest.py): no PyPI
or npm package carries them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from types import ModuleType

import pytest
from thriftpy2.rpc import make_client
from thriftpy2.thrift import TApplicationException

import nimbus_thrift
from interop.thrifttest import (NODE_CLIENT, NODE_MODULES, PY_CLIENT, PY_GEN,
                                require_installed, thrifttest_thrift)
from interop.thrifttest_handler import SecondServiceHandler, ThriftTestHandler

pytestmark = pytest.mark.interop

CLIENT_TIMEOUT_S = 120
CLIENT_TIMEOUT_MS = 10_000
#: How long a test waits for the server to finish the oneway calls a client sent.
ONEWAY_WAIT_S = 30.0
#: Tests in one run of Apache 0.17's TestClient.py (its unittest suite).
PY_SUITE_TESTS = 22
#: Assertions in one run of Apache 0.17's client.js (its tape suite), per style.
NODE_SUITE_ASSERTS = {"promise": 37, "callback": 78}


@pytest.fixture(scope="module")
def tt() -> ModuleType:
    require_installed()
    return thrifttest_thrift()


@pytest.fixture(scope="module")
def handler(tt: ModuleType) -> ThriftTestHandler:
    return ThriftTestHandler(tt)


@pytest.fixture(scope="module")
def server(tt: ModuleType, handler: ThriftTestHandler) -> Iterator[tuple[str, int]]:
    """ThriftTest unprefixed, and ThriftTest and SecondService multiplexed (as Apache's
    TestServer registers them), on 127.0.0.1:<free port>; all forms accepted (defaults).
    Yields the (host, port) it listens on."""
    srv = nimbus_thrift.make_server(
        tt.ThriftTest, handler, host="127.0.0.1", port=0,
        services={"ThriftTest": (tt.ThriftTest, handler),
                  "SecondService": (tt.SecondService, SecondServiceHandler())})
    address = srv.start()
    try:
        yield address
    finally:
        srv.stop(grace=5.0)


def _detail(proc: subprocess.CompletedProcess[str]) -> str:
    return f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"


# (--transport, --protocol) of TestClient.py. "header" is THeaderProtocol over the buffered
# socket, as Apache's cross-test runs it (THeader does its own framing); "accel"/"accelc" are
# the C-accelerated binary/compact; "multi"/"multih" wrap binary/header in
# TMultiplexedProtocol (service "ThriftTest") and also call SecondService.
PY_FORMS = [
    ("framed", "binary"),
    ("framed", "compact"),
    ("buffered", "binary"),
    ("buffered", "compact"),
    ("buffered", "header"),
    ("framed", "accel"),
    ("buffered", "accelc"),
    ("framed", "multi"),
    ("buffered", "multih"),
]


@pytest.mark.parametrize(("transport", "protocol"), PY_FORMS,
                         ids=[f"{t}-{p}" for t, p in PY_FORMS])
def test_apache_python_test_client(server: tuple[str, int], handler: ThriftTestHandler,
                                   transport: str, protocol: str) -> None:
    host, port = server
    oneways_before = len(handler.oneways())
    proc = subprocess.run(
        [sys.executable, str(PY_CLIENT), "--genpydir", str(PY_GEN), "--host", host,
         "--port", str(port), "--transport", transport, "--protocol", protocol],
        capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S, check=False)
    assert proc.returncode == 0, _detail(proc)
    ran = re.search(r"^Ran (\d+) tests? in ", proc.stderr, re.MULTILINE)
    assert ran is not None, _detail(proc)
    assert int(ran.group(1)) == PY_SUITE_TESTS, _detail(proc)
    assert proc.stderr.rstrip().endswith("OK"), _detail(proc)
    # testOneway and testOnewayThenNormal each send testOneway(1), which answers nothing:
    # the server must still have run both.
    seen = handler.wait_oneways(oneways_before + 2, ONEWAY_WAIT_S)
    assert seen[oneways_before:] == [1, 1]


@pytest.fixture(scope="module")
def node() -> str:
    path = shutil.which("node")
    if path is None:
        pytest.fail("node is not on PATH: run scripts/install_interop.sh", pytrace=False)
    return path


@pytest.mark.parametrize("style", ["promise", "callback"])
@pytest.mark.parametrize("protocol", ["binary", "compact", "header"])
@pytest.mark.parametrize("transport", ["framed", "buffered"])
def test_apache_node_test_client(server: tuple[str, int], handler: ThriftTestHandler,
                                 node: str, transport: str, protocol: str,
                                 style: str) -> None:
    host, port = server
    oneways_before = len(handler.oneways())
    args = [node, str(NODE_CLIENT), "--host", host, "--port", str(port),
            "--transport", transport, "--protocol", protocol]
    if style == "callback":
        args.append("--callback")
    # The client's `require("thrift")`, commander and tape come from the pinned npm tree.
    env = {**os.environ, "NODE_PATH": str(NODE_MODULES)}
    proc = subprocess.run(args, cwd=NODE_CLIENT.parent, env=env, capture_output=True,
                          text=True, timeout=CLIENT_TIMEOUT_S, check=False)
    assert proc.returncode == 0, _detail(proc)
    assert "Server successfully tested!" in proc.stdout, _detail(proc)
    assert not re.search(r"^not ok", proc.stdout, re.MULTILINE), _detail(proc)
    counts = dict(re.findall(r"^# (tests|pass|fail)\s+(\d+)$", proc.stdout, re.MULTILINE))
    assert counts.get("fail") is None, _detail(proc)
    assert counts.get("tests") == counts.get("pass") == str(NODE_SUITE_ASSERTS[style]), \
        _detail(proc)
    # Both styles send one testOneway(0).
    seen = handler.wait_oneways(oneways_before + 1, ONEWAY_WAIT_S)
    assert seen[oneways_before:] == [0]


def test_thriftpy2_make_client_defaults(server: tuple[str, int],
                                       handler: ThriftTestHandler, tt: ModuleType) -> None:
    """thriftpy2's make_client as its users write it (buffered transport, binary protocol),
    every ThriftTest method."""
    host, port = server
    client = make_client(tt.ThriftTest, host, port, timeout=CLIENT_TIMEOUT_MS)
    try:
        assert client.testVoid() is None
        assert client.testString("h\u00e9llo \u65e5\u672c") == "h\u00e9llo \u65e5\u672c"
        assert client.testBool(True) is True and client.testBool(False) is False
        assert client.testByte(-128) == -128
        assert client.testI32(-(2 ** 31)) == -(2 ** 31)
        assert client.testI64(2 ** 63 - 1) == 2 ** 63 - 1
        assert client.testDouble(-5.235098235) == -5.235098235
        assert client.testBinary(bytes(range(256))) == bytes(range(256))
        xtruct = tt.Xtruct(string_thing="Zero", byte_thing=1, i32_thing=-3, i64_thing=-5)
        assert client.testStruct(xtruct) == xtruct
        nest = tt.Xtruct2(byte_thing=1, struct_thing=xtruct, i32_thing=5)
        assert client.testNest(nest) == nest
        assert client.testMap({0: 1, -1: -2}) == {0: 1, -1: -2}
        assert client.testStringMap({"a": "\u0416", "": "b"}) == {"a": "\u0416", "": "b"}
        # thriftpy2 hands a decoded set<> back as a list.
        assert sorted(client.testSet({8, 1, 42})) == [1, 8, 42]
        assert client.testList([1, 4, 9, -42]) == [1, 4, 9, -42]
        assert client.testEnum(tt.Numberz.FIVE) == tt.Numberz.FIVE
        assert client.testTypedef(0xFFFFFFFFFFFFFF) == 0xFFFFFFFFFFFFFF
        assert client.testMapMap(1) == {-4: {-4: -4, -3: -3, -2: -2, -1: -1},
                                        4: {1: 1, 2: 2, 3: 3, 4: 4}}
        crazy = tt.Insanity(userMap={tt.Numberz.FIVE: 5, tt.Numberz.EIGHT: 8}, xtructs=[xtruct])
        assert client.testInsanity(crazy) == {
            1: {tt.Numberz.TWO: crazy, tt.Numberz.THREE: crazy},
            2: {tt.Numberz.SIX: tt.Insanity(userMap={}, xtructs=[])}}
        assert client.testMulti(74, 0xFF00FF, 0xFFFFFFFFD0D0, {0: "abc"}, tt.Numberz.FIVE,
                                0xF0F0F0) == tt.Xtruct(string_thing="Hello2", byte_thing=74,
                                                       i32_thing=0xFF00FF,
                                                       i64_thing=0xFFFFFFFFD0D0)
        assert client.testException("Safe") is None
        with pytest.raises(tt.Xception) as xception:
            client.testException("Xception")
        assert (xception.value.errorCode, xception.value.message) == (1001, "Xception")
        with pytest.raises(TApplicationException) as app:
            client.testException("TException")
        assert app.value.type == TApplicationException.INTERNAL_ERROR
        with pytest.raises(tt.Xception2) as xception2:
            client.testMultiException("Xception2", "ignored")
        assert xception2.value.errorCode == 2002
        assert xception2.value.struct_thing.string_thing == "This is an Xception2"
        assert client.testMultiException("success", "foobar").string_thing == "foobar"
        oneways_before = len(handler.oneways())
        assert client.testOneway(0) is None
        # The next call's answer is its own, not the oneway's (none was sent).
        assert client.testString("after oneway") == "after oneway"
        assert handler.wait_oneways(oneways_before + 1, ONEWAY_WAIT_S)[oneways_before:] == [0]
    finally:
        client.close()
