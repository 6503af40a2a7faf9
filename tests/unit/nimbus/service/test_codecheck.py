"""The daemon's code check in a child process (nimbus/codecheck.py): the same names as
the in-process parse, errors as sentences, and the child's memory bounded."""

from __future__ import annotations

import pytest

from nimbus_thrift.nimbus.service import codecheck
from nimbus_thrift.nimbus.service.codecheck import parse_in_child
from nimbus_thrift.topology.code import CodeError, top_level_names

SOURCE = b"import os.path\nfrom x import y as z\nclass A: pass\ndef f(): pass\nN: int = 1\n"


def test_the_child_finds_what_the_in_process_parse_finds() -> None:
    assert parse_in_child("m.py", SOURCE) == top_level_names("m.py", SOURCE) == \
        {"os", "z", "A", "f", "N"}


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
