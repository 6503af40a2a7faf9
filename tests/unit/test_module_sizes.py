"""Every module of the package, and every test file, stays small enough to hold in one
head (issues 12 and 25).

A source file that outgrows the limit has usually taken on a second job. The answer is
to split it by job, not to raise the number. C sources and headers count too: they are
modules of the package as much as the Python ones are.
"""

from __future__ import annotations

from pathlib import Path

import nimbus_thrift

PACKAGE_DIR = Path(nimbus_thrift.__file__).resolve().parent
TESTS_DIR = Path(__file__).resolve().parents[1]
#: Made by a tool, not written by us: the Thrift compiler's output and fetched sources.
GENERATED = {"cache", "gen-py", "gen-storm-py", "gen-nimbus-py", "node_modules"}
MAX_LINES = 700
SOURCE_SUFFIXES = {".py", ".c", ".h", ".js", ".css", ".html"}


def _sources() -> list[Path]:
    return sorted(p for p in PACKAGE_DIR.rglob("*")
                  if p.suffix in SOURCE_SUFFIXES and "__pycache__" not in p.parts)


def test_the_package_has_sources_to_measure() -> None:
    # Guards the test below against measuring nothing (a wrong directory, a renamed
    # suffix): the rpc accelerators and the selector are always there.
    sources = _sources()
    assert {"selector.py", "server.py", "_wire.c", "app.js"} <= {p.name for p in sources}
    assert len(sources) > 100


def test_no_module_is_over_the_limit() -> None:
    over = {}
    for path in _sources():
        with path.open("rb") as f:
            lines = sum(1 for _ in f)
        if lines >= MAX_LINES:
            over[str(path.relative_to(PACKAGE_DIR))] = lines
    assert over == {}, f"split these by job (limit {MAX_LINES} lines): {over}"


def _test_files() -> list[Path]:
    return sorted(p for p in TESTS_DIR.rglob("*.py")
                  if not GENERATED & set(p.parts) and "__pycache__" not in p.parts)


def test_no_test_file_is_over_the_limit() -> None:
    # The tests are read as often as the code, and a test file that passes the limit has
    # two jobs as surely as a module does.
    files = _test_files()
    assert {"test_layers.py", "test_server.py"} <= {p.name for p in files}
    over = {}
    for path in files:
        with path.open("rb") as f:
            lines = sum(1 for _ in f)
        if lines >= MAX_LINES:
            over[str(path.relative_to(TESTS_DIR))] = lines
    assert over == {}, f"split these by job (limit {MAX_LINES} lines): {over}"
