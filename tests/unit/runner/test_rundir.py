"""runner/rundir.py's write_atomic: durable (file fsynced before the rename, directory
after), atomic, and leaves no temporary file behind on failure."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from nimbus_thrift.runner import rundir
from nimbus_thrift.runner.rundir import RunDir, write_atomic


def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Record each fsync as (what the descriptor is, the order step) around os.replace."""
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        kind = "dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file"
        events.append(("fsync", kind))
        real_fsync(fd)

    def replace(src: os.PathLike[str] | str, dst: os.PathLike[str] | str) -> None:
        events.append(("replace", Path(dst).name))
        real_replace(src, dst)

    monkeypatch.setattr(rundir.os, "fsync", fsync)
    monkeypatch.setattr(rundir.os, "replace", replace)
    return events


def test_write_atomic_fsyncs_the_file_then_renames_then_fsyncs_the_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events = fsyncs(monkeypatch)
    target = tmp_path / "status.json"
    write_atomic(target, "{\"state\": \"running\"}")
    assert events == [("fsync", "file"), ("replace", "status.json"), ("fsync", "dir")]
    assert target.read_text() == "{\"state\": \"running\"}"
    assert [p.name for p in tmp_path.iterdir()] == ["status.json"]


def test_write_atomic_replaces_and_writes_unicode(tmp_path: Path) -> None:
    target = tmp_path / "control"
    target.write_text("old, longer content\n")
    write_atomic(target, "stop ü\n")
    assert target.read_text(encoding="utf-8") == "stop ü\n"


def test_a_failed_write_leaves_the_old_file_and_no_temporary(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "control"
    target.write_text("active\n")

    def broken(fd: int) -> None:
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(rundir.os, "fsync", broken)
    with pytest.raises(OSError, match="No space left"):
        write_atomic(target, "stop\n")
    assert target.read_text() == "active\n"
    assert [p.name for p in tmp_path.iterdir()] == ["control"]


def test_new_files_follow_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        RunDir(tmp_path).set_control("paused")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "control").stat().st_mode) == 0o600
