"""The package's architecture, checked from its source: which layer may import which,
no import circles, and PySpark only where a topology runs.

Read with ``ast``, not by importing: every ``import`` statement counts, including the
lazy ones inside functions, because a lazy import is still a dependency (it only moves
the failure to the moment the function runs). Imports under ``if TYPE_CHECKING:`` are
type-only: they count for the layers (a type from a layer above is still knowledge of
it) but not for circles (they never run).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

import nimbus_thrift

PACKAGE_DIR = Path(nimbus_thrift.__file__).resolve().parent
ROOT = "nimbus_thrift"

#: Each layer and the layers it may import (itself included). A module belongs to the
#: longest prefix listed; the application modules (the cli package, render, logs, tuning,
#: demo) sit above everything and are unrestricted, but nothing below may import them.
#: ``nimbus_thrift`` itself is only the lazy export table and ``__version__``.
ALLOWED: dict[str, set[str]] = {
    # The generic server: nothing of Nimbus, topologies, Spark, the client or the CLI.
    "nimbus_thrift.rpc": {"nimbus_thrift.rpc"},
    # The IDL files and the service facts they cannot say: imported by every side.
    "nimbus_thrift.idl": set(),
    # The lazy export tables' machinery, for the package and the client package.
    "nimbus_thrift.lazy": set(),
    # What user code imports, in the client, the daemon and the runner.
    "nimbus_thrift.topology": {"nimbus_thrift.topology", "nimbus_thrift.idl"},
    # The example topologies the package ships (as files to print, never imported by
    # it): user code, so the DSL only.
    "nimbus_thrift.examples": {"nimbus_thrift.topology"},
    # Runs inside Spark: the DSL and its own modules, no daemon, client or server.
    "nimbus_thrift.runner": {"nimbus_thrift.runner", "nimbus_thrift.topology"},
    # A client of any nimbus: the socket-free calls of rpc, the DSL to submit.
    "nimbus_thrift.client": {"nimbus_thrift.client", "nimbus_thrift.rpc",
                             "nimbus_thrift.topology", "nimbus_thrift.idl",
                             "nimbus_thrift.lazy"},
    # The daemon: the server it runs on, the checks it shares with users, and the three
    # files it shares with the runner (the run spec it writes, the directory it reads,
    # a cluster-mode driver's attempts).
    "nimbus_thrift.nimbus": {"nimbus_thrift.nimbus", "nimbus_thrift.rpc",
                             "nimbus_thrift.topology", "nimbus_thrift.idl",
                             "nimbus_thrift.runner.spec", "nimbus_thrift.runner.rundir",
                             "nimbus_thrift.runner.attempts", ROOT},
}

#: Within the generic server: the codecs know no socket and no server (only the errors
#: they raise and the option constants they share); the server core never imports the
#: multi-process server built on it (FORBIDDEN below), which only make_server chooses.
ALLOWED["nimbus_thrift.rpc.codec"] = {"nimbus_thrift.rpc.codec", "nimbus_thrift.rpc.errors",
                                      "nimbus_thrift.rpc.options"}
ALLOWED["nimbus_thrift.rpc.multiprocess"] = {"nimbus_thrift.rpc"}
ALLOWED["nimbus_thrift.rpc.make"] = {"nimbus_thrift.rpc"}

#: Within the daemon, its rooms from the bottom up. What every room may use: the server
#: library, the user side's checks, the IDL, and the three files shared with the runner.
_BASE = {"nimbus_thrift.rpc", "nimbus_thrift.topology", "nimbus_thrift.idl",
         "nimbus_thrift.runner.spec", "nimbus_thrift.runner.rundir",
         "nimbus_thrift.runner.attempts", ROOT}
_N = "nimbus_thrift.nimbus."
#: The settings, what a launcher is, and what admission counts: below every room.
_FOUNDATION = {_N + "config", _N + "settings", _N + "setting_checks", _N + "launcher",
               _N + "admission", _N + "role"}
for _module in _FOUNDATION:
    ALLOWED[_module] = _BASE | _FOUNDATION
#: Who may do what, and as which OS user: knows no state, no calls.
ALLOWED[_N + "security"] = _BASE | _FOUNDATION | {_N + "security"}
#: What the daemon keeps: knows no calls, blobs, transfers or launcher implementation.
ALLOWED[_N + "state"] = _BASE | _FOUNDATION | {_N + "security", _N + "state"}
#: Uploads and downloads of code, and the blob store built on their sessions and files.
ALLOWED[_N + "transfers"] = ALLOWED[_N + "state"] | {_N + "transfers"}
ALLOWED[_N + "blobs"] = ALLOWED[_N + "transfers"] | {_N + "blobs"}
#: The IDL's surface: every room below it; the blob and transfer calls are part of it.
ALLOWED[_N + "service"] = ALLOWED[_N + "blobs"] | {_N + "service"}
ALLOWED[_N + "blobs.calls"] = ALLOWED[_N + "service"]
ALLOWED[_N + "transfers.calls"] = ALLOWED[_N + "service"]
#: The Spark launcher: a launcher and the OS users it runs topologies as, nothing of the
#: daemon's state or calls (so a second way to run drivers sits beside it, not in it).
ALLOWED[_N + "spark"] = _BASE | _FOUNDATION | {_N + "security", _N + "spark"}
#: The web side: the page, the REST API and /metrics over the service's answers.
ALLOWED[_N + "web"] = ALLOWED[_N + "service"] | {_N + "web"}
#: High availability: the election and the journal on ZooKeeper, over the state they
#: replicate; nothing of the calls, so the service stays the same in both modes.
ALLOWED[_N + "ha"] = ALLOWED[_N + "state"] | {_N + "ha"}

#: Imports a layer's ALLOWED prefixes would let through but that break a contract.
FORBIDDEN: dict[str, set[str]] = {
    "nimbus_thrift.rpc": {"nimbus_thrift.rpc.multiprocess", "nimbus_thrift.rpc.make"},
    "nimbus_thrift.rpc.multiprocess": {"nimbus_thrift.rpc.make"},
}
#: The application, as prefixes like the layers: ``nimbus_thrift.cli`` is the package and
#: every module in it.
APPLICATION = {"nimbus_thrift.cli", "nimbus_thrift.render", "nimbus_thrift.logs",
               "nimbus_thrift.tuning", "nimbus_thrift.demo", "nimbus_thrift.__main__"}
#: Only these run inside a Spark application and may import PySpark (the daemon finds
#: Spark on disk and starts it; it never imports it).
PYSPARK_MODULES_PREFIX = "nimbus_thrift.runner."


@dataclass(frozen=True)
class Import:
    source: str          # the importing module
    target: str          # the module (or package) imported
    line: int
    type_only: bool      # under ``if TYPE_CHECKING:``


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE_DIR.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(name: str, path: Path, modules: dict[str, Path]) -> list[Import]:
    """Every import of a package module in ``path``, resolved to module names."""
    is_package = path.name == "__init__.py"
    found: list[Import] = []

    def visit(node: ast.AST, type_only: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, type_only)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == ROOT:
                    found.append(Import(name, alias.name, node.lineno, type_only))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] == ROOT:
                for alias in node.names:
                    # ``from pkg import submodule`` depends on the submodule.
                    sub = f"{target}.{alias.name}"
                    found.append(Import(name, sub if sub in modules else target,
                                        node.lineno, type_only))
        for child in ast.iter_child_nodes(node):
            visit(child, type_only)

    visit(ast.parse(path.read_text(), str(path)), False)
    return found


def _all_imports() -> list[Import]:
    modules = _modules()
    return [imp for name, path in modules.items() for imp in _imports(name, path, modules)]


def _layer(module: str) -> str | None:
    best = None
    for layer in ALLOWED:
        if (module == layer or module.startswith(layer + ".")) and \
                (best is None or len(layer) > len(best)):
            best = layer
    return best


def _within(module: str, allowed: set[str]) -> bool:
    return any(module == a or module.startswith(a + ".") for a in allowed)


def test_every_module_is_in_a_layer_or_the_application() -> None:
    unplaced = [m for m in _modules()
                if m != ROOT and _layer(m) is None and not _within(m, APPLICATION)]
    assert unplaced == [], f"add these modules to a layer in {__name__}: {unplaced}"


def test_no_layer_imports_a_layer_above_it() -> None:
    wrong = []
    for imp in _all_imports():
        layer = _layer(imp.source)
        if layer is None:
            continue        # the application modules may import anything
        if _within(imp.target, APPLICATION) or not _within(imp.target, ALLOWED[layer]) \
                or _within(imp.target, FORBIDDEN.get(layer, set())):
            wrong.append(f"{imp.source}:{imp.line} imports {imp.target}")
    assert wrong == []


def test_the_rpc_package_imports_nothing_of_the_rest() -> None:
    # Said separately because it is what makes rpc/ a library of its own.
    outside = [f"{imp.source}:{imp.line} imports {imp.target}" for imp in _all_imports()
               if imp.source.startswith("nimbus_thrift.rpc")
               and not imp.target.startswith("nimbus_thrift.rpc")]
    assert outside == []


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm),
    plus modules that import themselves."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in edges.get(node, ()):
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            connect(node)
    return found


def test_no_import_circles() -> None:
    edges: dict[str, set[str]] = {}
    for imp in _all_imports():
        if not imp.type_only and imp.target != imp.source:
            edges.setdefault(imp.source, set()).add(imp.target)
    assert _cycles(edges) == []


def test_the_circle_finder_finds_circles() -> None:
    # The test above passes trivially if _cycles never finds anything.
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_layer_check_sees_lazy_and_relative_imports(tmp_path: Path) -> None:
    source = tmp_path / "mod.py"
    source.write_text("from typing import TYPE_CHECKING\n"
                      "if TYPE_CHECKING:\n    from ..nimbus.service import handler\n"
                      "def f():\n    from ..client.client import NimbusClient\n")
    modules = {"nimbus_thrift.nimbus.service.handler": source, "nimbus_thrift.client.client": source}
    found = _imports("nimbus_thrift.rpc.mod", source, modules)
    assert [(i.target, i.type_only) for i in found] == [
        ("nimbus_thrift.nimbus.service.handler", True), ("nimbus_thrift.client.client", False)]


@pytest.mark.parametrize("name", sorted(_modules()))
def test_pyspark_is_imported_only_by_the_runner(name: str) -> None:
    if name.startswith(PYSPARK_MODULES_PREFIX):
        return
    tree = ast.parse(_modules()[name].read_text())
    spark = [node.lineno for node in ast.walk(tree)
             if (isinstance(node, ast.Import)
                 and any(a.name.split(".")[0] in ("pyspark", "py4j") for a in node.names))
             or (isinstance(node, ast.ImportFrom) and not node.level
                 and (node.module or "").split(".")[0] in ("pyspark", "py4j"))]
    assert spark == [], f"{name} imports PySpark at lines {spark}"
