"""What the daemon reads of a work directory is untrusted input (issue 24): the topology
writes status.json, its logs and, since it owns the directory, anything else there
(nimbus_thrift.runner.rundir's readers). Bytes: hostile status and settings files parse
to an error, never to a value of the wrong type. Fake directories: links, FIFOs,
directories, hard links and 100 MB files are refused or read only to their limit, and
the monitor's reads come back with "no status" and one log line."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from nimbus_thrift.nimbus.config import load_config
from nimbus_thrift.nimbus.service.logs import settings_of
from nimbus_thrift.nimbus.spark import status as spark_status
from nimbus_thrift.nimbus.spark.records import Run
from nimbus_thrift.runner import rundir
from nimbus_thrift.runner.rundir import (MAX_CONTROL_BYTES, MAX_SETTINGS_BYTES,
                                         MAX_STATUS_BYTES, MAX_STATUS_ERROR_CHARS, RunDir,
                                         RunSettings, RunState, UntrustedFile,
                                         read_untrusted, read_untrusted_tail)

RUNDIR_LOGGER = "nimbus_thrift.runner.rundir"
BIG = 100 << 20

GOOD_STATUS: dict[str, Any] = {
    "state": "running", "pid": 4242, "updated_at": 1700000000.5, "started_at": 1700000000,
    "app_id": "local-1", "ui_url": "http://127.0.0.1:4040", "batch_id": 3,
    "batch_ms": 50.0, "error": "", "error_component": "",
    "components": {"split": {"emitted": 10, "processed": 9, "rate": 2.5,
                             "latency_ms": 1, "busy_ms": 0.5}}}


def status_with(**changes: Any) -> bytes:
    return json.dumps({**GOOD_STATUS, **changes}).encode()


def figures_with(**changes: Any) -> bytes:
    return status_with(components={"split": {**GOOD_STATUS["components"]["split"],
                                             **changes}})


# --- bytes: status.json ------------------------------------------------------------------

def test_a_status_as_the_driver_writes_it_parses() -> None:
    state = RunState.from_json(status_with())
    assert state.state == "running" and state.pid == 4242 and state.batch_id == 3
    assert state.started_at == 1700000000.0 and isinstance(state.started_at, float)
    assert state.components["split"].processed == 9
    # A newer runner's keys are left out; missing optional ones default.
    assert RunState.from_json(status_with(newer=1)).state == "running"
    minimal = b'{"state": "warming", "pid": 1, "updated_at": 0, "started_at": 0}'
    assert RunState.from_json(minimal).components == {}
    # What the driver writes reads back the same.
    assert RunState.from_json(state.to_json()) == state


@pytest.mark.parametrize("data", [
    b"", b"{", b"\xff\xfe", b"null", b"[]", b'"running"', b"7",
    b'{"state": "running"}',                                    # required fields missing
    status_with(state=5), status_with(state="pwned"), status_with(state=None),
    status_with(pid="4242"), status_with(pid=True), status_with(pid=1.5),
    status_with(updated_at="now"), status_with(batch_id=[]), status_with(batch_ms={}),
    status_with(app_id=7), status_with(error=["x"]), status_with(error_component=1),
    status_with(components=[]), status_with(components="split"),
    status_with(components={"split": "10"}), status_with(components={"split": None}),
    figures_with(emitted="10"), figures_with(processed=1.5), figures_with(rate="fast"),
    figures_with(latency_ms=True), figures_with(busy_ms=[1]),
    status_with(error="x" * (MAX_STATUS_ERROR_CHARS + 1)),
    status_with(ui_url="javascript:alert(document.cookie)"),
    status_with(ui_url="data:text/html,<script>alert(1)</script>"),
    status_with(ui_url="//evil.example/"), status_with(ui_url="http://"),
    status_with(ui_url=" http://127.0.0.1:4040"), status_with(ui_url="http://a\nb"),
    status_with(ui_url="http://" + "a" * 3000),
    # Python's json takes these; our writers never write them, and int() of one raises.
    status_with(updated_at=1).replace(b'"updated_at": 1', b'"updated_at": NaN'),
    status_with(batch_ms=1).replace(b'"batch_ms": 1', b'"batch_ms": Infinity'),
    status_with(started_at=1).replace(b'"started_at": 1', b'"started_at": 1e400'),
    status_with(pid=1).replace(b'"pid": 1', b'"pid": ' + b"9" * 5000),
])
def test_a_status_of_the_wrong_shape_is_a_value_error(data: bytes) -> None:
    with pytest.raises(ValueError):
        RunState.from_json(data)


# --- bytes: settings.json ----------------------------------------------------------------

def test_settings_as_the_daemon_writes_them_parse() -> None:
    text = (b'{"loggers": {"ROOT": {"level": "DEBUG", "reset_at": 5, "reset_level": '
            b'"INFO", "timeout_secs": 30}, "a.b": {"level": "WARN"}}, "sampling": '
            b'{"": {"enable": true, "percent": 10}}}')
    settings = RunSettings.from_json(text)
    assert settings.loggers["ROOT"].reset_at == 5.0 and settings.loggers["a.b"].level == "WARN"
    assert settings.sample_percent("split") == 10.0
    assert RunSettings.from_json(settings.to_json()) == settings
    assert RunSettings.from_json(b"{}") == RunSettings()


@pytest.mark.parametrize("data", [
    b"[]", b"{", b'{"loggers": []}', b'{"loggers": {"ROOT": "DEBUG"}}',
    b'{"loggers": {"ROOT": {}}}', b'{"loggers": {"ROOT": {"level": 10}}}',
    b'{"loggers": {"ROOT": {"level": "DEBUG", "reset_at": "soon"}}}',
    b'{"loggers": {"ROOT": {"level": "DEBUG", "timeout_secs": 1.5}}}',
    b'{"loggers": {"ROOT": {"level": "DEBUG", "reset_at": NaN}}}',
    b'{"sampling": {"": {"enable": "yes"}}}', b'{"sampling": {"": {"percent": "50"}}}',
    b'{"sampling": [1]}', b'{"sampling": {"split": {"bogus": 1}}}',
    b'{"loggers": {"ROOT": {"level": "DEBUG", "owner": "x"}}}',
])
def test_settings_of_the_wrong_shape_are_a_value_error(data: bytes) -> None:
    with pytest.raises(ValueError):
        RunSettings.from_json(data)


# --- the reader, on a fake work directory ------------------------------------------------

@pytest.fixture
def work(tmp_path: Path) -> RunDir:
    rd = RunDir(tmp_path / "t-1-1")
    rd.root.mkdir()
    return rd


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A file only the daemon may read (as /etc/shadow or its TLS key), holding a valid
    status, so that a reader that followed a link to it would return something."""
    path = tmp_path / "daemon.key"
    path.write_bytes(status_with(error="the daemon's secret"))
    path.chmod(0o600)
    return path


