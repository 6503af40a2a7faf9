"""load_blob's cache (nimbus_thrift.topology.blobs): one parse per blob version for a
parse function defined once, and bounded whatever the caller passes."""

from __future__ import annotations

from pathlib import Path

import pytest

from nimbus_thrift.topology import blobs
from nimbus_thrift.topology.blobs import WORK_DIR_ENV, load_blob


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "blobs").mkdir()
    (tmp_path / "blobs" / "words.txt").write_bytes(b"a b c")
    monkeypatch.setenv(WORK_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(blobs, "_cache", type(blobs._cache)())
    return tmp_path


def test_a_parse_function_defined_once_parses_once_per_version(work: Path) -> None:
    calls = []

    def words(data: bytes) -> list[str]:
        calls.append(data)
        return data.decode().split()

    for _ in range(100):
        assert load_blob("words.txt", words) == ["a", "b", "c"]
    assert len(calls) == 1


def test_a_new_lambda_per_call_cannot_grow_the_cache(work: Path) -> None:
    for i in range(blobs.MAX_CACHED_BLOBS * 10):
        assert load_blob("words.txt", lambda data, i=i: (i, len(data))) == (i, 5)
    assert len(blobs._cache) == blobs.MAX_CACHED_BLOBS


def test_the_least_recently_used_entry_goes_first(work: Path) -> None:
    def keep(data: bytes) -> bytes:
        return data

    load_blob("words.txt", keep)
    for i in range(blobs.MAX_CACHED_BLOBS * 2):
        load_blob("words.txt", keep)                      # used again: stays
        load_blob("words.txt", lambda data, i=i: i)
    assert any(key[1] is keep for key in blobs._cache)
