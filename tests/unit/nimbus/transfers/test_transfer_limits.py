"""The limits of uploads and downloads (nimbus_thrift.nimbus.transfers.uploads): per-peer slots,
the inbox's byte quota and the free-disk reserve, over a real Store in tmp_path, a fake
clock and a fake disk. Every test that takes a slot or bytes ends on one way of giving
them back (finish, expiry, discard, read to the end, file gone, retention) and checks
they came back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.nimbus import FakeClock
from nimbus_thrift.nimbus.transfers import uploads as transfers_module
from nimbus_thrift.nimbus.config import load_config
from nimbus_thrift.nimbus.settings import (DEFAULT_MAX_DOWNLOADS_PER_PEER,
                                           DEFAULT_MAX_UPLOADS_PER_PEER)
from nimbus_thrift.nimbus.state.store import Store, TopologyRecord
from nimbus_thrift.nimbus.transfers.uploads import (TransferError, TransferLimits, TransferRefused,
                                            Transfers, current_peer, peer_address)
from nimbus_thrift.rpc.context import REQUEST
from nimbus_thrift.rpc.throttle import RateLimitedLog

EXPIRATION = 600.0
RETENTION = 3600.0
MAX_BYTES = 100
ATTACKER, CLIENT = "127.0.0.2", "127.0.0.1"


class FakeLogger:
    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def warning(self, event: str, **fields: Any) -> None:
        self.lines.append((event, fields))


class Env:
    def __init__(self, tmp_path: Path, limits: TransferLimits):
        self.data_dir = tmp_path / "data"
        self.data_dir.mkdir()
        self.clock = FakeClock()
        self.free = 10 << 30                       # the fake disk's free bytes
        self.store = Store(self.data_dir / "nimbus.sqlite3")
        self.logger = FakeLogger()
        self.limits = limits
        self.transfers = self.make()

    def make(self) -> Transfers:
        t = Transfers(self.store, self.data_dir, max_upload_bytes=MAX_BYTES,
                      expiration_secs=EXPIRATION, retention_secs=RETENTION, chunk_bytes=10,
                      clock=self.clock, limits=self.limits, free_bytes=lambda _: self.free)
        t._refusals = RateLimitedLog(self.logger, 10.0, clock=self.clock)
        return t

    def upload(self, data: bytes, peer: str = CLIENT) -> str:
        location = self.transfers.begin_upload(peer)
        if data:
            self.transfers.upload_chunk(location, data)
        self.transfers.finish_upload(location)
        return location

    def id_of(self, location: str) -> str:
        up = self.store.upload_at(location)
        assert up is not None
        return up.id

    def part_size(self, location: str) -> int:
        return self.transfers.part_path(self.id_of(location)).stat().st_size


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path, TransferLimits(max_uploads_per_peer=2, max_downloads_per_peer=2,
                                     max_inbox_bytes=150, min_free_disk_bytes=1000))
    yield e
    e.store.close()


# --- peers ------------------------------------------------------------------------------

@pytest.mark.parametrize("peer,address", [("127.0.0.2:51234", "127.0.0.2"),
                                          ("[::1]:5123", "::1"), ("unix", "unix"),
                                          ("unix:alice (pid 42)", "unix:alice"),
                                          ("[fe80::1%eth0]:9", "fe80::1%eth0")])
def test_peer_address(peer: str, address: str) -> None:
    assert peer_address(peer) == address


def test_the_peer_is_read_from_the_request_being_processed(env: Env) -> None:
    assert current_peer() is None
    token = REQUEST.set(("127.0.0.2:40000", "beginFileUpload", 1, None))
    try:
        assert current_peer() == ATTACKER
        env.transfers.begin_upload()
        env.transfers.begin_upload()
        with pytest.raises(TransferRefused, match="127.0.0.2 already has 2 uploads"):
            env.transfers.begin_upload()
    finally:
        REQUEST.reset(token)
    assert env.transfers.uploads_of(ATTACKER) == 2
    env.transfers.begin_upload()          # no request (recovery, tests): not per peer


def test_limits_from_the_configuration(tmp_path: Path) -> None:
    config = load_config(env={}, flags={"data_dir": str(tmp_path), "max_uploads_per_peer": 3,
                                        "max_inbox_bytes": 1234, "min_free_disk_bytes": 0})
    assert TransferLimits.of(config) == TransferLimits(
        max_uploads_per_peer=3, max_downloads_per_peer=DEFAULT_MAX_DOWNLOADS_PER_PEER,
        max_inbox_bytes=1234, min_free_disk_bytes=0)
    assert TransferLimits().max_uploads_per_peer == DEFAULT_MAX_UPLOADS_PER_PEER


# --- uploads per peer -------------------------------------------------------------------

def fill_attacker_uploads(env: Env) -> list[str]:
    held = [env.transfers.begin_upload(ATTACKER) for _ in range(2)]
    with pytest.raises(TransferRefused) as info:
        env.transfers.begin_upload(ATTACKER)
    assert str(info.value) == (
        "127.0.0.2 already has 2 uploads in progress (limit 2, max_uploads_per_peer); "
        "finish them or wait 600 s for them to expire")
    # The refused call made nothing: no file, no row.
    assert len(list(env.transfers.inbox.iterdir())) == 2 == len(env.store.uploads())
    # Another address is not affected.
    env.upload(b"code", CLIENT)
    assert env.transfers.uploads_of(ATTACKER) == 2 and env.transfers.uploads_of(CLIENT) == 0
    return held


def test_upload_slot_comes_back_after_finish(env: Env) -> None:
    held = fill_attacker_uploads(env)
    env.transfers.finish_upload(held[0])
    assert env.transfers.uploads_of(ATTACKER) == 1
    env.transfers.finish_upload(held[0])                 # a retried finish: still 1
    assert env.transfers.uploads_of(ATTACKER) == 1
    env.transfers.begin_upload(ATTACKER)


def test_upload_slot_comes_back_after_expiry(env: Env) -> None:
    fill_attacker_uploads(env)
    env.clock.advance(EXPIRATION)
    env.transfers.sweep()
    assert env.transfers.uploads_of(ATTACKER) == 0
    env.transfers.begin_upload(ATTACKER)
    env.transfers.begin_upload(ATTACKER)


def test_upload_slot_comes_back_after_discard_over_max_upload_bytes(env: Env) -> None:
    held = fill_attacker_uploads(env)
    with pytest.raises(TransferError, match="the upload was discarded"):
        env.transfers.upload_chunk(held[0], b"x" * (MAX_BYTES + 1))
    assert env.transfers.uploads_of(ATTACKER) == 1
    env.transfers.begin_upload(ATTACKER)


def test_a_failed_begin_gives_its_slot_back(env: Env, monkeypatch: pytest.MonkeyPatch
                                            ) -> None:
    def broken(up: Any) -> None:
        raise OSError("database is locked")
    monkeypatch.setattr(env.store, "insert_upload", broken)
    with pytest.raises(OSError):
        env.transfers.begin_upload(ATTACKER)
    assert env.transfers.uploads_of(ATTACKER) == 0


# --- downloads per peer -----------------------------------------------------------------

def fill_attacker_downloads(env: Env) -> tuple[Any, list[str]]:
    up = env.transfers.completed(env.upload(b"0123456789abc"))
    assert up is not None
    held = [env.transfers.begin_download(up, ATTACKER) for _ in range(2)]
    with pytest.raises(TransferRefused) as info:
        env.transfers.begin_download(up, ATTACKER)
    assert str(info.value).startswith("127.0.0.2 already has 2 downloads in progress "
                                      "(limit 2, max_downloads_per_peer)")
    session = env.transfers.begin_download(up, CLIENT)
    assert env.transfers.download_chunk(session) == b"0123456789"
    assert env.transfers.downloads_of(ATTACKER) == 2
    return up, held


def test_download_slot_comes_back_after_the_last_chunk(env: Env) -> None:
    up, held = fill_attacker_downloads(env)
    while env.transfers.download_chunk(held[0]):
        pass
    assert env.transfers.downloads_of(ATTACKER) == 1
    env.transfers.begin_download(up, ATTACKER)


def test_download_slot_comes_back_after_expiry(env: Env) -> None:
    up, _ = fill_attacker_downloads(env)
    env.clock.advance(EXPIRATION)
    env.transfers.sweep()
    assert env.transfers.downloads_of(ATTACKER) == 0 == env.transfers.downloads_of(CLIENT)
    env.transfers.begin_download(up, ATTACKER)


def test_download_slot_comes_back_when_the_file_is_gone(env: Env) -> None:
    up, held = fill_attacker_downloads(env)
    env.transfers.code_path(up.id).unlink()
    with pytest.raises(TransferError, match="the file is gone"):
        env.transfers.download_chunk(held[0])
    assert env.transfers.downloads_of(ATTACKER) == 1


# --- the inbox's bytes ------------------------------------------------------------------

def test_inbox_counts_open_and_complete_uploads(env: Env) -> None:
    env.upload(b"a" * 60)                                    # complete: 60
    location = env.transfers.begin_upload(CLIENT)
    env.transfers.upload_chunk(location, b"b" * 80)          # open: 80
    assert env.transfers.inbox_bytes == 140
    with pytest.raises(TransferRefused) as info:
        env.transfers.upload_chunk(location, b"c" * 11)
    assert str(info.value) == (
        f"upload {location.rsplit('/', 1)[-1]!r}: a chunk of 11 bytes would bring the inbox "
        "from 140 to 151 bytes, over the limit of 150 (max_inbox_bytes); the chunk was not "
        "stored, the upload stays open until it expires")
    # Nothing of the refused chunk was stored or stays counted; the upload goes on.
    assert env.part_size(location) == 80 and env.store.upload_at(location).bytes == 80
    assert env.transfers.inbox_bytes == 140
    env.transfers.upload_chunk(location, b"c" * 10)          # exactly the limit
    env.transfers.finish_upload(location)
    assert env.transfers.inbox_bytes == 150
    with pytest.raises(TransferRefused, match="the inbox holds 150 bytes of uploads "
                                              r"\(limit 150, max_inbox_bytes\)"):
        env.transfers.begin_upload(ATTACKER)


def test_inbox_bytes_come_back_after_expiry(env: Env) -> None:
    location = env.transfers.begin_upload(ATTACKER)
    env.transfers.upload_chunk(location, b"x" * 100)
    assert env.transfers.inbox_bytes == 100
    env.clock.advance(EXPIRATION)
    env.transfers.sweep()
    assert env.transfers.inbox_bytes == 0
    env.upload(b"y" * 100)


def test_inbox_bytes_come_back_after_discard(env: Env) -> None:
    location = env.transfers.begin_upload(ATTACKER)
    env.transfers.upload_chunk(location, b"x" * 90)
    with pytest.raises(TransferError, match="discarded"):
        env.transfers.upload_chunk(location, b"x" * 20)      # over max_upload_bytes
    assert env.transfers.inbox_bytes == 0


def test_inbox_bytes_come_back_after_retention(env: Env) -> None:
    env.upload(b"x" * 100)
    env.clock.advance(RETENTION)
    env.transfers.sweep()
    assert env.transfers.inbox_bytes == 0


def test_inbox_bytes_of_a_topology_s_code_stay_counted(env: Env) -> None:
    location = env.upload(b"x" * 100)
    env.store.insert_topology(TopologyRecord(
        id="wc-1-1", name="wc", status="ACTIVE", prev_status=None, owner="",
        submitted_at=env.clock(), num_workers=1, executors={}, tasks={}, conf={},
        topology=b"", code_upload=env.id_of(location), code_sha256="", code_bytes=100))
    env.clock.advance(RETENTION)
    env.transfers.sweep()
    assert env.transfers.inbox_bytes == 100


def test_a_failed_write_gives_its_reservation_back(env: Env) -> None:
    location = env.transfers.begin_upload(CLIENT)
    env.transfers.part_path(env.id_of(location)).unlink()
    env.transfers.part_path(env.id_of(location)).mkdir()     # open() fails: a directory
    with pytest.raises(TransferError, match="cannot write the chunk"):
        env.transfers.upload_chunk(location, b"x" * 50)
    assert env.transfers.inbox_bytes == 0


def test_inbox_bytes_recounted_at_recovery(env: Env) -> None:
    env.upload(b"x" * 40)
    location = env.transfers.begin_upload(CLIENT)
    env.transfers.upload_chunk(location, b"y" * 30)
    env.transfers.part_path(env.id_of(location)).write_bytes(b"y" * 30 + b"tail")
    env.transfers = env.make()
    assert env.transfers.inbox_bytes == 70                   # counted from the rows
    env.transfers.recover()
    assert env.transfers.inbox_bytes == 70


def test_finish_refused_when_the_limit_was_lowered_below_what_is_stored(env: Env) -> None:
    location = env.transfers.begin_upload(CLIENT)
    env.transfers.upload_chunk(location, b"x" * 100)
    env.transfers.limits = TransferLimits(max_inbox_bytes=99, min_free_disk_bytes=0)
    with pytest.raises(TransferRefused, match="cannot be finished: the inbox holds 100 "
                                              r"bytes, over the limit of 99 \(max_inbox"):
        env.transfers.finish_upload(location)
    assert env.store.upload_at(location).state == "open"
    env.transfers.limits = TransferLimits(max_inbox_bytes=100, min_free_disk_bytes=0)
    env.transfers.finish_upload(location)


# --- free disk --------------------------------------------------------------------------

def test_chunk_refused_when_it_would_leave_less_than_the_reserve(env: Env) -> None:
    location = env.transfers.begin_upload(CLIENT)
    env.free = 1050
    env.transfers.upload_chunk(location, b"x" * 50)          # leaves exactly 1000
    env.free = 1049
    with pytest.raises(TransferRefused) as info:
        env.transfers.upload_chunk(location, b"y" * 50)
    assert str(info.value) == (
        f"upload {location.rsplit('/', 1)[-1]!r}: the inbox's disk has 1049 bytes free; a "
        "chunk of 50 bytes would leave less than the 1000 bytes kept free "
        "(min_free_disk_bytes); the chunk was not stored")
    assert env.part_size(location) == 50 and env.transfers.inbox_bytes == 50
    env.free = 10 << 30
    env.transfers.upload_chunk(location, b"y" * 50)
    env.transfers.finish_upload(location)
    assert Path(location).read_bytes() == b"x" * 50 + b"y" * 50


def test_real_disk_usage_is_read(tmp_path: Path) -> None:
    assert transfers_module._free_bytes(tmp_path) > 0


# --- refusals are logged, rate-limited --------------------------------------------------

def test_refusals_logged_once_per_peer_per_interval_with_a_count(env: Env) -> None:
    fill_attacker_uploads(env)
    for _ in range(50):
        with pytest.raises(TransferRefused):
            env.transfers.begin_upload(ATTACKER)
    lines = [f for e, f in env.logger.lines if e == "transfer_refused"]
    assert len(lines) == 1
    assert lines[0]["client"] == ATTACKER and lines[0]["limit"] == "max_uploads_per_peer"
    assert "suppressed" not in lines[0]
    env.clock.advance(10)
    with pytest.raises(TransferRefused):
        env.transfers.begin_upload(ATTACKER)
    lines = [f for e, f in env.logger.lines if e == "transfer_refused"]
    assert len(lines) == 2 and lines[1]["suppressed"] == 50      # the 50 after the first
