"""Issue 27, item 5 over real sockets: an attacker on 127.0.0.2 creates empty blobs
with 255-entry ACLs of long names, then as many small ones as it may. Each refusal is
a sentence and its connection carries on; what it stored counts in the quota; a
well-behaved client on 127.0.0.1 is answered throughout."""

from __future__ import annotations

import io
import socket
from pathlib import Path
from typing import Any, Iterator

import pytest
from thriftpy2.thrift import TApplicationException

from support.nimbus import FakeLauncher, N, port_of
from support.rawthrift import (ATTACKER, EXCEPTION, REPLY, frame, message,
                               needs_attacker_address, roundtrip)
from nimbus_thrift.client.blobs import download_blob, upload_blob
from nimbus_thrift.client.client import NimbusClient
from nimbus_thrift.nimbus import NimbusDaemon, load_config

CAP = 5


pytestmark = needs_attacker_address


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[NimbusDaemon]:
    config = load_config(env={}, flags={"ui_port": 0, "data_dir": str(tmp_path / "data"),
                                        "port": 0, "host": "127.0.0.1",
                                        "max_blobs_per_principal": CAP})
    d = NimbusDaemon(config, launcher=FakeLauncher())
    d.start()
    try:
        yield d
    finally:
        d.stop(grace=5.0)


class Attacker:
    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30,
                                             source_address=(ATTACKER, 0))
        self.seqid = 0

    def ask(self, method: str, **kwargs: Any) -> Any:
        self.seqid += 1
        args = getattr(N.Nimbus, method + "_args")(**kwargs)
        return roundtrip(self.sock, frame(message(method, self.seqid, args)), N.Nimbus)

    def create_empty(self, key: str, names: list[str]) -> Any:
        """beginCreateBlob and finishBlobUpload; the first reply that is not a success."""
        acl = [N.AccessControl(type=2, name=name, access=1) for name in names]
        reply = self.ask("beginCreateBlob", key=key, meta=N.SettableBlobMeta(acl=acl))
        if reply.type != REPLY:
            return reply
        return self.ask("finishBlobUpload", session=reply.body.success)


def refusal(reply: Any) -> str:
    assert reply.type == EXCEPTION, reply.body
    assert reply.body.type == TApplicationException.INTERNAL_ERROR
    return str(reply.body.message)


def test_metadata_is_bounded_counted_and_capped(daemon: NimbusDaemon) -> None:
    handler = daemon.handler
    assert handler is not None
    attacker = Attacker(port_of(daemon))
    try:
        long_names = [f"user{i:03d}-" + "x" * 4000 for i in range(255)]
        assert refusal(attacker.create_empty("big0", long_names)).startswith(
            "the ACL of blob 'big0' names a principal of 4008 bytes")
        many = [f"user{i:03d}-" + "x" * 200 for i in range(255)]
        assert "as stored, over the limit of 16384" in refusal(
            attacker.create_empty("big1", many))
        assert handler.store.blob_uploads() == []       # nothing of them stays

        fitting = [f"user{i:03d}" for i in range(200)]
        for i in range(CAP):
            assert attacker.create_empty(f"k{i}", fitting).type == REPLY
        assert refusal(attacker.create_empty("one-more", fitting)) == (
            f"'{handler.authz.daemon_user}' has created {CAP} blobs (creates in progress "
            f"included; limit {CAP}, max_blobs_per_principal); delete some to create "
            "'one-more'")
        # The metadata of the empty blobs is counted, as SQLite sums it.
        stored = handler.store.stored_bytes()
        assert stored > CAP * 200 * 10
        assert handler.transfers.inbox_bytes == stored

        # A well-behaved client is answered, and reads what there is; the attacker's
        # connection still is too.
        with NimbusClient("127.0.0.1", port_of(daemon), timeout=10) as good:
            assert len(good.call("listBlobs", "").keys) == CAP
            out = io.BytesIO()
            assert download_blob(good, "k0", out) == 0
            good.call("deleteBlob", "k0")                  # gives a place back
            upload_blob(good, "mine", io.BytesIO(b"data"), create=True)
        assert attacker.ask("getBlobMeta", key="k1").type == REPLY
        assert handler.transfers.inbox_bytes == handler.store.stored_bytes()
    finally:
        attacker.sock.close()