def bounded(call: Callable[[], Any], fifo: Path) -> Any:
    """``call()`` on a thread; fails (and unblocks it) if it has not returned in 5 s: a
    reader that opened the FIFO without O_NONBLOCK waits for a writer forever."""
    out: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            out.append((True, call()))
        except Exception as exc:  # noqa: BLE001 - raised again on the test's thread
            out.append((False, exc))
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(5)
    if thread.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))   # let it go
        thread.join(5)
        pytest.fail(f"reading {fifo.name} blocked on the FIFO")
    [(returned, value)] = out
    if not returned:
        raise value
    return value


def test_a_regular_file_within_its_limit_is_read(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    assert read_untrusted(path, 100) == b"x" * 100
    assert read_untrusted_tail(path, 10) == b"x" * 10
    with pytest.raises(FileNotFoundError):
        read_untrusted(tmp_path / "missing", 100)


def test_a_symlink_is_refused_not_followed(work: RunDir, secret: Path,
                                          caplog: pytest.LogCaptureFixture) -> None:
    work.status.symlink_to(secret)
    with pytest.raises(UntrustedFile, match="symbolic link"):
        read_untrusted(work.status, MAX_STATUS_BYTES)
    with pytest.raises(UntrustedFile, match="symbolic link"):
        read_untrusted_tail(work.status, 100)
    with caplog.at_level(logging.WARNING, RUNDIR_LOGGER):
        assert work.read_status() is None
    assert any(str(work.status) in r.getMessage() for r in caplog.records)
    for name, target in (("settings.json", secret), ("control", secret)):
        (work.root / name).symlink_to(target)
    with pytest.raises(UntrustedFile):
        work.read_settings()
    assert work.control_state() == "active"
    work.handoff.symlink_to(secret)
    assert work.read_handoff() is None


def test_a_link_on_the_way_is_refused_below_the_work_dir(work: RunDir, tmp_path: Path
                                                         ) -> None:
    elsewhere = tmp_path / "etc"
    elsewhere.mkdir()
    (elsewhere / "stderr").write_bytes(b"RuntimeError: the daemon's file\n")
    work.logs.symlink_to(elsewhere)         # logs/ replaced by a link to a directory
    stderr = work.logs / "stderr"
    with pytest.raises(UntrustedFile, match="'logs', which is not a directory"):
        read_untrusted_tail(stderr, 100, below=work.root)
    assert spark_status.launch_stderr(stderr, work.root) == []
    assert spark_status.last_stderr_line(stderr, work.root) == ""


def test_a_fifo_is_refused_without_blocking(work: RunDir) -> None:
    for path in (work.status, work.control, work.settings):
        os.mkfifo(path)
    work.logs.mkdir()
    stderr = work.logs / "stderr"
    os.mkfifo(stderr)
    assert bounded(work.read_status, work.status) is None
    assert bounded(work.control_state, work.control) == "active"
    with pytest.raises(UntrustedFile, match="not a regular file"):
        bounded(work.read_settings, work.settings)
    assert bounded(lambda: spark_status.launch_stderr(stderr, work.root), stderr) == []


def test_a_directory_or_a_hard_link_is_refused(work: RunDir, secret: Path) -> None:
    work.status.mkdir()
    assert work.read_status() is None
    with pytest.raises(UntrustedFile, match="not a regular file"):
        read_untrusted(work.status, MAX_STATUS_BYTES)
    os.link(secret, work.settings)          # a second name of a file it may not read
    with pytest.raises(UntrustedFile, match="2 names"):
        work.read_settings()


def test_a_100_mb_file_is_refused_without_being_read(work: RunDir,
                                                     monkeypatch: pytest.MonkeyPatch
                                                     ) -> None:
    read = _count_reads(monkeypatch)
    for path in (work.status, work.settings, work.control):
        with open(path, "wb") as f:
            f.truncate(BIG)                 # sparse: 100 MB to read, none on disk
    started = time.monotonic()
    assert work.read_status() is None
    assert work.control_state() == "active"
    with pytest.raises(UntrustedFile, match=f"over the limit of {MAX_SETTINGS_BYTES}"):
        work.read_settings()
    with pytest.raises(UntrustedFile) as info:
        read_untrusted(work.status, MAX_STATUS_BYTES)
    assert info.value.limit == MAX_STATUS_BYTES
    assert read[0] == 0                     # refused by its size, before any read
    assert time.monotonic() - started < 5


def test_a_file_larger_than_its_size_says_is_read_only_to_the_limit(
        work: RunDir, monkeypatch: pytest.MonkeyPatch) -> None:
    # A file that grows while it is read, or whose size is not what fstat says (as in
    # /proc): the read itself stops one byte past the limit.
    with open(work.control, "wb") as f:
        f.truncate(BIG)
    real_fstat = os.fstat

    def small(fd: int) -> os.stat_result:
        st = real_fstat(fd)
        return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, st.st_uid,
                               st.st_gid, 10, st.st_atime, st.st_mtime, st.st_ctime))
    monkeypatch.setattr(rundir.os, "fstat", small)
    read = _count_reads(monkeypatch)
    with pytest.raises(UntrustedFile, match=f"grew over the limit of {MAX_CONTROL_BYTES}"):
        read_untrusted(work.control, MAX_CONTROL_BYTES)
    assert read[0] == MAX_CONTROL_BYTES + 1
    assert work.control_state() == "active"


