"""Uploads and downloads (nimbus_thrift.nimbus.transfers.uploads) over a real Store in tmp_path and
a fake clock: the happy path, hostile locations, limits, expiry, retention and recovery
after a crash."""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.nimbus import FakeClock
from nimbus_thrift.nimbus.transfers import uploads as transfers_module
from nimbus_thrift.nimbus.state.store import Store, TopologyRecord
from nimbus_thrift.nimbus.transfers.uploads import TransferError, Transfers

EXPIRATION = 600.0
RETENTION = 3600.0
MAX_BYTES = 100
CHUNK = 10
SECRET = b"root:x:0:0:secret\n"


class Env:
    def __init__(self, tmp_path: Path):
        self.tmp_path = tmp_path
        self.data_dir = tmp_path / "data"
        self.data_dir.mkdir()
        self.secret = tmp_path / "secret.txt"      # outside the data dir
        self.secret.write_bytes(SECRET)
        self.clock = FakeClock()
        self.store = Store(self.data_dir / "nimbus.sqlite3")
        self.transfers = self.make()

    def make(self) -> Transfers:
        return Transfers(self.store, self.data_dir, max_upload_bytes=MAX_BYTES,
                         expiration_secs=EXPIRATION, retention_secs=RETENTION,
                         chunk_bytes=CHUNK, clock=self.clock)

    def restart(self) -> None:
        """A new Transfers over the same store and files, recovered (a daemon restart)."""
        self.store.close()
        self.store = Store(self.data_dir / "nimbus.sqlite3")
        self.transfers = self.make()
        self.transfers.recover()

    @property
    def inbox(self) -> Path:
        return self.transfers.inbox

    def listing(self) -> dict[str, bytes]:
        """Every file under tmp_path (except the database's), with its content."""
        return {str(p.relative_to(self.tmp_path)): p.read_bytes()
                for p in sorted(self.tmp_path.rglob("*"))
                if p.is_file() and "nimbus.sqlite3" not in p.name}

    def upload(self, data: bytes, chunk: int = 7) -> str:
        location = self.transfers.begin_upload()
        for i in range(0, len(data), chunk):
            self.transfers.upload_chunk(location, data[i:i + chunk])
        self.transfers.finish_upload(location)
        return location

    def id_of(self, location: str) -> str:
        up = self.store.upload_at(location)
        assert up is not None
        return up.id

    def use(self, upload_id: str, name: str = "wc") -> None:
        """A topology that uses the upload (what a submit records)."""
        self.store.insert_topology(TopologyRecord(
            id=f"{name}-1-1", name=name, status="ACTIVE", prev_status=None, owner="",
            submitted_at=self.clock(), num_workers=1, executors={}, tasks={}, conf={},
            topology=b"", code_upload=upload_id, code_sha256="", code_bytes=0))


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path)
    yield e
    e.store.close()


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every path the transfers module passes to open()."""
    paths: list[Path] = []
    real_open = open

    def spy(file: Any, *args: Any, **kwargs: Any) -> Any:
        paths.append(Path(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(transfers_module, "open", spy, raising=False)
    return paths


# --- uploads: the happy path -----------------------------------------------------------

def test_upload_happy_path(env: Env) -> None:
    data = b"PK\x03\x04 some zip bytes " * 3
    location = env.transfers.begin_upload()
    up = env.store.upload_at(location)
    assert up is not None and up.state == "open" and up.bytes == 0
    assert location == str(env.transfers.code_path(up.id))
    assert Path(location).is_absolute() and Path(location).parent == env.inbox
    assert env.transfers.part_path(up.id).read_bytes() == b""
    env.clock.advance(5)
    for i in range(0, len(data), 11):
        env.transfers.upload_chunk(location, data[i:i + 11])
    mid = env.store.upload(up.id)
    assert mid is not None and mid.bytes == len(data) and mid.touched_at == env.clock()
    assert env.transfers.completed(location) is None        # not finished yet
    done = env.transfers.finish_upload(location)
    assert done.state == "complete" and done.bytes == len(data)
    assert done.sha256 == hashlib.sha256(data).hexdigest()
    assert done.completed_at == env.clock()
    assert env.transfers.code_path(up.id).read_bytes() == data
    assert not env.transfers.part_path(up.id).exists()
    assert sorted(p.name for p in env.inbox.iterdir()) == [f"{up.id}.zip"]
    assert env.transfers.completed(location) == done


def test_empty_upload(env: Env) -> None:
    location = env.transfers.begin_upload()
    env.transfers.upload_chunk(location, b"")
    done = env.transfers.finish_upload(location)
    assert done.bytes == 0 and done.sha256 == hashlib.sha256(b"").hexdigest()
    assert Path(location).read_bytes() == b""


def test_finish_twice_is_a_noop(env: Env) -> None:
    location = env.upload(b"abc")
    first = env.transfers.completed(location)
    env.clock.advance(10)
    assert env.transfers.finish_upload(location) == first
    assert env.transfers.completed(location) == first         # completed_at unchanged
    assert Path(location).read_bytes() == b"abc"


def test_chunk_after_finish_refused(env: Env) -> None:
    location = env.upload(b"abc")
    with pytest.raises(TransferError, match="is already finished"):
        env.transfers.upload_chunk(location, b"more")
    assert Path(location).read_bytes() == b"abc"
    assert env.transfers.completed(location).bytes == 3      # type: ignore[union-attr]


def test_locations_are_distinct(env: Env) -> None:
    locations = {env.transfers.begin_upload() for _ in range(20)}
    assert len(locations) == 20


# --- hostile locations ------------------------------------------------------------------

def hostile_locations(env: Env, real: str) -> list[Any]:
    real_path = Path(real)
    return [
        "../../etc/passwd", "/etc/passwd", str(env.secret),
        str(env.data_dir / ".." / "secret.txt"),
        str(env.inbox / "x.zip"),                           # inside, never returned
        str(real_path.with_suffix(".part")),                # the real file, other name
        str(real_path.parent) + "/../" + real_path.parent.name + "/" + real_path.name,
        str(real_path.parent) + "//" + real_path.name,
        str(real_path.parent) + "/./" + real_path.name,
        os.path.relpath(real),
        real + "/", real + "\x00", " " + real, real.upper(),
        real_path.name, real_path.stem,
        str(env.inbox), str(env.data_dir / "nimbus.sqlite3"),
        "", None, 5, 3.5, b"/etc/passwd", real.encode(), [real], {"x": 1}, real_path,
    ]


def test_hostile_locations_refused(env: Env, opened: list[Path]) -> None:
    real = env.transfers.begin_upload()
    env.transfers.upload_chunk(real, b"real")
    (env.inbox / "x.zip").write_bytes(b"planted")
    env.transfers.upload_chunk(real, b"")               # a baseline of what open() sees
    opened.clear()
    before = env.listing()
    rows = env.store.uploads()
    for location in hostile_locations(env, real):
        with pytest.raises(TransferError, match="does not exist"):
            env.transfers.upload_chunk(location, b"EVIL")
        with pytest.raises(TransferError, match="does not exist"):
            env.transfers.finish_upload(location)
        assert env.transfers.completed(location) is None
    assert opened == []                                 # no file was even opened
    assert env.listing() == before
    assert env.secret.read_bytes() == SECRET
    assert env.store.uploads() == rows
    assert not (env.tmp_path / "etc").exists()


def test_hostile_locations_cannot_reach_a_finished_upload(env: Env) -> None:
    real = env.upload(b"code")
    for location in hostile_locations(env, real):
        assert env.transfers.completed(location) is None
    assert env.transfers.completed(real) is not None


def test_unknown_location_refused(env: Env) -> None:
    with pytest.raises(TransferError) as info:
        env.transfers.upload_chunk("/nowhere/abc.zip", b"x")
    # Named by the last part of the location only: refusals carry no paths.
    assert str(info.value) == ("upload location 'abc.zip' does not exist "
                               "(or timed out)")


def test_symlink_planted_in_inbox_is_not_followed(env: Env, opened: list[Path]) -> None:
    # Even a file named like a real upload's is reached only through the database.
    link = env.inbox / "evil.zip"
    link.symlink_to(env.secret)
    with pytest.raises(TransferError):
        env.transfers.upload_chunk(str(link), b"EVIL")
    with pytest.raises(TransferError):
        env.transfers.finish_upload(str(link))
    assert opened == [] and env.secret.read_bytes() == SECRET


# --- size cap ---------------------------------------------------------------------------

def test_size_cap(env: Env) -> None:
    location = env.transfers.begin_upload()
    upload_id = env.id_of(location)
    env.transfers.upload_chunk(location, b"a" * 60)
    env.transfers.upload_chunk(location, b"b" * 40)         # exactly the limit: fine
    with pytest.raises(TransferError) as info:
        env.transfers.upload_chunk(location, b"c")
    assert f"would reach {MAX_BYTES + 1} bytes" in str(info.value)
    assert f"limit of {MAX_BYTES}" in str(info.value) and "discarded" in str(info.value)
    assert env.store.upload(upload_id) is None
    assert list(env.inbox.iterdir()) == []
    with pytest.raises(TransferError, match="does not exist"):
        env.transfers.upload_chunk(location, b"c")
    with pytest.raises(TransferError, match="does not exist"):
        env.transfers.finish_upload(location)


def test_size_cap_on_first_chunk(env: Env) -> None:
    location = env.transfers.begin_upload()
    with pytest.raises(TransferError, match=f"would reach 150 bytes, over the limit of "
                                            f"{MAX_BYTES}"):
        env.transfers.upload_chunk(location, b"x" * 150)
    assert env.store.uploads() == [] and list(env.inbox.iterdir()) == []


def test_exactly_the_limit_finishes(env: Env) -> None:
    location = env.upload(b"z" * MAX_BYTES, chunk=30)
    assert env.transfers.completed(location).bytes == MAX_BYTES  # type: ignore[union-attr]


# --- expiry and retention ---------------------------------------------------------------

def test_idle_upload_expires_active_one_stays(env: Env) -> None:
    idle = env.transfers.begin_upload()
    active = env.transfers.begin_upload()
    idle_id, active_id = env.id_of(idle), env.id_of(active)
    env.transfers.upload_chunk(idle, b"old")
    env.clock.advance(EXPIRATION - 1)
    env.transfers.upload_chunk(active, b"new")
    env.transfers.sweep()
    assert env.store.upload(idle_id) is not None            # 599 s idle: kept
    env.clock.advance(1)
    env.transfers.sweep()
    assert env.store.upload(idle_id) is None                # 600 s idle: gone
    assert not env.transfers.part_path(idle_id).exists()
    with pytest.raises(TransferError, match="does not exist"):
        env.transfers.upload_chunk(idle, b"late")
    assert env.store.upload(active_id) is not None
    env.transfers.upload_chunk(active, b"er")
    env.transfers.finish_upload(active)
    assert Path(active).read_bytes() == b"newer"


def test_complete_uploads_do_not_expire_but_are_retained(env: Env) -> None:
    unused = env.upload(b"unused")
    used = env.upload(b"used")
    env.use(env.id_of(used))
    env.clock.advance(EXPIRATION * 2)
    env.transfers.sweep()
    assert env.transfers.completed(unused) and env.transfers.completed(used)
    env.clock.advance(RETENTION - EXPIRATION * 2 - 1)
    env.transfers.sweep()
    assert env.transfers.completed(unused) is not None       # one second left
    env.clock.advance(1)
    env.transfers.sweep()
    assert env.transfers.completed(unused) is None
    assert not Path(unused).exists()
    assert env.transfers.completed(used) is not None
    assert Path(used).read_bytes() == b"used"
    assert sorted(p.name for p in env.inbox.iterdir()) == [Path(used).name]


def test_open_uploads_are_not_counted_for_retention(env: Env) -> None:
    location = env.transfers.begin_upload()
    for _ in range(int(RETENTION // (EXPIRATION / 2)) + 2):
        env.clock.advance(EXPIRATION / 2)
        env.transfers.upload_chunk(location, b"x")
        env.transfers.sweep()
    assert env.store.upload_at(location) is not None


# --- downloads --------------------------------------------------------------------------

def test_download_in_chunks_then_session_gone(env: Env) -> None:
    data = bytes(range(25))
    up = env.transfers.completed(env.upload(data))
    assert up is not None
    session = env.transfers.begin_download(up)
    chunks = []
    while True:
        chunk = env.transfers.download_chunk(session)
        if chunk == b"":
            break
        chunks.append(chunk)
    assert [len(c) for c in chunks] == [CHUNK, CHUNK, 5]
    assert b"".join(chunks) == data
    with pytest.raises(TransferError, match="does not exist"):
        env.transfers.download_chunk(session)


def test_download_of_empty_file(env: Env) -> None:
    up = env.transfers.completed(env.upload(b""))
    assert up is not None
    session = env.transfers.begin_download(up)
    assert env.transfers.download_chunk(session) == b""
    with pytest.raises(TransferError):
        env.transfers.download_chunk(session)


def test_two_downloads_are_independent(env: Env) -> None:
    up = env.transfers.completed(env.upload(b"0123456789abcdef"))
    assert up is not None
    a, b = env.transfers.begin_download(up), env.transfers.begin_download(up)
    assert a != b
    assert env.transfers.download_chunk(a) == b"0123456789"
    assert env.transfers.download_chunk(b) == b"0123456789"
    assert env.transfers.download_chunk(a) == b"abcdef"


@pytest.mark.parametrize("session", ["nope", "", None, 7, b"x", "../../etc/passwd"])
def test_unknown_download_session_refused(env: Env, session: Any) -> None:
    with pytest.raises(TransferError, match="does not exist"):
        env.transfers.download_chunk(session)


def test_idle_download_expires(env: Env) -> None:
    up = env.transfers.completed(env.upload(b"x" * 30))
    assert up is not None
    idle = env.transfers.begin_download(up)
    active = env.transfers.begin_download(up)
    env.clock.advance(EXPIRATION - 1)
    env.transfers.download_chunk(active)
    env.clock.advance(1)
    env.transfers.sweep()
    with pytest.raises(TransferError, match="does not exist"):
        env.transfers.download_chunk(idle)
    assert env.transfers.download_chunk(active) == b"x" * CHUNK


def test_download_of_vanished_file(env: Env) -> None:
    up = env.transfers.completed(env.upload(b"x" * 30))
    assert up is not None
    session = env.transfers.begin_download(up)
    env.transfers.code_path(up.id).unlink()
    with pytest.raises(TransferError, match="the file is gone"):
        env.transfers.download_chunk(session)
    with pytest.raises(TransferError, match="does not exist"):
        env.transfers.download_chunk(session)


# --- limits -----------------------------------------------------------------------------

def test_open_upload_limit(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transfers_module, "MAX_OPEN_UPLOADS", 2)
    first = env.transfers.begin_upload()
    env.transfers.begin_upload()
    with pytest.raises(TransferError, match="2 uploads are already open \\(limit 2\\)"):
        env.transfers.begin_upload()
    assert len(list(env.inbox.iterdir())) == 2               # no file for the refused one
    env.transfers.finish_upload(first)                       # complete ones do not count
    env.transfers.begin_upload()


def test_download_limit(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transfers_module, "MAX_DOWNLOADS", 2)
    up = env.transfers.completed(env.upload(b""))
    assert up is not None
    first = env.transfers.begin_download(up)
    env.transfers.begin_download(up)
    with pytest.raises(TransferError, match="2 downloads are already open \\(limit 2\\)"):
        env.transfers.begin_download(up)
    assert env.transfers.download_chunk(first) == b""         # finished: slot freed
    env.transfers.begin_download(up)


# --- recover ----------------------------------------------------------------------------

def test_recover_trims_unacknowledged_tail(env: Env) -> None:
    location = env.transfers.begin_upload()
    upload_id = env.id_of(location)
    env.transfers.upload_chunk(location, b"abc")
    with open(env.transfers.part_path(upload_id), "ab") as f:
        f.write(b"XYZ never acknowledged")
    env.clock.advance(EXPIRATION - 1)
    env.restart()
    up = env.store.upload(upload_id)
    assert up is not None and up.state == "open" and up.bytes == 3
    assert up.touched_at == env.clock()                     # a fresh expiry
    assert env.transfers.part_path(upload_id).read_bytes() == b"abc"
    env.clock.advance(EXPIRATION - 1)
    env.transfers.sweep()
    env.transfers.upload_chunk(location, b"def")
    done = env.transfers.finish_upload(location)
    assert Path(location).read_bytes() == b"abcdef"
    assert done.sha256 == hashlib.sha256(b"abcdef").hexdigest()


def test_recover_keeps_an_intact_open_upload(env: Env) -> None:
    location = env.transfers.begin_upload()
    env.transfers.upload_chunk(location, b"abc")
    env.restart()
    env.transfers.upload_chunk(location, b"d")
    env.transfers.finish_upload(location)
    assert Path(location).read_bytes() == b"abcd"


def test_recover_drops_upload_shorter_than_acknowledged(env: Env) -> None:
    location = env.transfers.begin_upload()
    upload_id = env.id_of(location)
    env.transfers.upload_chunk(location, b"abcdef")
    with open(env.transfers.part_path(upload_id), "r+b") as f:
        f.truncate(3)
    env.restart()
    assert env.store.upload(upload_id) is None
    assert list(env.inbox.iterdir()) == []
    with pytest.raises(TransferError, match="does not exist"):
        env.transfers.upload_chunk(location, b"g")


def test_recover_drops_open_upload_without_file(env: Env) -> None:
    location = env.transfers.begin_upload()
    upload_id = env.id_of(location)
    env.transfers.part_path(upload_id).unlink()
    env.restart()
    assert env.store.upload(upload_id) is None


def test_recover_after_crash_inside_finish(env: Env) -> None:
    location = env.transfers.begin_upload()
    upload_id = env.id_of(location)
    env.transfers.upload_chunk(location, b"abc")
    # finish renamed the file, then the process died before the row said complete.
    os.replace(env.transfers.part_path(upload_id), env.transfers.code_path(upload_id))
    env.restart()
    up = env.store.upload(upload_id)
    assert up is not None and up.state == "open" and up.bytes == 3
    assert env.transfers.part_path(upload_id).read_bytes() == b"abc"
    assert not env.transfers.code_path(upload_id).exists()
    assert env.transfers.completed(location) is None
    done = env.transfers.finish_upload(location)
    assert done.state == "complete" and done.sha256 == hashlib.sha256(b"abc").hexdigest()
    assert Path(location).read_bytes() == b"abc"


def test_recover_drops_complete_upload_with_missing_file_if_unused(env: Env) -> None:
    unused, used = env.upload(b"unused"), env.upload(b"used")
    env.use(env.id_of(used))
    Path(unused).unlink()
    Path(used).unlink()
    env.restart()
    assert env.store.upload_at(unused) is None
    assert env.store.upload_at(used) is not None             # a topology still names it


def test_recover_drops_complete_upload_with_wrong_size(env: Env) -> None:
    location = env.upload(b"abcdef")
    Path(location).write_bytes(b"abc")
    env.restart()
    assert env.store.upload_at(location) is None
    assert not Path(location).exists()


def test_recover_keeps_damaged_upload_in_use_with_its_file(env: Env) -> None:
    # The row is kept because a topology names it; its file must not then be swept
    # away as an unclaimed leftover.
    location = env.upload(b"abcdef")
    env.use(env.id_of(location))
    Path(location).write_bytes(b"abc")
    env.restart()
    assert env.store.upload_at(location) is not None
    assert Path(location).read_bytes() == b"abc"


def test_recover_keeps_intact_complete_upload(env: Env) -> None:
    location = env.upload(b"abcdef")
    before = env.transfers.completed(location)
    env.restart()
    assert env.transfers.completed(location) == before
    assert Path(location).read_bytes() == b"abcdef"


def test_recover_removes_unclaimed_leftovers(env: Env) -> None:
    keep_open = env.transfers.begin_upload()
    env.transfers.upload_chunk(keep_open, b"open")
    keep_done = env.upload(b"done")
    stray_id = "0123456789abcdef0123456789abcdef"
    for name in ("junk.tmp", f"{stray_id}.zip", f"{stray_id}.part", ".hidden"):
        (env.inbox / name).write_bytes(b"leftover")
    (env.inbox / "dangling.zip").symlink_to(env.secret)
    (env.inbox / "subdir").mkdir()
    (env.inbox / "subdir" / "inner").write_bytes(b"x")
    env.restart()
    names = sorted(p.name for p in env.inbox.iterdir())
    assert names == sorted([Path(keep_open).with_suffix(".part").name, Path(keep_done).name,
                            "subdir"])
    assert env.secret.read_bytes() == SECRET                # the link, not its target
    assert (env.inbox / "subdir" / "inner").exists()        # directories are left alone


def test_recover_is_idempotent(env: Env) -> None:
    location = env.transfers.begin_upload()
    env.transfers.upload_chunk(location, b"abc")
    done = env.upload(b"done")
    env.restart()
    first = (env.store.uploads(), env.listing())
    env.restart()
    second = (env.store.uploads(), env.listing())
    assert [dataclasses.replace(u, touched_at=0) for u in first[0]] == \
        [dataclasses.replace(u, touched_at=0) for u in second[0]]
    assert first[1] == second[1]
    assert env.transfers.completed(done) is not None


def test_write_failure_is_a_transfer_error_and_stores_nothing(env: Env) -> None:
    location = env.transfers.begin_upload()
    env.transfers.upload_chunk(location, b"abc")
    upload_id = env.store.upload_at(location).id          # type: ignore[union-attr]
    env.transfers.part_path(upload_id).unlink()           # removed behind the daemon's back
    with pytest.raises(TransferError, match="cannot write the chunk .*not stored"):
        env.transfers.upload_chunk(location, b"def")
    assert env.store.upload(upload_id).bytes == 3         # type: ignore[union-attr]
    with pytest.raises(TransferError, match="cannot be finished"):
        env.transfers.finish_upload(location)
    assert env.store.upload(upload_id).state == "open"    # type: ignore[union-attr]


# --- durability: what a crash or a torn write must not lose --------------------------

def test_finish_fsyncs_the_file_before_the_rename_and_the_directory_after(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import stat
    env = Env(tmp_path)
    location = env.transfers.begin_upload()
    env.transfers.upload_chunk(location, b"0123456789")
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append("fsync dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync file")
        real_fsync(fd)

    def replace(src: Any, dst: Any) -> None:
        events.append("rename")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)       # partfiles.py makes these calls
    monkeypatch.setattr(os, "replace", replace)
    env.transfers.finish_upload(location)
    assert events == ["fsync file", "rename", "fsync dir"]


def test_a_chunk_after_a_torn_write_goes_at_the_acknowledged_size(tmp_path: Path) -> None:
    # A write that failed part-way (or a crash before the row grew) leaves bytes past
    # the acknowledged size; the next chunk overwrites them, it does not follow them.
    env = Env(tmp_path)
    location = env.transfers.begin_upload()
    env.transfers.upload_chunk(location, b"aaaa")
    with open(env.transfers.part_path(env.id_of(location)), "ab") as f:
        f.write(b"XX")
    env.transfers.upload_chunk(location, b"bbbb")
    done = env.transfers.finish_upload(location)
    assert env.transfers.code_path(done.id).read_bytes() == b"aaaabbbb"
    assert done.sha256 == hashlib.sha256(b"aaaabbbb").hexdigest()
