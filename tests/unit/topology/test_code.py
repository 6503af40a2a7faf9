"""Uploaded code (nimbus_thrift.topology.code): hostile zips are refused before anything is
extracted, and ``module.Class`` is resolved by parsing, never importing, the source."""

from __future__ import annotations

import stat
import zipfile
from pathlib import Path

import pytest

from support.nimbus import make_zip
from nimbus_thrift.topology import code as code_module
from nimbus_thrift.topology.code import CodeArchive, CodeError


def write_zip(tmp_path: Path, members: list[zipfile.ZipInfo | tuple[str, str | bytes]],
              name: str = "code.zip") -> Path:
    path = tmp_path / name
    with zipfile.ZipFile(path, "w") as zf:
        for member in members:
            if isinstance(member, zipfile.ZipInfo):
                zf.writestr(member, b"x")
            else:
                zf.writestr(*member)
    return path


def archive(tmp_path: Path, files: dict[str, str | bytes]) -> CodeArchive:
    path = tmp_path / "code.zip"
    path.write_bytes(make_zip(files))
    return CodeArchive.open(path)


# --- open ---------------------------------------------------------------------------

def test_open_lists_members(tmp_path: Path) -> None:
    path = tmp_path / "c.zip"
    path.write_bytes(make_zip())
    code = CodeArchive.open(path)
    assert code.path == path
    assert code.members == {"wordcount/__init__.py", "wordcount/components.py"}


@pytest.mark.parametrize("data", [b"", b"not a zip at all", b"PK\x03\x04" + b"\0" * 40,
                                  make_zip()[:-10]])
