"""Uploaded topology code: a zip of Python modules, checked without running any of it.

The zip's root is a ``sys.path`` entry: ``wordcount/bolts.py`` is the module
``wordcount.bolts``. Checks, all before anything is extracted:

- it is a zip at all, with at most :data:`MAX_MEMBERS` members (counted in the central
  directory itself, before :mod:`zipfile` builds an object per entry) and at most
  :data:`MAX_UNPACKED_BYTES` once unpacked (the sizes the zip declares; a zip bomb is
  refused before it is inflated);
- no member escapes its directory when extracted: no absolute paths, no ``..``, no
  drive letters, no symbolic links;
- every component's ``module.Class`` names a module in the zip whose source (parsed with
  ``ast``, never imported) defines or imports that name at top level.

Parsing is the costly part (CPython's parser measured 1-2 s and 250-500 MB of peak
memory per MiB of dense source on 2 cores), so an archive parses each module at most
once, whatever the number of components naming it, keeps only the module's top-level
names, skips (accepts unchecked) a module over the per-module cap, and refuses code
whose modules would need more than the per-archive parse budget.
"""

from __future__ import annotations

import ast
import stat
import struct
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Callable

#: How a module's source becomes its top-level names: ``(member, source) -> names``,
#: raising CodeError when it does not parse. In this process by default; the daemon
#: passes one that parses in a child process (nimbus/codecheck.py).
Parser = Callable[[str, bytes], frozenset[str]]

#: More members than any real topology has; bounds the time spent listing a hostile zip.
MAX_MEMBERS = 100_000
#: Unpacked size a topology's code may declare (work directories extract it).
MAX_UNPACKED_BYTES = 1 << 30
#: Source larger than this is not parsed to look for a class (it is still accepted):
#: 1 MiB parses in 1-2 s with up to ~500 MB of transient memory on 2 cores, and the
#: largest hand-written modules (the standard library's) are under 300 KB.
MAX_PARSED_SOURCE = 1 << 20
#: Source parsed per archive (one submit) at most, summed over distinct modules: about
#: 8 s of parsing at worst; more is refused, naming this limit.
MAX_PARSED_TOTAL = 4 << 20

# The zip format's records (APPNOTE.TXT 4.3.12-4.3.16).
_EOCD = struct.Struct("<4s4H2LH")              # end of central directory, 22 bytes
_EOCD_SIG = b"PK\x05\x06"
_ZIP64_LOCATOR = struct.Struct("<4sLQL")        # 20 bytes, just before the EOCD
_ZIP64_LOCATOR_SIG = b"PK\x06\x07"
_ZIP64_EOCD = struct.Struct("<4sQ2H2L4Q")       # 56 bytes
_ZIP64_EOCD_SIG = b"PK\x06\x06"
_CENTRAL = struct.Struct("<4s6H3L5H2L")         # central directory file header, 46 bytes
_CENTRAL_SIG = b"PK\x01\x02"
#: The EOCD is followed by a comment of at most 65,535 bytes.
_EOCD_SEARCH = _EOCD.size + 0xFFFF


class CodeError(ValueError):
    """The uploaded code is unusable; the message says which member and why."""


@dataclass
class _ParseState:
    """What one archive has parsed so far (mutable inside the frozen archive)."""

    names: dict[str, frozenset[str] | None] = field(default_factory=dict)
    parsed_bytes: int = 0
    parses: int = 0
    zip: zipfile.ZipFile | None = None