def test_a_100_mb_log_is_read_only_at_its_end(work: RunDir,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    work.logs.mkdir()
    stderr = work.logs / "stderr"
    with open(stderr, "wb") as f:
        f.seek(BIG)                         # sparse: 100 MB of nothing, then the end
        f.write(b"\n--- nimbus-thrift launch at ...\nValueError: the last words\n")
    read = _count_reads(monkeypatch, "pread")
    assert spark_status.last_stderr_line(stderr, work.root) == "ValueError: the last words"
    assert read[0] <= spark_status.STDERR_TAIL_BYTES


def _count_reads(monkeypatch: pytest.MonkeyPatch, name: str = "read") -> list[int]:
    """Count the bytes rundir's reader reads through ``os.<name>``."""
    total = [0]
    real = getattr(os, name)

    def counting(*args: Any) -> bytes:
        data: bytes = real(*args)
        total[0] += len(data)
        return data
    monkeypatch.setattr(rundir.os, name, counting)
    return total


def test_invalid_or_misshapen_status_is_no_status_with_one_log_line(
        work: RunDir, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, RUNDIR_LOGGER):
        for data in (b"{not json", status_with(components=[]),
                     status_with(ui_url="javascript:alert(1)"), b"[]"):
            work.status.write_bytes(data)
            assert work.read_status() is None
    lines = [r for r in caplog.records if str(work.status) in r.getMessage()]
    assert len(lines) == 1                  # rate-limited: one a minute per file
    work.status.write_bytes(status_with())
    assert work.read_status() is not None


def test_the_daemon_answers_with_what_it_can_read(work: RunDir, tmp_path: Path,
                                                 secret: Path) -> None:
    # The monitor's view (records.Run, spark/status.py): a hostile status.json is "no
    # status", never an exception; a query's view of settings is "none".
    config = load_config(env={}, flags={"data_dir": str(tmp_path / "data"),
                                        "launcher": "none"})
    run = Run("t-1-1", work, pid=os.getpid(), ui_port=4040)
    for data in (b"\x00" * 10, status_with(pid="x"), status_with(updated_at=1e308 * 10)):
        work.status.write_bytes(data)
        assert run.status_file() is None
        status = spark_status.run_status(run, True, run.status_file(), config, time.time)
        assert status.state == "starting"
    work.status.unlink()
    work.status.symlink_to(secret)
    run.died_at = time.time()
    assert "the daemon's secret" not in spark_status.failure_text(run, run.status_file())
    work.settings.symlink_to(secret)
    assert settings_of(work.root.parent, work.root.name) == RunSettings()
