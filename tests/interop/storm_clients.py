"""Apache Thrift Python clients of the Nimbus daemon, for tests/test_interop_storm_clients.py.

Two generated packages, both written by scripts/install_interop.sh with ``thrift --gen py``:

    storm    from Storm 1.1's own storm.thrift (tests/interop/storm/storm.thrift, see
             storm_idl.py): what a Storm or streamparse user's tooling speaks
    nimbus   from our idl/nimbus.thrift, which follows Storm 2.x's (Storm 2.x's own IDL is
             on no package registry the tests reach): a Storm 2.x client

Each is imported from its own directory (``tests/interop/gen-*-py``); a missing or stale
one FAILS the test (never skips). Clients go over ``TSocket`` + ``TFramedTransport`` with
one of three binary protocols (:data:`PROTOCOLS`), through a :class:`RecordingTransport`
so a test can look at the exact reply bytes (:func:`reply_field_ids`).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import pytest
from thrift.protocol import TBinaryProtocol
from thrift.Thrift import TType
from thrift.transport import TSocket, TTransport

from interop.storm_idl import GEN_NIMBUS_PY, GEN_STORM_PY, STORM_IDL
from nimbus_thrift import idl

INSTALL_HINT = "run scripts/install_interop.sh (or scripts/setup.sh) to generate it"

#: package -> (directory holding it, the IDL it is generated from)
GENERATED: dict[str, tuple[Path, Callable[[], Path]]] = {
    "storm": (GEN_STORM_PY, lambda: STORM_IDL),
    "nimbus": (GEN_NIMBUS_PY, lambda: idl.idl_path("nimbus.thrift")),
}

#: Socket timeout (ms): a daemon that never answers fails the test instead of hanging it.
CLIENT_TIMEOUT_MS = 10_000


def load_generated(package: str) -> SimpleNamespace:
    """Import ``package.ttypes`` and ``package.Nimbus`` (Apache-generated code).

    Returns a namespace with ``package``, ``ttypes`` and ``Nimbus``. Fails the calling
    test if the IDL or the generated code is missing, or the code is older than its IDL.
    """
    root, source_of = GENERATED[package]
    source = source_of()
    if not source.is_file():
        pytest.fail(f"{source} is missing: {INSTALL_HINT}", pytrace=False)
    marker = root / package / "Nimbus.py"
    if not marker.is_file():
        pytest.fail(f"Apache Thrift code generated from {source.name} is missing ({marker}): "
                    f"{INSTALL_HINT}", pytrace=False)
    if marker.stat().st_mtime < source.stat().st_mtime:
        pytest.fail(f"{marker} is older than {source}: {INSTALL_HINT}", pytrace=False)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    ttypes = importlib.import_module(f"{package}.ttypes")
    # Apache Thrift >= 0.10 generates __eq__ without __hash__, so GlobalStreamId cannot be
    # a map key: building ComponentCommon.inputs or decoding BoltStats fails with
    # "unhashable type". streamparse patches its classes the same way.
    ttypes.GlobalStreamId.__hash__ = lambda self: hash((self.componentId, self.streamId))
    return SimpleNamespace(package=package, ttypes=ttypes,
                           Nimbus=importlib.import_module(f"{package}.Nimbus"))


def _strict(trans: Any) -> Any:
    return TBinaryProtocol.TBinaryProtocol(trans)


def _non_strict(trans: Any) -> Any:
    # The old message header (no version word), as pre-0.x clients send it.
    return TBinaryProtocol.TBinaryProtocol(trans, strictRead=False, strictWrite=False)


def _accelerated(trans: Any) -> Any:
    # fallback=False: raise instead of silently using the pure-Python codec.
    return TBinaryProtocol.TBinaryProtocolAccelerated(trans, fallback=False)


PROTOCOLS: dict[str, Callable[[Any], Any]] = {
    "strict": _strict, "non-strict": _non_strict, "accelerated": _accelerated}


class RecordingTransport(TTransport.TTransportBase):
    """Passes everything to ``inner`` and keeps the bytes read since :meth:`clear`."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.received = bytearray()

    def isOpen(self) -> bool:
        return self.inner.isOpen()

    def open(self) -> None:
        self.inner.open()

    def close(self) -> None:
        self.inner.close()

    def read(self, sz: int) -> bytes:
        data = self.inner.read(sz)
        self.received += data
        return data

    def write(self, buf: bytes) -> None:
        self.inner.write(buf)

    def flush(self) -> None:
        self.inner.flush()

    def clear(self) -> None:
        self.received.clear()


def open_client(gen: SimpleNamespace, address: tuple[str, int],
                protocol: str = "strict") -> tuple[Any, RecordingTransport, Any]:
    """Connect to ``address``; return ``(client, recorder, transport)``. The caller closes
    ``transport``."""
    sock = TSocket.TSocket(*address)
    sock.setTimeout(CLIENT_TIMEOUT_MS)
    recorder = RecordingTransport(sock)
    trans = TTransport.TFramedTransport(recorder)
    trans.open()
    return gen.Nimbus.Client(PROTOCOLS[protocol](trans)), recorder, trans


def reply_field_ids(frame: bytes) -> list[int]:
    """The field ids of the struct a REPLY frame (with its 4-byte length) returns, in the
    order they are on the wire: which fields the server actually sent, which a decoded
    struct cannot tell when a field has a default."""
    proto = TBinaryProtocol.TBinaryProtocol(TTransport.TMemoryBuffer(bytes(frame[4:])),
                                            strictRead=False)
    proto.readMessageBegin()
    proto.readStructBegin()
    _, ftype, fid = proto.readFieldBegin()
    assert (fid, ftype) == (0, TType.STRUCT), f"not a struct reply: field {fid} type {ftype}"
    proto.readStructBegin()
    ids = []
    while True:
        _, ftype, fid = proto.readFieldBegin()
        if ftype == TType.STOP:
            return ids
        ids.append(fid)
        proto.skip(ftype)
        proto.readFieldEnd()


def wordcount(m: Any, count_tasks: int = 6) -> Any:
    """sentences -> split (shuffle) -> count (fields "word"), from the generated classes
    in ``m`` (a ``ttypes`` module). Executors 1 + 2 + 3; tasks 1 + 2 + ``count_tasks``
    (count's json_conf sets topology.tasks, so it can be rebalanced up to that)."""
    def shell(script: str) -> Any:
        return m.ComponentObject(shell=m.ShellComponent(
            execution_command="python", script=f"wordcount.components.{script}"))

    def streams(*names: str) -> dict[str, Any]:
        return {"default": m.StreamInfo(output_fields=list(names), direct=False)}

    def source(component: str) -> Any:
        return m.GlobalStreamId(componentId=component, streamId="default")

    return m.StormTopology(
        spouts={"sentences": m.SpoutSpec(
            spout_object=shell("SentenceSpout"),
            common=m.ComponentCommon(inputs={}, streams=streams("sentence"),
                                     parallelism_hint=1))},
        bolts={
            "split": m.Bolt(bolt_object=shell("SplitBolt"), common=m.ComponentCommon(
                inputs={source("sentences"): m.Grouping(shuffle=m.NullStruct())},
                streams=streams("word"), parallelism_hint=2)),
            "count": m.Bolt(bolt_object=shell("CountBolt"), common=m.ComponentCommon(
                inputs={source("split"): m.Grouping(fields=["word"])},
                streams=streams("word", "count"), parallelism_hint=3,
                json_conf=f'{{"topology.tasks": {count_tasks}}}')),
        },
        state_spouts={})
