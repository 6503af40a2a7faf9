"""Uploaded topology code: a zip of Python modules, checked without running any of it.

The zip's root is a ``sys.path`` entry: ``wordcount/bolts.py`` is the module
``wordcount.bolts``. Checks, all before anything is extracted:

- it is a zip at all, with at most :data:`MAX_MEMBERS` members and at most
  :data:`MAX_UNPACKED_BYTES` once unpacked (the sizes the zip declares; a zip bomb is
  refused before it is inflated);
- no member escapes its directory when extracted: no absolute paths, no ``..``, no
  drive letters, no symbolic links;
- every component's ``module.Class`` names a module in the zip whose source (parsed with
  ``ast``, never imported) defines or imports that name at top level.
"""

from __future__ import annotations

import ast
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

#: More members than any real topology has; bounds the time spent listing a hostile zip.
MAX_MEMBERS = 100_000
#: Unpacked size a topology's code may declare (work directories extract it).
MAX_UNPACKED_BYTES = 1 << 30
#: Source larger than this is not parsed to look for a class (it is still accepted).
MAX_PARSED_SOURCE = 16 << 20


class CodeError(ValueError):
    """The uploaded code is unusable; the message says which member and why."""


@dataclass(frozen=True)
class CodeArchive:
    """The checked listing of one uploaded zip."""

    path: Path
    members: frozenset[str]

    @classmethod
    def open(cls, path: Path) -> "CodeArchive":
        """Check ``path`` as described in the module docstring.

        Raises:
            CodeError: not a zip, too big, or a member that would escape.
        """
        try:
            with zipfile.ZipFile(path) as zf:
                infos = zf.infolist()
        except (zipfile.BadZipFile, OSError, EOFError) as exc:
            raise CodeError(f"the uploaded code is not a zip archive ({exc})") from None
        if len(infos) > MAX_MEMBERS:
            raise CodeError(f"the uploaded zip has {len(infos)} members; "
                            f"the limit is {MAX_MEMBERS}")
        total = sum(info.file_size for info in infos)
        if total > MAX_UNPACKED_BYTES:
            raise CodeError(f"the uploaded zip unpacks to {total} bytes; "
                            f"the limit is {MAX_UNPACKED_BYTES}")
        members = set()
        for info in infos:
            _check_member(info)
            members.add(info.filename)
        return cls(path, frozenset(members))

    def module_file(self, module: str) -> str | None:
        """The member holding ``module`` (``a.b`` -> ``a/b/__init__.py`` or ``a/b.py``)."""
        base = module.replace(".", "/")
        # A package wins over a module of the same name, in Python's path finder and in
        # zipimport alike: check the file Python will import.
        for candidate in (base + "/__init__.py", base + ".py"):
            if candidate in self.members:
                return candidate
        return None

    def resolve(self, script: str) -> None:
        """Check that ``script`` (``package.module.Class``) is defined in the code.

        Raises:
            CodeError: malformed name, module absent, or no such top-level name.
        """
        module, _, attr = script.rpartition(".")
        if not module or not all(part.isidentifier() for part in script.split(".")):
            raise CodeError(f"script {script!r} is not of the form 'module.Class'")
        member = self.module_file(module)
        if member is None:
            raise CodeError(f"module {module!r} (of {script!r}) is not in the uploaded code; "
                            f"expected {module.replace('.', '/')}.py at the zip's root")
        with zipfile.ZipFile(self.path) as zf:
            info = zf.getinfo(member)
            if info.file_size > MAX_PARSED_SOURCE:
                return
            source = zf.read(info)
        try:
            tree = ast.parse(source, filename=member)
        # CPython's parser reports nesting too deep for it as RecursionError or
        # MemoryError ("-" * 200000 + "1"): the source's fault, not the daemon's.
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            raise CodeError(f"{member} does not parse: {str(exc) or 'nested too deeply'}") \
                from None
        if attr not in _top_level_names(tree):
            raise CodeError(f"{member} defines no top-level {attr!r}")


def _check_member(info: zipfile.ZipInfo) -> None:
    name = info.filename
    path = PurePosixPath(name)
    escapes = (not name or name.startswith("/") or "\\" in name or "\x00" in name
               or ".." in path.parts or bool(path.parts and ":" in path.parts[0]))
    if escapes:
        raise CodeError(f"zip member {name!r} would be extracted outside its directory")
    mode = info.external_attr >> 16
    if stat.S_ISLNK(mode):
        raise CodeError(f"zip member {name!r} is a symbolic link; links are not accepted")


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return names
