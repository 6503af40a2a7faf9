"""Interoperability, issue 17: real clients in every transport and protocol against ONE
demo server started with no options (tests/conftest.py's ``demo_server``).

* Apache Thrift's Python library: TBufferedTransport (unframed) and TFramedTransport with
  TBinaryProtocol and TCompactProtocol (pure and accelerated), THeaderProtocol carrying
  binary or compact, with and without the ZLIB transform, multiplexed too;
* thriftpy2: ``make_client`` with its defaults (buffered binary), and its compact protocol
  buffered and framed (thriftpy2 0.7.1 has no THeader);
* Node's npm ``thrift``: buffered and framed, binary, compact and header
  (tests/interop/node/client_protocols.js).
"""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from thrift.protocol import (TBinaryProtocol, TCompactProtocol, THeaderProtocol,
                             TMultiplexedProtocol)
from thrift.Thrift import TApplicationException
from thrift.transport import TSocket, TTransport
from thrift.transport.THeaderTransport import THeaderClientType, THeaderTransformID
from thriftpy2.protocol import TCompactProtocolFactory
from thriftpy2.rpc import make_client
from thriftpy2.transport import TBufferedTransportFactory, TFramedTransportFactory

from interop import (GEN_NODEJS, GEN_PY, NODE_DIR, SETUP_HINT, require_file,
                     require_generated)

pytestmark = pytest.mark.interop

CLIENT_TIMEOUT_MS = 10_000
NODE_TIMEOUT_S = 60
UNICODE = "h\u00e9llo w\u00f6rld \u65e5\u672c\u8a9e \u0416 \U0001f680"


@pytest.fixture(scope="module")
def gen() -> SimpleNamespace:
    require_generated(GEN_PY / "nimbus_demo" / "Echo.py", "Apache Thrift generated Python code")
    if str(GEN_PY) not in sys.path:
        sys.path.insert(0, str(GEN_PY))
    return SimpleNamespace(Echo=importlib.import_module("nimbus_demo.Echo"),
                           Calculator=importlib.import_module("nimbus_demo.Calculator"),
                           ttypes=importlib.import_module("nimbus_demo.ttypes"))


def _header(protocol_id: int, zlib: bool = False) -> Callable[[Any], tuple[Any, Any]]:
    def make(sock: Any) -> tuple[Any, Any]:
        proto = THeaderProtocol.THeaderProtocol(sock, [THeaderClientType.HEADERS], protocol_id)
        if zlib:
            proto.add_transform(THeaderTransformID.ZLIB)
        return proto.trans, proto
    return make


def _plain(transport: Any, protocol: Callable[[Any], Any]) -> Callable[[Any], tuple[Any, Any]]:
    def make(sock: Any) -> tuple[Any, Any]:
        trans = transport(sock)
        return trans, protocol(trans)
    return make


APACHE_FORMS = {
    "buffered-binary": _plain(TTransport.TBufferedTransport, TBinaryProtocol.TBinaryProtocol),
    "buffered-binary-accelerated": _plain(
        TTransport.TBufferedTransport,
        lambda t: TBinaryProtocol.TBinaryProtocolAccelerated(t, fallback=False)),
    "buffered-compact": _plain(TTransport.TBufferedTransport, TCompactProtocol.TCompactProtocol),
    "buffered-compact-accelerated": _plain(
        TTransport.TBufferedTransport,
        lambda t: TCompactProtocol.TCompactProtocolAccelerated(t, fallback=False)),
    "framed-compact": _plain(TTransport.TFramedTransport, TCompactProtocol.TCompactProtocol),
    "header-binary": _header(0),
    "header-compact": _header(2),
    "header-compact-zlib": _header(2, zlib=True),
}


@pytest.fixture(params=list(APACHE_FORMS))
def apache(request, demo_server, gen) -> Iterator[Callable[..., Any]]:
    host, port = demo_server.address
    opened: list[Any] = []

    def open_client(service: ModuleType, multiplexed: str | None = None) -> Any:
        sock = TSocket.TSocket(host, port)
        sock.setTimeout(CLIENT_TIMEOUT_MS)
        trans, proto = APACHE_FORMS[request.param](sock)
        trans.open()
        opened.append(trans)
        if multiplexed is not None:
            proto = TMultiplexedProtocol.TMultiplexedProtocol(proto, multiplexed)
        return service.Client(proto)

    yield open_client
    for trans in opened:
        trans.close()


