"""The daemon's code check in a child process (nimbus/codecheck.py): the same names as
the in-process parse, errors as sentences, and the child's memory bounded; children
reused and replaced when they die, hang or parsed a large module; names cached by the
module's bytes, never by its name."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from nimbus_thrift.nimbus.service import codecheck
from nimbus_thrift.nimbus.service.codecheck import parse_in_child
from nimbus_thrift.topology.code import CodeError, top_level_names

SOURCE = b"import os.path\nfrom x import y as z\nclass A: pass\ndef f(): pass\nN: int = 1\n"


def test_the_child_finds_what_the_in_process_parse_finds() -> None:
    assert parse_in_child("m.py", SOURCE) == top_level_names("m.py", SOURCE) == \
        {"os", "z", "A", "f", "N"}


def test_the_child_imports_the_package_from_any_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A daemon started outside the checkout (the README's quick start, from an empty
    # folder): the child, run with -S, finds nimbus_thrift on its PYTHONPATH only.
    monkeypatch.chdir(tmp_path)
    assert (Path(codecheck._PACKAGE_ROOT) / "nimbus_thrift").is_dir()
    assert parse_in_child("m.py", SOURCE) == {"os", "z", "A", "f", "N"}


@pytest.mark.parametrize("source,message", [
    (b"def (", r"m\.py does not parse: invalid syntax"),
    (b"-" * 200_000 + b"1", r"m\.py does not parse: nested too deeply"),
])
def test_a_module_that_does_not_parse_is_a_sentence(source: bytes, message: str) -> None:
    with pytest.raises(CodeError, match=message):
        parse_in_child("m.py", source)


def test_a_parse_past_the_childs_memory_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # 64 MiB cannot hold the parse of 2 MiB of dense source (~800 MB measured).
    monkeypatch.setattr(codecheck, "_CHILD", codecheck._CHILD.replace(
        str(codecheck.CHILD_MEMORY_BYTES), str(64 << 20)))
    monkeypatch.setattr(codecheck, "CHILD_MEMORY_BYTES", 64 << 20)
    with pytest.raises(CodeError, match=r"big\.py does not parse: nested too deeply or "
                                        r"too large for the parser's memory"):
        parse_in_child("big.py", b"x = [1, 2, 3]\n" * 150_000)


# --- the daemon's checker: children reused, replaced, and names cached by content ----

@pytest.fixture
def checker() -> Iterator[codecheck.CodeChecker]:
    checker = codecheck.CodeChecker()
    yield checker
    checker.close()


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    parsed: list[str] = []
    real = codecheck.CodeChecker.parse_uncached

    def counting(self: codecheck.CodeChecker, member: str, source: bytes) -> frozenset[str]:
        parsed.append(member)
        return real(self, member, source)
    monkeypatch.setattr(codecheck.CodeChecker, "parse_uncached", counting)
    return parsed


def test_one_child_answers_parse_after_parse(checker: codecheck.CodeChecker) -> None:
    assert checker.parse("m.py", SOURCE) == {"os", "z", "A", "f", "N"}
    assert checker.parse("n.py", b"class B: pass\n") == {"B"}
    with pytest.raises(CodeError, match=r"bad\.py does not parse: invalid syntax"):
        checker.parse("bad.py", b"def (")
    assert checker.parse("o.py", b"C = 1\n") == {"C"}
    assert checker.spawned == 1


def test_the_same_bytes_are_parsed_once_and_a_change_is_parsed_again(
        checker: codecheck.CodeChecker, monkeypatch: pytest.MonkeyPatch) -> None:
    parsed = _counting(monkeypatch)
    assert checker.parse("m.py", b"class A: pass\n") == {"A"}
    assert checker.parse("m.py", b"class A: pass\n") == {"A"}
    assert checker.parse("other.py", b"class A: pass\n") == {"A"}     # by content
    assert parsed == ["m.py"]
    # The same name with other bytes: parsed, and what it defines now is what counts.
    assert checker.parse("m.py", b"class B: pass\n") == {"B"}
    assert parsed == ["m.py", "m.py"]


def test_a_refusal_is_not_cached(checker: codecheck.CodeChecker,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    parsed = _counting(monkeypatch)
    for _ in range(2):
        with pytest.raises(CodeError, match="does not parse"):
            checker.parse("bad.py", b"def (")
    assert parsed == ["bad.py", "bad.py"]


def test_the_cache_keeps_its_bounds() -> None:
    cache = codecheck.NamesCache(max_modules=3, max_names=8)
    for i in range(5):
        cache.put(bytes([i]), frozenset({f"a{i}"}))
    assert len(cache) == 3 and cache.get(bytes([0])) is None and cache.get(bytes([4]))
    cache.put(b"big", frozenset(f"n{i}" for i in range(3)))      # over a quarter: skipped
    assert cache.get(b"big") is None
    cache.put(b"two", frozenset({"x", "y"}))
    cache.put(b"more", frozenset({"p", "q"}))
    assert len(cache) <= 3 and cache.names <= 8


def test_a_child_that_died_is_replaced(checker: codecheck.CodeChecker) -> None:
    assert checker.parse("m.py", b"A = 1\n") == {"A"}
    (child,) = checker._idle
    child.proc.kill()
    child.proc.wait()
    assert checker.parse("n.py", b"B = 1\n") == {"B"}
    assert checker.spawned == 2


def test_a_child_past_its_time_is_killed_and_replaced(
        checker: codecheck.CodeChecker, monkeypatch: pytest.MonkeyPatch) -> None:
    assert checker.parse("m.py", b"A = 1\n") == {"A"}
    (child,) = checker._idle
    child.proc.send_signal(signal.SIGSTOP)      # it never answers
    monkeypatch.setattr(codecheck, "CHILD_TIMEOUT_SECS", 0.5)
    with pytest.raises(CodeError, match=r"n\.py took over 0 s to parse"):
        checker.parse("n.py", b"B = 1\n")
    assert child.proc.returncode is not None and checker._idle == []
    assert checker.parse("o.py", b"C = 1\n") == {"C"}
    assert checker.spawned == 2


def test_a_child_that_died_mid_parse_is_a_sentence(
        checker: codecheck.CodeChecker, monkeypatch: pytest.MonkeyPatch) -> None:
    # A child that exits before answering (as one killed by the system would).
    monkeypatch.setattr(codecheck, "_CHILD", "import sys; sys.stdin.buffer.read(1); "
                                             "sys.exit(7)")
    with pytest.raises(CodeError, match=r"m\.py could not be parsed \(exit status "):
        checker.parse("m.py", b"A = 1\n")
    assert checker._idle == []


def test_after_a_large_module_the_child_is_replaced(checker: codecheck.CodeChecker) -> None:
    big = b"class A: pass\n" + b"#" * codecheck.RECYCLE_SOURCE_BYTES + b"\n"
    assert checker.parse("big.py", big) == {"A"}
    assert checker._idle == []          # its memory went back with it
    assert checker.parse("m.py", b"B = 1\n") == {"B"}
    assert checker.spawned == 2


def test_the_memory_cap_holds_in_a_reused_child(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codecheck, "_CHILD", codecheck._CHILD.replace(
        str(codecheck.CHILD_MEMORY_BYTES), str(64 << 20)))
    monkeypatch.setattr(codecheck, "CHILD_MEMORY_BYTES", 64 << 20)
    checker = codecheck.CodeChecker()
    try:
        assert checker.parse("m.py", b"A = 1\n") == {"A"}
        with pytest.raises(CodeError, match=r"big\.py does not parse: nested too deeply "
                                            r"or too large for the parser's memory"):
            checker.parse("big.py", b"x = [1, 2, 3]\n" * 150_000)
        assert checker.parse("n.py", b"B = 1\n") == {"B"}
        assert checker.spawned == 2
    finally:
        checker.close()


def test_close_stops_the_idle_children(checker: codecheck.CodeChecker) -> None:
    checker.parse("m.py", b"A = 1\n")
    (child,) = checker._idle
    checker.close()
    assert child.proc.returncode is not None and checker._idle == []
