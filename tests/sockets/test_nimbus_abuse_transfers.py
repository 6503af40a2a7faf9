"""Issue 13, row 6 over real sockets: one client address (127.0.0.2, the attacker:
loopback accepts any 127.x source) holds every upload and download slot it may, and a
well-behaved client on 127.0.0.1 keeps uploading, submitting and downloading."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any, Iterator

import pytest
from thriftpy2.thrift import TApplicationException

from support.nimbus import FakeLauncher, N, make_zip, port_of, wordcount
from support.rawthrift import (ATTACKER, EXCEPTION, REPLY, call, needs_attacker_address,
                               roundtrip)
from nimbus_thrift.client.client import NimbusClient
from nimbus_thrift.nimbus import NimbusDaemon, load_config

LIMIT = 3


pytestmark = needs_attacker_address


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[NimbusDaemon]:
    config = load_config(env={}, flags={"ui_port": 0,
        "data_dir": str(tmp_path / "data"), "port": 0, "host": "127.0.0.1",
        "max_uploads_per_peer": LIMIT, "max_downloads_per_peer": LIMIT})
    d = NimbusDaemon(config, launcher=FakeLauncher())
    d.start()
    try:
        yield d
    finally:
        d.stop(grace=5.0)


def attacker(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10,
                                    source_address=(ATTACKER, 0))
    assert sock.getsockname()[0] == ATTACKER
    return sock


def ask(sock: socket.socket, method: str, seqid: int, **kwargs: Any) -> Any:
    reply = roundtrip(sock, call(N.Nimbus, method, seqid=seqid, **kwargs), N.Nimbus)
    assert reply.seqid == seqid
    return reply


def well_behaved_round(port: int, name: str, tmp_path: Path) -> None:
    """Upload, submit, list and download as a normal client on 127.0.0.1."""
    with NimbusClient("127.0.0.1", port, timeout=10) as client:
        code = make_zip()
        location = client.beginFileUpload()
        client.uploadChunk(location, code)
        client.finishFileUpload(location)
        client.submitTopology(name, location, json.dumps({}), wordcount())
        tid = next(t.id for t in client.getClusterInfo().topologies if t.name == name)
        dest = tmp_path / f"{name}.zip"
        assert client.download_file(tid, dest) == len(code)
        assert dest.read_bytes() == code


def test_one_address_holding_its_uploads_does_not_stop_another(daemon: NimbusDaemon,
                                                                tmp_path: Path) -> None:
    port = port_of(daemon)
    transfers = daemon.handler.transfers        # type: ignore[union-attr]
    with attacker(port) as sock:
        held = []
        for seqid in range(1, LIMIT + 1):
            reply = ask(sock, "beginFileUpload", seqid)
            assert reply.type == REPLY
            held.append(reply.body.success)
        refused = ask(sock, "beginFileUpload", 99)
        assert refused.type == EXCEPTION
        assert refused.body.type == TApplicationException.INTERNAL_ERROR
        assert refused.body.message.startswith(
            f"{ATTACKER} already has {LIMIT} uploads in progress (limit {LIMIT}, "
            "max_uploads_per_peer)")
        assert transfers.uploads_of(ATTACKER) == LIMIT

        well_behaved_round(port, "wc", tmp_path)

        # The attacker's connection is still served, and a finished upload gives its
        # slot back.
        assert ask(sock, "finishFileUpload", 100, location=held[0]).type == REPLY
        assert transfers.uploads_of(ATTACKER) == LIMIT - 1
        assert ask(sock, "beginFileUpload", 101).type == REPLY
        assert transfers.uploads_of(ATTACKER) == LIMIT
    assert transfers.uploads_of("127.0.0.1") == 0


def test_one_address_holding_its_downloads_does_not_stop_another(daemon: NimbusDaemon,
                                                                  tmp_path: Path) -> None:
    port = port_of(daemon)
    transfers = daemon.handler.transfers        # type: ignore[union-attr]
    well_behaved_round(port, "first", tmp_path)
    with NimbusClient("127.0.0.1", port, timeout=10) as client:
        tid = client.getClusterInfo().topologies[0].id
    with attacker(port) as sock:
        sessions = []
        for seqid in range(1, LIMIT + 1):
            reply = ask(sock, "beginFileDownload", seqid, file=tid)
            assert reply.type == REPLY
            sessions.append(reply.body.success)
        refused = ask(sock, "beginFileDownload", 99, file=tid)
        assert refused.type == EXCEPTION
        assert refused.body.message.startswith(
            f"{ATTACKER} already has {LIMIT} downloads in progress (limit {LIMIT}, "
            "max_downloads_per_peer)")

        well_behaved_round(port, "second", tmp_path)

        # Reading one session to its end gives its slot back.
        seqid = 200
        while True:
            seqid += 1
            chunk = ask(sock, "downloadChunk", seqid, id=sessions[0]).body.success
            if not chunk:
                break
        assert transfers.downloads_of(ATTACKER) == LIMIT - 1
        assert ask(sock, "beginFileDownload", 300, file=tid).type == REPLY
    assert transfers.downloads_of("127.0.0.1") == 0
