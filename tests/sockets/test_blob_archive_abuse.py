"""Issue 27, item 1 over real sockets: an attacker on 127.0.0.2 maps a bzip2 tar bomb
with ``uncompress``; while its unpacking is under way a well-behaved client on
127.0.0.1 updates an unrelated blob that another topology maps, and is answered (each
work directory has its own lock; the unpacking runs in a capped child). The bomb is
refused with a sentence on the attacker's topology, and a good archive still unpacks.
"""

from __future__ import annotations

import io
import json
import socket
import tarfile
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from support.nimbus import FakeLauncher, N, make_zip, port_of, wordcount
from support.rawthrift import (ATTACKER, REPLY, frame, message, needs_attacker_address,
                               roundtrip)
from nimbus_thrift.client.blobs import upload_blob
from nimbus_thrift.client.client import NimbusClient
from nimbus_thrift.nimbus import NimbusDaemon, load_config
from nimbus_thrift.nimbus.blobs import placement

#: A bound on the good call, only so that a regression fails instead of hanging: the
#: test's point is the order (answered while the bomb is held), not the time.
GOOD_CALL_BOUND_S = 20.0


pytestmark = needs_attacker_address


def bomb(size: int = 8 << 20) -> bytes:
    """A bzip2 tar of one file of ``size`` zero bytes: ~150 bytes of blob."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:bz2") as tf:
        info = tarfile.TarInfo("zeros")
        info.size = size
        tf.addfile(info, io.BytesIO(bytes(size)))
    return buf.getvalue()


def good_archive() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        info = tarfile.TarInfo("model/weights.txt")
        info.size = 4
        tf.addfile(info, io.BytesIO(b"w1w1"))
    return buf.getvalue()


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[NimbusDaemon]:
    config = load_config(env={}, flags={"ui_port": 0, "data_dir": str(tmp_path / "data"),
                                        "port": 0, "host": "127.0.0.1"})
    d = NimbusDaemon(config, launcher=FakeLauncher())
    d.start()
    try:
        yield d
    finally:
        d.stop(grace=5.0)


class Attacker:
    """Raw calls from 127.0.0.2, as a hostile client makes them."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60,
                                             source_address=(ATTACKER, 0))
        self.seqid = 0

    def ask(self, method: str, **kwargs: Any) -> Any:
        self.seqid += 1
        args = getattr(N.Nimbus, method + "_args")(**kwargs)    # submitTopology's name=
        reply = roundtrip(self.sock, frame(message(method, self.seqid, args)), N.Nimbus)
        assert reply.type == REPLY, reply.body
        return getattr(reply.body, "success", None)

    def create_blob(self, key: str, data: bytes) -> None:
        meta = N.SettableBlobMeta(acl=[N.AccessControl(type=1, access=7)])
        session = self.ask("beginCreateBlob", key=key, meta=meta)
        self.ask("uploadBlobChunk", session=session, chunk=data)
        self.ask("finishBlobUpload", session=session)

    def submit(self, name: str, conf: dict[str, Any]) -> None:
        location = self.ask("beginFileUpload")
        self.ask("uploadChunk", location=location, chunk=make_zip())
        self.ask("finishFileUpload", location=location)
        self.ask("submitTopology", name=name, uploadedJarLocation=location,
                 jsonConf=json.dumps(conf), topology=wordcount())

    def close(self) -> None:
        self.sock.close()


def submit(client: NimbusClient, name: str, conf: dict[str, Any]) -> str:
    location = client.beginFileUpload()
    client.uploadChunk(location, make_zip())
    client.finishFileUpload(location)
    client.submitTopology(name, location, json.dumps(conf), wordcount())
    return next(t.id for t in client.getClusterInfo().topologies if t.name == name)


def errors_of(client: NimbusClient, topology_id: str) -> list[str]:
    info = client.getTopologyInfo(topology_id)
    return [e.error for errs in (info.errors or {}).values() for e in errs]


def test_an_unrelated_blob_update_is_answered_while_a_bomb_is_unpacked(
        daemon: NimbusDaemon, monkeypatch: pytest.MonkeyPatch) -> None:
    port = port_of(daemon)
    topologies = daemon.config.data_dir / "topologies"
    entered, release = threading.Event(), threading.Event()
    real = placement.unpack_in_child

    def held(*args: Any, **kwargs: Any) -> Any:
        # The bomb's unpacking starts, then waits for the test: whatever the good client
        # does meanwhile happens provably during it.
        entered.set()
        release.wait(60)
        return real(*args, **kwargs)

    monkeypatch.setattr(placement, "unpack_in_child", held)
    with NimbusClient("127.0.0.1", port, timeout=GOOD_CALL_BOUND_S) as good:
        upload_blob(good, "dict", io.BytesIO(b"v1"), create=True)
        good_id = submit(good, "reader", {"topology.blobstore.map": {
            "dict": {"localname": "dict.txt"}}})
        placed = topologies / good_id / "blobs" / "dict.txt"
        assert placed.read_bytes() == b"v1"

        attacker = Attacker(port)
        attack_done: list[str] = []

        def attack() -> None:
            try:
                attacker.create_blob("bomb", bomb())
                attacker.submit("bomber", {"topology.blobstore.map": {
                    "bomb": {"localname": "data", "uncompress": True}}})
                attack_done.append("submitted")
            except Exception as exc:  # noqa: BLE001 - reported by the assertion below
                attack_done.append(repr(exc))
                entered.set()

        thread = threading.Thread(target=attack, daemon=True)
        thread.start()
        try:
            assert entered.wait(30), "the bomb's unpacking never started"
            assert attack_done == [], attack_done
            started = time.monotonic()
            upload_blob(good, "dict", io.BytesIO(b"v2"), create=False)
            took = time.monotonic() - started
            # Answered, and placed, while the bomb's placement was still held.
            assert not release.is_set() and attack_done == []
            assert placed.read_bytes() == b"v2"
            assert took < GOOD_CALL_BOUND_S
        finally:
            release.set()
            thread.join(60)
            attacker.close()
        assert attack_done == ["submitted"]
        bomber = next(t.id for t in good.getClusterInfo().topologies if t.name == "bomber")
        [problem] = errors_of(good, bomber)
        assert problem.startswith("blob 'bomb' cannot be uncompressed as 'data': it "
                                  "unpacks to more than 1048576 bytes (decompressed "
                                  "bytes counted as read; the limit)")
        blobs_dir = topologies / bomber / "blobs"
        assert not (blobs_dir / "data").exists()
        assert [p.name for p in blobs_dir.iterdir()] == []     # nothing of it stays
        # The daemon carries on: the good client's next calls are answered.
        assert good.getClusterInfo().topologies
        assert errors_of(good, good_id) == []


def test_a_good_archive_still_unpacks_and_a_new_version_replaces_it(
        daemon: NimbusDaemon) -> None:
    port = port_of(daemon)
    with NimbusClient("127.0.0.1", port, timeout=30) as good:
        upload_blob(good, "model", io.BytesIO(good_archive()), create=True)
        tid = submit(good, "user", {"topology.blobstore.map": {
            "model": {"localname": "model", "uncompress": True}}})
        root = daemon.config.data_dir / "topologies" / tid / "blobs" / "model"
        assert (root / "model" / "weights.txt").read_bytes() == b"w1w1"
        upload_blob(good, "model", io.BytesIO(bomb(2 << 20)), create=False)
        # The bomb version is refused; the good version stays in place.
        assert (root / "model" / "weights.txt").read_bytes() == b"w1w1"
        [problem] = errors_of(good, tid)
        assert "cannot be uncompressed as 'model'" in problem