def test_apache_python_every_form(apache, gen) -> None:
    client = apache(gen.Echo)
    assert client.echo("hello") == "hello"
    assert client.echo(UNICODE) == UNICODE
    big = "\u0416" * (300 * 1024)                 # 600 KiB: many reads, unframed or not
    assert client.echo(big) == big
    assert client.echo_binary(bytes(range(256))) == bytes(range(256))
    assert client.ping() is None
    client.notify("one")
    client.notify("two")
    assert client.events()[-2:] == ["one", "two"]
    with pytest.raises(gen.ttypes.DemoError) as declared:
        client.fail("declared")
    assert declared.value.code == 42
    with pytest.raises(TApplicationException) as internal:
        client.fail("undeclared")
    assert internal.value.type == TApplicationException.INTERNAL_ERROR
    assert client.echo("still usable") == "still usable"


def test_apache_python_multiplexed_every_form(apache, gen) -> None:
    assert apache(gen.Calculator, "Calculator").add(40, 2) == 42
    with pytest.raises(TApplicationException) as excinfo:
        apache(gen.Calculator, "Echo").add(1, 2)
    assert excinfo.value.type == TApplicationException.UNKNOWN_METHOD


THRIFTPY2_FORMS = {
    "make_client-defaults": {},
    "buffered-compact": {"proto_factory": TCompactProtocolFactory(),
                         "trans_factory": TBufferedTransportFactory()},
    "framed-compact": {"proto_factory": TCompactProtocolFactory(),
                       "trans_factory": TFramedTransportFactory()},
}


@pytest.mark.parametrize("form", list(THRIFTPY2_FORMS))
def test_thriftpy2_clients(form: str, demo_server, demo) -> None:
    host, port = demo_server.address
    client = make_client(demo.Echo, host, port, timeout=CLIENT_TIMEOUT_MS,
                         **THRIFTPY2_FORMS[form])
    try:
        assert client.echo("hello") == "hello"
        assert client.echo(UNICODE) == UNICODE
        big = ("x" * 1021 + "\u65e5") * 512
        assert client.echo(big) == big
        assert client.echo_binary(b"\xff\xfe\x00") == b"\xff\xfe\x00"
        assert client.ping() is None
        with pytest.raises(demo.DemoError):
            client.fail("declared")
        assert client.echo("after") == "after"
    finally:
        client.close()


@pytest.fixture(scope="module")
def node() -> str:
    path = shutil.which("node")
    if path is None:
        pytest.fail(f"node is not on PATH: {SETUP_HINT}", pytrace=False)
    require_file(NODE_DIR / "node_modules" / "thrift" / "package.json", "npm thrift")
    require_generated(GEN_NODEJS / "Echo.js", "Node generated code")
    return path


@pytest.mark.parametrize("transport", ["buffered", "framed"])
@pytest.mark.parametrize("protocol", ["binary", "compact", "header"])
def test_node_clients(node: str, demo_server, transport: str, protocol: str) -> None:
    host, port = demo_server.address
    proc = subprocess.run([node, str(NODE_DIR / "client_protocols.js"), host, str(port),
                           transport, protocol],
                          capture_output=True, text=True, timeout=NODE_TIMEOUT_S, check=False)
    detail = f"exit {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
    assert proc.returncode == 0, detail
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["echo"] == "hello from node"
    assert r["unicode"] == UNICODE
    assert r["large_length"] == 100 * 1024
    assert bytes.fromhex(r["binary_hex"]) == bytes(range(256))
    assert r["ping"] is None
    assert r["events"][-1] == "node-1"
    assert r["declared"] == {"message": "declared failure", "code": 42}
    assert r["internal"] == TApplicationException.INTERNAL_ERROR
    assert r["pipelined"] == ["p1", "p2", "p3", "p4"]
    assert r["after"] == "still alive"
