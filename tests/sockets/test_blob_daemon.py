"""The blob store over real sockets: the Python client helpers and the CLI against an
in-process daemon, `nimbus-thrift set-log-level`'s structs on the wire, and a real
daemon process killed with SIGKILL in the middle of blob uploads, then restarted."""

from __future__ import annotations

import hashlib
import io
import json
import os
import pwd
import random
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest
from click.testing import CliRunner

from support.daemon_process import DaemonProcess
from support.nimbus import FakeLauncher, N, make_zip, port_of, wordcount
from nimbus_thrift.cli import main
from nimbus_thrift.client.blobs import (blob_rows, download_blob, list_blobs,
                                        parse_acl, upload_blob)
from nimbus_thrift.client.client import NimbusClient
from nimbus_thrift.nimbus import NimbusDaemon, load_config
from nimbus_thrift.nimbus import daemon as daemon_module
from nimbus_thrift.nimbus.service.handler import NimbusHandler

#: The creator of what this file's clients make: on loopback TCP, the OS user.
ME = pwd.getpwuid(os.geteuid()).pw_name

class LogConfigHandler(NimbusHandler):
    """Records setLogConfig (the daemon side is another module's): what the CLI sent."""

    received: list[tuple[str, Any]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.setLogConfig = self._record        # instead of the method table's LogCalls

    def _record(self, name: str, config: Any) -> None:
        with self.access.gate("setLogConfig", topology=name) as call:
            self.access.permitted(call, name)
            LogConfigHandler.received.append((name, config))


@pytest.fixture
def daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[NimbusDaemon]:
    monkeypatch.setattr(daemon_module, "NimbusHandler", LogConfigHandler)
    LogConfigHandler.received = []
    config = load_config(env={}, flags={"ui_port": 0, "data_dir": str(tmp_path / "data"), "port": 0,
                                        "unix_socket": ""})
    d = NimbusDaemon(config, launcher=FakeLauncher())
    d.start()
    try:
        yield d
    finally:
        d.stop(grace=5.0)


def client_of(daemon: NimbusDaemon) -> NimbusClient:
    return NimbusClient("127.0.0.1", port_of(daemon), timeout=10)


def cli(daemon: NimbusDaemon, *args: str, input: bytes | None = None) -> Any:
    return CliRunner().invoke(main, [*args, "--port", str(port_of(daemon))], input=input)


# --- the Python client ------------------------------------------------------------------

def test_round_trip_of_a_blob_larger_than_a_frame(daemon: NimbusDaemon) -> None:
    data = random.Random(1).randbytes(3_000_000)         # > max_frame_size (1 MiB)
    with client_of(daemon) as client:
        sent = upload_blob(client, "big.bin", io.BytesIO(data), create=True,
                           acl=parse_acl("o::r"))
        out = io.BytesIO()
        assert download_blob(client, "big.bin", out) == sent == len(data)
        assert hashlib.sha256(out.getvalue()).digest() == hashlib.sha256(data).digest()
        assert client.call("getBlobMeta", "big.bin").settable.replication_factor == 1
        assert list(list_blobs(client)) == ["big.bin"]
        [(key, version, acl)] = blob_rows(client, None)
        assert (key, acl) == ("big.bin", f"o::r--,u:{ME}:rwa") and version > 0


def test_a_failed_upload_is_cancelled_and_leaves_no_blob(daemon: NimbusDaemon) -> None:
    class Broken(io.RawIOBase):
        def __init__(self) -> None:
            self.calls = 0

        def read(self, size: int = -1) -> bytes:
            self.calls += 1
            if self.calls > 2:
                raise OSError("disk gone")
            return b"x" * 10

    with client_of(daemon) as client:
        with pytest.raises(OSError, match="disk gone"):
            upload_blob(client, "k", Broken(), create=True)       # type: ignore[arg-type]
        assert client.call("isRemoteBlobExists", "k") is False
        upload_blob(client, "k", io.BytesIO(b"ok"), create=True)  # the key was freed
    assert daemon.handler is not None
    assert daemon.handler.store.blob_uploads() == []


def test_a_topology_reads_a_blob_mapped_in_its_conf(daemon: NimbusDaemon) -> None:
    with client_of(daemon) as client:
        upload_blob(client, "dict", io.BytesIO(b"v1"), create=True)
        location = client.beginFileUpload()
        client.uploadChunk(location, make_zip())
        client.finishFileUpload(location)
        client.submitTopology("wc", location, json.dumps(
            {"topology.blobstore.map": {"dict": {"localname": "dict.txt"}}}), wordcount())
        topology_id = client.getClusterInfo().topologies[0].id
        path = daemon.config.data_dir / "topologies" / topology_id / "blobs" / "dict.txt"
        assert path.read_bytes() == b"v1"
        upload_blob(client, "dict", io.BytesIO(b"v2"), create=False)
        assert path.read_bytes() == b"v2"      # before the update's reply came back
        with pytest.raises(N.IllegalStateException):
            client.call("deleteBlob", "dict")


# --- the CLI ------------------------------------------------------------------------------

def test_cli_blob_commands(daemon: NimbusDaemon, tmp_path: Path) -> None:
    source = tmp_path / "words.txt"
    source.write_bytes(b"alpha\nbeta\n")
    result = cli(daemon, "blob", "create", "words", "--file", str(source),
                 "--acl", "u:alice:rwa,o::r")
    assert result.exit_code == 0, result.output
    assert "created words (11 bytes)" in result.output
    result = cli(daemon, "blob", "cat", "words")
    assert result.exit_code == 0 and result.stdout_bytes == b"alpha\nbeta\n"
    result = cli(daemon, "blob", "update", "words", input=b"gamma\n")      # from stdin
    assert result.exit_code == 0, result.output
    dest = tmp_path / "out.txt"
    assert cli(daemon, "blob", "cat", "words", "-f", str(dest)).exit_code == 0
    assert dest.read_bytes() == b"gamma\n"
    listed = cli(daemon, "blob", "list")
    header, row = listed.output.strip().splitlines()
    assert header.split() == ["KEY", "VERSION", "ACL"]
    assert row.split()[0] == "words" and row.split()[2] == \
        f"u:alice:rwa,o::r--,u:{ME}:rwa"
    as_json = json.loads(cli(daemon, "blob", "list", "--json").output)
    assert [r["key"] for r in as_json] == ["words"]
    named = cli(daemon, "blob", "list", "words", "ghost")
    assert "ghost" in named.output and "NOT FOUND" in named.output
    result = cli(daemon, "blob", "set-acl", "words", "-s", "o::rw")
    assert result.exit_code == 0
    assert result.output.strip() == f"words o::rw-,u:{ME}:--a"
    assert cli(daemon, "blob", "delete", "words").exit_code == 0
    assert cli(daemon, "blob", "list").output.strip() == "KEY  VERSION  ACL"


@pytest.mark.parametrize("args, code, message", [
    (["blob", "cat", "ghost"], 1, "no blob with key 'ghost'"),
    (["blob", "delete", "ghost"], 1, "no blob with key 'ghost'"),
    (["blob", "create", "a/b", "-f", "{file}"], 1, "not a valid blob key"),
    (["blob", "create", "k", "--acl", "x:bob:r"], 2, "neither u (user) nor o"),
    (["blob", "create", "k", "--acl", "u:bob:rwz"], 2, "may hold only r, w, a and -"),
    (["blob", "update", "k", "-f", "/no/such/file"], 2, "does not exist"),
    (["set-log-level", "wc", "-l", "ROOT=LOUD"], 2, "'LOUD' is not one of"),
    (["set-log-level", "wc", "-l", "ROOT=DEBUG:soon"], 2, "is not a whole number"),
    (["set-log-level", "wc", "-l", "ROOT"], 2, "is not LOGGER=LEVEL"),
    (["set-log-level", "wc"], 2, "nothing to change"),
    (["set-log-level", "ghost", "-l", "ROOT=DEBUG"], 1, "no topology named 'ghost'"),
])
def test_cli_mistakes_are_one_sentence(daemon: NimbusDaemon, tmp_path: Path,
                                       args: list[str], code: int, message: str) -> None:
    (tmp_path / "f").write_bytes(b"x")
    result = cli(daemon, *[a.replace("{file}", str(tmp_path / "f")) for a in args])
    assert result.exit_code == code, result.output
    assert message in result.output
    assert "Traceback" not in result.output


def test_cli_set_log_level_sends_storms_structs(daemon: NimbusDaemon) -> None:
    with client_of(daemon) as client:
        location = client.beginFileUpload()
        client.uploadChunk(location, make_zip())
        client.finishFileUpload(location)
        client.submitTopology("wc", location, "{}", wordcount())
        topology_id = client.getClusterInfo().topologies[0].id
    result = cli(daemon, "set-log-level", "wc", "-l", "ROOT=debug:30", "-l",
                 "my.module=WARN", "-r", "other.module")
    assert result.exit_code == 0, result.output
    assert "wc: ROOT set to DEBUG for 30 s" in result.output
    [(name, config)] = LogConfigHandler.received
    assert name == topology_id
    levels = config.named_logger_level
    assert (levels["ROOT"].action, levels["ROOT"].target_log_level,
            levels["ROOT"].reset_log_level_timeout_secs) == \
        (N.LogLevelAction.UPDATE, "DEBUG", 30)
    assert (levels["my.module"].target_log_level,
            levels["my.module"].reset_log_level_timeout_secs) == ("WARN", 0)
    assert levels["other.module"].action == N.LogLevelAction.REMOVE
    assert levels["other.module"].target_log_level is None


# --- a real daemon process, killed with SIGKILL mid-upload ----------------------------------

def _version_bytes(n: int) -> bytes:
    return hashlib.sha256(str(n).encode()).digest() * (40 + n % 7)      # ~1.3-1.5 KB


def test_sigkill_at_any_moment_loses_no_acknowledged_blob(tmp_path: Path) -> None:
    """A writer updates one blob in a loop (begin, chunks, finish), noting what each
    reply acknowledged; the daemon is SIGKILLed at a random moment, restarted, and the
    blob must be the last acknowledged version or the one whose finish was in flight,
    whole; an upload in progress keeps its acknowledged chunks and can be finished."""
    data_dir = tmp_path / "data"
    rng = random.Random(15)
    version = 0
    d = DaemonProcess(data_dir, "--unix-socket", "")
    with NimbusClient("127.0.0.1", d.port, timeout=10) as client:
        upload_blob(client, "k", io.BytesIO(_version_bytes(0)), create=True)
    acked = _version_bytes(0)
    for _round in range(4):
        state: dict[str, Any] = {"in_flight": None, "session": None, "sent": b""}
        stop = threading.Event()

        def writer(port: int) -> None:
            nonlocal version, acked
            try:
                with NimbusClient("127.0.0.1", port, timeout=10, connect_attempts=1) as c:
                    while not stop.is_set():
                        version += 1
                        data = _version_bytes(version)
                        session = c.call("beginUpdateBlob", "k")
                        state.update(session=session, sent=b"", in_flight=None)
                        for i in range(0, len(data), 200):
                            c.call("uploadBlobChunk", session, data[i:i + 200])
                            state["sent"] = data[:i + 200]
                        state["in_flight"] = data
                        c.call("finishBlobUpload", session)
                        acked, state["in_flight"], state["session"] = data, None, None
            except Exception:  # noqa: BLE001 - the kill breaks the connection
                pass

        thread = threading.Thread(target=writer, args=(d.port,))
        thread.start()
        threading.Event().wait(rng.uniform(0.05, 0.4))
        d.sigkill()
        stop.set()
        thread.join(30)
        d = DaemonProcess(data_dir, "--unix-socket", "")
        with NimbusClient("127.0.0.1", d.port, timeout=10) as client:
            out = io.BytesIO()
            download_blob(client, "k", out)
            allowed = [acked] + ([state["in_flight"]] if state["in_flight"] else [])
            assert out.getvalue() in allowed, f"round {_round}: not an acknowledged version"
            session = state["session"]
            if session is not None and state["in_flight"] is None:
                # Mid-chunks: what was acknowledged is there; the upload carries on.
                full = _version_bytes(version)
                part = (data_dir / "blobs" / f"{session}.part").read_bytes()
                assert len(part) >= len(state["sent"]) and full.startswith(part)
                client.call("uploadBlobChunk", session, full[len(part):])
                client.call("finishBlobUpload", session)
                out = io.BytesIO()
                download_blob(client, "k", out)
                assert out.getvalue() == full
                acked = full
            elif out.getvalue() != acked:
                acked = out.getvalue()        # the in-flight finish had committed
        # The quota counts exactly what is stored.
        stored = sum(p.stat().st_size for p in (data_dir / "blobs").iterdir())
        assert stored >= len(acked)
    d.sigkill()
