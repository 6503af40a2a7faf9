"""Shared pieces for the Nimbus tests: topology builders, code zips, a fake clock and a
recording fake launcher (fakes live here, in the tests, never in the product)."""

from __future__ import annotations

import io
import socket
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

from nimbus_thrift.nimbus import NimbusDaemon, nimbus_idl
from nimbus_thrift.nimbus.launcher import ComponentStats, LaunchSpec, RunStatus, WorkerNode
from nimbus_thrift.rpc.context import REQUEST

from support.rawthrift import connect

N = nimbus_idl()

WORDCOUNT_CODE = {
    "wordcount/__init__.py": "",
    "wordcount/components.py": (
        "class SentenceSpout:\n    pass\n\n"
        "class SplitBolt:\n    pass\n\n"
        "class CountBolt:\n    pass\n"),
}


def make_zip(files: dict[str, str | bytes] | None = None) -> bytes:
    """The same files give the same bytes: entries carry a fixed date, not the clock's, so
    two calls that straddle a two-second tick still compare equal."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in (files if files is not None else WORDCOUNT_CODE).items():
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            zf.writestr(info, data)
    return buf.getvalue()


def shell(script: str, command: str = "python") -> Any:
    return N.ComponentObject(shell=N.ShellComponent(execution_command=command, script=script))


def common(inputs: dict[tuple[str, str], Any] | None = None,
           streams: dict[str, list[str]] | None = None, par: int | None = 1,
           json_conf: str | None = None) -> Any:
    return N.ComponentCommon(
        inputs={N.GlobalStreamId(componentId=c, streamId=s): g
                for (c, s), g in (inputs or {}).items()},
        streams={sid: N.StreamInfo(output_fields=fields, direct=False)
                 for sid, fields in (streams if streams is not None
                                     else {"default": ["word"]}).items()},
        parallelism_hint=par, json_conf=json_conf)


def shuffle() -> Any:
    return N.Grouping(shuffle=N.NullStruct())


def fields(*names: str) -> Any:
    return N.Grouping(fields=list(names))


def wordcount(split_par: int = 2, count_par: int = 3) -> Any:
    """sentences -> split (shuffle) -> count (fields 'word')."""
    return N.StormTopology(
        spouts={"sentences": N.SpoutSpec(
            spout_object=shell("wordcount.components.SentenceSpout"),
            common=common(streams={"default": ["sentence"]}))},
        bolts={
            "split": N.Bolt(bolt_object=shell("wordcount.components.SplitBolt"),
                            common=common({("sentences", "default"): shuffle()},
                                          {"default": ["word"]}, par=split_par)),
            "count": N.Bolt(bolt_object=shell("wordcount.components.CountBolt"),
                            common=common({("split", "default"): fields("word")},
                                          {"default": ["word", "count"]}, par=count_par)),
        },
        state_spouts={})


class FakeClock:
    def __init__(self, now: float = 1_700_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FakeLauncher:
    """Records calls; keeps a state per topology; can be told to fail a method."""

    name = "fake"

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.specs: dict[str, LaunchSpec] = {}
        self.state: dict[str, str] = {}
        self.fail: set[str] = set()
        self.stats: dict[str, dict[str, ComponentStats]] = {}
        self.lock = threading.Lock()

    def _record(self, method: str, topology_id: str) -> None:
        with self.lock:
            self.calls.append((method, topology_id))
        if method in self.fail:
            raise RuntimeError(f"{method} exploded")

    def launch(self, spec: LaunchSpec) -> None:
        self._record("launch", spec.topology_id)
        self.specs[spec.topology_id] = spec
        self.state[spec.topology_id] = "running" if spec.active else "paused"

    def stop(self, topology_id: str, grace: float) -> None:
        self._record("stop", topology_id)
        self.state[topology_id] = "stopped"

    def pause(self, topology_id: str) -> None:
        self._record("pause", topology_id)
        self.state[topology_id] = "paused"

    def resume(self, topology_id: str) -> None:
        self._record("resume", topology_id)
        self.state[topology_id] = "running"

    def rebalance(self, spec: LaunchSpec) -> None:
        self._record("rebalance", spec.topology_id)
        self.specs[spec.topology_id] = spec
        self.state[spec.topology_id] = "running" if spec.active else "paused"

    def status(self, topology_id: str) -> RunStatus:
        if "status" in self.fail:
            raise RuntimeError("status exploded")
        state = self.state.get(topology_id, "stopped")
        return RunStatus(state=state, detail=f"fake: {state}", started_at=None,
                         host="127.0.0.1", port=4040, components=self.stats.get(topology_id, {}))

    def memory_request(self, conf: Any) -> int:
        # A test's topologies take what their conf says, in plain bytes.
        return int(conf.get("fake.memory.bytes", 0))

    def nodes(self) -> list[WorkerNode]:
        return [WorkerNode("worker-1", "127.0.0.1", 0.0, 4, len(
            [s for s in self.state.values() if s in ("running", "paused")]), "fake-1")]

    def close(self) -> None:
        self._record("close", "")

    def methods(self, topology_id: str) -> list[str]:
        return [m for m, t in self.calls if t == topology_id]


def upload(handler: Any, data: bytes, chunk: int = 307200) -> str:
    location = handler.beginFileUpload()
    for i in range(0, len(data), chunk):
        handler.uploadChunk(location, data[i:i + chunk])
    handler.finishFileUpload(location)
    return location


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def port_of(daemon: NimbusDaemon) -> int:
    """The port an in-process daemon started on port 0 listens on."""
    assert daemon.handler is not None
    return daemon.handler.address[1]


def unix(daemon: NimbusDaemon) -> socket.socket:
    """A connection to the daemon's Unix socket (its caller is this OS user)."""
    path = daemon.config.unix_socket_path()
    assert path is not None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(str(path))
    return sock