@dataclass(frozen=True)
class CodeArchive:
    """The checked listing of one uploaded zip (one per submit: it caches what it
    parsed, so check every component of a topology against the same archive)."""

    path: Path
    members: frozenset[str]
    max_parse_bytes: int = MAX_PARSED_SOURCE
    max_parse_total: int = MAX_PARSED_TOTAL
    parser: Parser = field(default=lambda member, source: top_level_names(member, source),
                           compare=False, repr=False)
    _state: _ParseState = field(default_factory=_ParseState, compare=False, repr=False)

    @classmethod
    def open(cls, path: Path, *, max_members: int | None = None,
             max_parse_bytes: int | None = None,
             max_parse_total: int | None = None,
             parser: Parser | None = None) -> "CodeArchive":
        """Check ``path`` as described in the module docstring. Limits default to the
        module's constants (read at call time).

        Raises:
            CodeError: not a zip, too big, or a member that would escape.
        """
        limit = MAX_MEMBERS if max_members is None else max_members
        try:
            with open(path, "rb") as fp:
                count, exact = _count_central_directory(fp, limit)
            if count > limit:
                raise CodeError(f"the uploaded zip has {'' if exact else 'more than '}"
                                f"{count if exact else limit} members; the limit is {limit}")
            zf = zipfile.ZipFile(path)
        except CodeError:
            raise
        except (zipfile.BadZipFile, OSError, EOFError, struct.error) as exc:
            raise CodeError(f"the uploaded code is not a zip archive ({exc})") from None
        try:
            infos = zf.infolist()
            if len(infos) > limit:
                raise CodeError(f"the uploaded zip has {len(infos)} members; "
                                f"the limit is {limit}")
            total = sum(info.file_size for info in infos)
            if total > MAX_UNPACKED_BYTES:
                raise CodeError(f"the uploaded zip unpacks to {total} bytes; "
                                f"the limit is {MAX_UNPACKED_BYTES}")
            members = set()
            for info in infos:
                _check_member(info)
                members.add(info.filename)
        except BaseException:
            zf.close()
            raise
        archive = cls(path, frozenset(members),
                      MAX_PARSED_SOURCE if max_parse_bytes is None else max_parse_bytes,
                      MAX_PARSED_TOTAL if max_parse_total is None else max_parse_total,
                      top_level_names if parser is None else parser)
        archive._state.zip = zf
        return archive

    def close(self) -> None:
        """Close the zip (also done when the archive is garbage-collected)."""
        if self._state.zip is not None:
            self._state.zip.close()
            self._state.zip = None

    def __enter__(self) -> "CodeArchive":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def parses(self) -> int:
        """How many modules this archive has parsed (each at most once)."""
        return self._state.parses

    @property
    def parsed_bytes(self) -> int:
        """Bytes of source this archive has parsed."""
        return self._state.parsed_bytes

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
            CodeError: malformed name, module absent, no such top-level name, or the
                archive's parse budget spent.
        """
        module, _, attr = script.rpartition(".")
        if not module or not all(part.isidentifier() for part in script.split(".")):
            raise CodeError(f"script {script!r} is not of the form 'module.Class'")
        member = self.module_file(module)
        if member is None:
            raise CodeError(f"module {module!r} (of {script!r}) is not in the uploaded code; "
                            f"expected {module.replace('.', '/')}.py at the zip's root")
        names = self._names_of(member)
        if names is not None and attr not in names:
            raise CodeError(f"{member} defines no top-level {attr!r}")

    def _names_of(self, member: str) -> frozenset[str] | None:
        """The member's top-level names, parsed once; None when it is too big to parse
        (accepted unchecked)."""
        state = self._state
        if member in state.names:
            return state.names[member]
        zf = state.zip
        try:
            if zf is None:
                zf = state.zip = zipfile.ZipFile(self.path)
            info = zf.getinfo(member)
            if info.file_size > self.max_parse_bytes:
                state.names[member] = None
                return None
            if state.parsed_bytes + info.file_size > self.max_parse_total:
                raise CodeError(
                    f"checking {member} would parse {state.parsed_bytes + info.file_size} "
                    f"bytes of source for this topology; the limit is "
                    f"{self.max_parse_total} (max_code_parse_total_bytes)")
            source = zf.read(info)
        except (zipfile.BadZipFile, OSError, EOFError, KeyError) as exc:
            raise CodeError(f"{member} cannot be read from the uploaded zip ({exc})") \
                from None
        state.parsed_bytes += len(source)
        state.parses += 1
        names = state.names[member] = self.parser(member, source)
        return names


def top_level_names(member: str, source: bytes) -> frozenset[str]:
    """The names ``source`` (the module file ``member``) defines or imports at top level.

    Raises:
        CodeError: it does not parse.
    """
    try:
        tree = ast.parse(source, filename=member)
    # CPython's parser reports nesting too deep for it as RecursionError or
    # MemoryError ("-" * 200000 + "1"), and so does a parse past a memory cap (the
    # daemon's child): the source's fault, not the daemon's.
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        reason = str(exc) or "nested too deeply or too large for the parser's memory"
        raise CodeError(f"{member} does not parse: {reason}") from None
    return frozenset(_top_level_names(tree))


def _count_central_directory(fp: IO[bytes], limit: int) -> tuple[int, bool]:
    """Count the central directory's entries without building anything per entry:
    ``(count, exact)``. Over ``limit`` the count is the declared one (exact) or, when
    the directory holds more entries than it declares, ``limit + 1`` (not exact).

    Raises:
        zipfile.BadZipFile: no end of central directory record, or a malformed entry.
    """
    fp.seek(0, 2)
    size = fp.tell()
    tail_start = max(0, size - _EOCD_SEARCH)
    fp.seek(tail_start)
    tail = fp.read()
    at = tail.rfind(_EOCD_SIG)
    while at >= 0 and at + _EOCD.size > len(tail):
        at = tail.rfind(_EOCD_SIG, 0, at)
    if at < 0:
        raise zipfile.BadZipFile("File is not a zip file")
    eocd_pos = tail_start + at
    (_, _, _, _, entries, cd_size, _, _) = _EOCD.unpack_from(tail, at)
    record_pos = eocd_pos
    if entries == 0xFFFF or cd_size == 0xFFFFFFFF:
        loc_at = at - _ZIP64_LOCATOR.size
        if loc_at >= 0 and tail[loc_at:loc_at + 4] == _ZIP64_LOCATOR_SIG:
            # Right before the locator, as zipfile reads it (not at the declared
            # offset, which prepended data would shift).
            z64_pos = eocd_pos - _ZIP64_LOCATOR.size - _ZIP64_EOCD.size
            if z64_pos < 0:
                raise zipfile.BadZipFile("corrupt zip64 end of central directory record")
            fp.seek(z64_pos)
            record = fp.read(_ZIP64_EOCD.size)
            if len(record) < _ZIP64_EOCD.size or record[:4] != _ZIP64_EOCD_SIG:
                raise zipfile.BadZipFile("corrupt zip64 end of central directory record")
            fields = _ZIP64_EOCD.unpack(record)
            entries, cd_size = fields[7], fields[8]
            record_pos = z64_pos
    if entries > limit:
        return entries, True
    # As zipfile does: the directory ends where the end record starts (data may be
    # prepended to the archive, which shifts every declared offset alike).
    start = record_pos - cd_size
    if start < 0:
        raise zipfile.BadZipFile("the central directory's declared size exceeds the file")
    fp.seek(start)
    count = 0
    left = cd_size
    while left >= _CENTRAL.size:
        header = fp.read(_CENTRAL.size)
        if len(header) < _CENTRAL.size or header[:4] != _CENTRAL_SIG:
            raise zipfile.BadZipFile(f"central directory entry {count} is malformed")
        fields = _CENTRAL.unpack(header)
        variable = fields[10] + fields[11] + fields[12]     # name, extra, comment
        count += 1
        if count > limit:
            return count, False
        fp.seek(variable, 1)
        left -= _CENTRAL.size + variable
    return count, True


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