def test_open_refuses_non_zip(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "c.zip"
    path.write_bytes(data)
    with pytest.raises(CodeError, match="not a zip archive"):
        CodeArchive.open(path)


def test_open_refuses_missing_file(tmp_path: Path) -> None:
    with pytest.raises(CodeError, match="not a zip archive"):
        CodeArchive.open(tmp_path / "absent.zip")


@pytest.mark.parametrize("name", ["../x.py", "/abs.py", "a/../../x", "a/..", "..",
                                  "a\\..\\x.py", "..\\x.py", "C:x.py", "C:/x.py",
                                  "c:\\x.py"])
def test_open_refuses_escaping_members(tmp_path: Path, name: str) -> None:
    path = write_zip(tmp_path, [("ok.py", ""), (name, "boom")])
    with pytest.raises(CodeError) as info:
        CodeArchive.open(path)
    assert str(info.value) == f"zip member {name!r} would be extracted outside its directory"


@pytest.mark.parametrize("name", ["pkg/", "pkg/mod.py", "a..b.py", "x/..y/z.py", "./m.py"])
def test_open_accepts_harmless_names(tmp_path: Path, name: str) -> None:
    assert name in CodeArchive.open(write_zip(tmp_path, [(name, "")])).members


def test_open_refuses_symlink_member(tmp_path: Path) -> None:
    link = zipfile.ZipInfo("pkg/evil.py")
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    path = write_zip(tmp_path, [("pkg/__init__.py", ""), link])
    with pytest.raises(CodeError, match="'pkg/evil.py' is a symbolic link"):
        CodeArchive.open(path)


def test_open_accepts_regular_file_mode(tmp_path: Path) -> None:
    info = zipfile.ZipInfo("m.py")
    info.external_attr = (stat.S_IFREG | 0o644) << 16
    assert CodeArchive.open(write_zip(tmp_path, [info])).members == {"m.py"}


def test_open_refuses_too_many_members(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                       ) -> None:
    monkeypatch.setattr(code_module, "MAX_MEMBERS", 3)
    assert len(CodeArchive.open(write_zip(tmp_path, [(f"{i}.py", "") for i in range(3)]))
               .members) == 3
    path = write_zip(tmp_path, [(f"{i}.py", "") for i in range(4)], "big.zip")
    with pytest.raises(CodeError, match="has 4 members; the limit is 3"):
        CodeArchive.open(path)


def test_open_refuses_too_large_declared_size(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(code_module, "MAX_UNPACKED_BYTES", 100)
    assert CodeArchive.open(write_zip(tmp_path, [("a.py", b"x" * 60), ("b.py", b"y" * 40)]))
    # Compressed, 101 bytes take a few bytes: the declared (unpacked) size is what counts.
    path = tmp_path / "bomb.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("a.py", b"\0" * 61)
        zf.writestr("b.py", b"\0" * 40)
    assert path.stat().st_size < 400
    with pytest.raises(CodeError, match="unpacks to 101 bytes; the limit is 100"):
        CodeArchive.open(path)


# --- resolve --------------------------------------------------------------------------

def test_resolve_module_file_and_package_init(tmp_path: Path) -> None:
    code = archive(tmp_path, {"pkg/__init__.py": "class Top: pass\n",
                              "pkg/mod.py": "class A: pass\n",
                              "pkg/sub/__init__.py": "class B: pass\n",
                              "flat.py": "def Factory(): pass\n"})
    code.resolve("pkg.mod.A")
    code.resolve("pkg.sub.B")
    code.resolve("pkg.Top")
    code.resolve("flat.Factory")
    assert code.module_file("pkg.mod") == "pkg/mod.py"
    assert code.module_file("pkg.sub") == "pkg/sub/__init__.py"
    assert code.module_file("pkg.nope") is None


def test_resolve_prefers_package_over_module_file(tmp_path: Path) -> None:
    # What Python imports when both exist (path finder and zipimport alike).
    code = archive(tmp_path, {"m.py": "class A: pass\n", "m/__init__.py": "class B: pass\n"})
    assert code.module_file("m") == "m/__init__.py"
    code.resolve("m.B")
    with pytest.raises(CodeError, match="m/__init__.py defines no top-level 'A'"):
        code.resolve("m.A")


def test_resolve_missing_module(tmp_path: Path) -> None:
    code = archive(tmp_path, {"pkg/mod.py": "class A: pass\n"})
    with pytest.raises(CodeError) as info:
        code.resolve("pkg.other.A")
    assert str(info.value) == ("module 'pkg.other' (of 'pkg.other.A') is not in the uploaded "
                               "code; expected pkg/other.py at the zip's root")


def test_resolve_missing_class(tmp_path: Path) -> None:
    code = archive(tmp_path, {"pkg/mod.py": "class A: pass\n\ndef f():\n    class B: pass\n"})
    with pytest.raises(CodeError, match=r"^pkg/mod.py defines no top-level 'B'$"):
        code.resolve("pkg.mod.B")       # nested in a function: not at top level


@pytest.mark.parametrize("source,name", [
    ("Bolt = make_bolt()\n", "Bolt"),
    ("A = B = object\n", "B"),
    ("Bolt: type = object\n", "Bolt"),
    ("from .impl import RealBolt as Bolt\n", "Bolt"),
    ("from impl import Bolt\n", "Bolt"),
    ("import collections.abc\n", "collections"),
    ("import json as Bolt\n", "Bolt"),
    ("async def Bolt(): pass\n", "Bolt"),
])
def test_resolve_names_bound_other_ways(tmp_path: Path, source: str, name: str) -> None:
    archive(tmp_path, {"m.py": source}).resolve(f"m.{name}")


def test_resolve_does_not_run_the_code(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    code = archive(tmp_path, {"m.py": f"open({str(marker)!r}, 'w').close()\nclass A: pass\n"})
    code.resolve("m.A")
    assert not marker.exists()


def test_resolve_syntax_error_names_the_member(tmp_path: Path) -> None:
    code = archive(tmp_path, {"pkg/broken.py": "class A:\n    def (\n"})
    with pytest.raises(CodeError, match=r"^pkg/broken.py does not parse: "):
        code.resolve("pkg.broken.A")


@pytest.mark.parametrize("source", [b"class A: pass\n\0\n", b"\xff\xfe bad utf8\n",
                                    b"x = " + b"(" * 300 + b")" * 300 + b"\n",
                                    b"x = " + b"-" * 200_000 + b"1\n",
                                    b"x = y" + b"[0]" * 100_000 + b"\n"])
def test_resolve_hostile_source_is_a_code_error(tmp_path: Path, source: bytes) -> None:
    # Null bytes, bad encodings and nesting too deep for the parser (RecursionError,
    # MemoryError from CPython's parser) are the code's fault: a sentence, not a crash.
    code = archive(tmp_path, {"m.py": source})
    with pytest.raises(CodeError, match=r"^m.py does not parse: \S"):
        code.resolve("m.A")


def test_resolve_skips_parsing_huge_source(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(code_module, "MAX_PARSED_SOURCE", 10)
    code = archive(tmp_path, {"m.py": "this is not python at all\n"})
    code.resolve("m.Anything")          # accepted unchecked, as documented


@pytest.mark.parametrize("script", ["A", "", ".A", "m.", "m..A", "1m.A", "m.A-B", "m.A.",
                                    "m/x.A", "m .A", " m.A"])
def test_resolve_malformed_script(tmp_path: Path, script: str) -> None:
    code = archive(tmp_path, {"m.py": "class A: pass\n"})
    with pytest.raises(CodeError) as info:
        code.resolve(script)
    assert str(info.value) == f"script {script!r} is not of the form 'module.Class'"
