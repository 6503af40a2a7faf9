"""docs/layout.md lists every module of the package in its folder, and nothing that is
not there: the layout a newcomer reads is the tree as it is (issue 25).

Each block of the layout's first code block starts with a folder (``nimbus_thrift/...``
at the start of a line); its module lines start with two spaces and a name. The test
reads every ``name.py`` (``.c``, ``.h``, ``.pyi``) on those lines, not on the folder's
own lines, which may name modules elsewhere.
"""

from __future__ import annotations

import re
from pathlib import Path

import nimbus_thrift

PACKAGE_DIR = Path(nimbus_thrift.__file__).resolve().parent
LAYOUT = PACKAGE_DIR.parent / "docs" / "layout.md"
SUFFIXES = {".py", ".c", ".h", ".pyi"}
_NAME = re.compile(r"(?<![/\w.])[\w]+\.(?:py|c|h|pyi)\b")


def _listed() -> dict[str, set[str]]:
    text = LAYOUT.read_text()
    block = text.split("```", 2)[1]
    listed: dict[str, set[str]] = {}
    folder = None
    for line in block.splitlines():
        if line.startswith("nimbus_thrift/"):
            folder = line.split()[0].rstrip("/")
            listed[folder] = set()
        elif folder and re.match(r"  \S", line):
            listed[folder].update(_NAME.findall(line))
    return listed


def _tree() -> dict[str, set[str]]:
    tree: dict[str, set[str]] = {}
    for path in PACKAGE_DIR.rglob("*"):
        if path.suffix in SUFFIXES and path.name != "__init__.py" \
                and "__pycache__" not in path.parts:
            folder = str(path.parent.relative_to(PACKAGE_DIR.parent))
            tree.setdefault(folder, set()).add(path.name)
    return tree


def test_the_layout_lists_every_folder_and_module_as_they_are() -> None:
    listed, tree = _listed(), _tree()
    assert len(tree) > 10 and "selector.py" in tree["nimbus_thrift/rpc"]
    assert sorted(listed) == sorted(tree), "folders in docs/layout.md differ from the tree"
    for folder in tree:
        assert listed[folder] == tree[folder], (
            f"{folder}: missing {sorted(tree[folder] - listed[folder])}, "
            f"not there {sorted(listed[folder] - tree[folder])}")