def tcp(daemon: NimbusDaemon) -> socket.socket:
    """A plain TCP connection to the daemon on loopback (its caller is anonymous)."""
    return connect(("127.0.0.1", port_of(daemon)), timeout=10)



class BlockingLauncher(FakeLauncher):
    """A FakeLauncher whose methods named in ``blocked`` wait until released: for
    showing that a slow launcher operation holds no lock and no other topology's call.

    ``entered[method]`` is set when a blocked call has started waiting."""

    def __init__(self, *blocked: str, limit: float = 30.0) -> None:
        super().__init__()
        self.limit = limit
        self.gates = {method: threading.Event() for method in blocked}
        self.entered = {method: threading.Event() for method in blocked}

    def release(self, method: str | None = None) -> None:
        for name, gate in self.gates.items():
            if method is None or name == method:
                gate.set()

    def _record(self, method: str, topology_id: str) -> None:
        gate = self.gates.get(method)
        if gate is not None:
            self.entered[method].set()
            if not gate.wait(self.limit):
                raise RuntimeError(f"{method} was never released")
        super()._record(method, topology_id)


# --- requests as a principal, and the audit log (authorization tests) ----------------

@contextmanager
def request_as(principal: str | None, method: str = "call",
               peer: str = "127.0.0.1:40000") -> Iterator[None]:
    """Run the block as the handler of a request from ``principal`` (None: plain TCP,
    which the daemon calls "anonymous"), as the server's dispatcher would."""
    token = REQUEST.set((peer, method, 1, principal))
    try:
        yield
    finally:
        REQUEST.reset(token)


@contextmanager
def audit_events() -> Iterator[Callable[[], list[dict[str, Any]]]]:
    """Capture log events; yields a function returning those logged so far on the audit
    logger (``nimbus_thrift.audit``), with the request context merged as the CLI's
    configuration does."""
    import structlog
    from structlog.testing import LogCapture

    from nimbus_thrift.nimbus.security import audit
    from nimbus_thrift.rpc.context import merge_request_context

    capture = LogCapture()
    old = structlog.get_config()
    structlog.configure(processors=[merge_request_context, structlog.stdlib.add_logger_name,
                                    capture], cache_logger_on_first_use=False)
    # A fresh proxy for the audit logger: the module's own may have cached the logger
    # of an earlier configuration (the CLI's, run in-process by other tests, caches on
    # first use), which would bypass this capture.
    cached, audit.log = audit.log, structlog.get_logger(audit.AUDIT_LOGGER)
    try:
        yield lambda: [e for e in capture.entries if e.get("logger") == audit.AUDIT_LOGGER]
    finally:
        audit.log = cached
        structlog.configure(**old)


# --- certificates ------------------------------------------------------------------------

def make_test_pki(directory: Path) -> Path:
    """In ``directory``: what scripts/tls/make_certs.py makes for a client alice (``ca.*``,
    ``server.*``, ``alice.*``), a client certificate another CA signed (``stranger.*``),
    and the server's key encrypted with the passphrase "secret" (``encrypted.key``).
    Returns ``directory``."""
    import shutil
    import subprocess

    from support.certs import make_pki
    pki = make_pki(directory, clients=("alice",))
    shutil.copy(pki.foreign_client.cert, directory / "stranger.pem")
    shutil.copy(pki.foreign_client.key, directory / "stranger.key")
    subprocess.run(["openssl", "pkey", "-in", "server.key", "-aes256", "-passout",
                    "pass:secret", "-out", "encrypted.key"], cwd=directory, check=True,
                   capture_output=True, timeout=60)
    return directory
