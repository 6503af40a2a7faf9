"""From a topology file to what ``submitTopology`` sends: the class, its code zip, its
configuration and name, all checked here before any network traffic.

::

    path/to/project/               the project root: the nearest ancestor of the file
      wordcount/__init__.py          that is not a package (no __init__.py); it becomes
      wordcount/topology.py  <-      the zip's root, a sys.path entry in the runner, so
      wordcount/words.txt            classes are named as the runner imports them
                                     (wordcount.topology.SplitBolt), never __main__

    load_topology(file)   import the file with its root on sys.path; find its Topology
    build_zip(root)       *.py and package data, deterministic (same code, same sha256)
    prepare(file)         both, then the daemon's own checks (nimbus.validate,
                          nimbus.code) on the built zip, the conf and the name

Layers: the DSL (``topology``) < this module < the client's submit < the CLI. This
module knows no sockets; the DSL's ``__init__`` does not import it.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import keyword
import os
import stat
import sys
import traceback
import weakref
import zipfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Iterable, Mapping

from .code import MAX_MEMBERS, CodeArchive, CodeError
from .streams import TopologyError
from .topology import Topology
from .validate import InvalidTopology, TopologyPlan, check_name, check_topology, \
    parse_conf

#: Python code is kilobytes to a few megabytes; more than this usually means a data
#: directory or an unmarked virtualenv was swept in. (The daemon's own upload cap,
#: 256 MiB by default, is checked by the client before it uploads.)
DEFAULT_MAX_PACKAGE_BYTES = 64 << 20

#: Directory names never packaged (when they are not Python packages themselves):
#: build output and installed packages (the runner has its own site-packages).
EXCLUDED_DIRS = frozenset({"__pycache__", "build", "dist", "site-packages",
                           "dist-packages", "node_modules"})
#: File suffixes never packaged: bytecode is rebuilt from the sources by the runner.
EXCLUDED_SUFFIXES = (".pyc", ".pyo")

#: Zip member timestamps: the earliest a zip can hold, so a build does not depend on
#: when the files were last touched.
ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)
#: Member permissions: a regular file, rw-r--r--, whatever the mode on disk.
ZIP_MODE = (stat.S_IFREG | 0o644) << 16

#: Top-level module names never isolated when a topology file is imported: the DSL
#: the file imports must stay the very module whose Topology class is looked for.
_SHARED_MODULES = frozenset({"nimbus_thrift"})


#: Where load_topology found each class: its module is out of sys.modules afterwards,
#: so prepare() could not find its file from the class alone.
_LOADED: "weakref.WeakKeyDictionary[type, SourceLocation]" = weakref.WeakKeyDictionary()


class PackageError(ValueError):
    """The topology cannot be packaged or would be refused; one sentence naming the
    file (``path``) and what is wrong."""

    def __init__(self, message: str, path: Path | None = None) -> None:
        super().__init__(message)
        self.path = path


# --------------------------------------------------------------------------- loading


@dataclass(frozen=True)
class SourceLocation:
    """Where a topology file sits: its project root and its module name there."""

    file: Path
    root: Path
    module: str


def locate(path: str | os.PathLike[str]) -> SourceLocation:
    """The project root of a topology file and the file's module name under it.

    The root is the file's directory, or, when that is a package (has
    ``__init__.py``), the directory above its top-most enclosing package.

    Raises:
        PackageError: the file does not exist, is not a ``.py`` file, or some part of
            its module name is not a Python identifier.
    """
    file = Path(os.path.abspath(path))
    if not file.is_file():
        raise PackageError(f"{path}: no such file", file)
    if file.suffix != ".py":
        raise PackageError(f"{path}: a topology file must be a .py file", file)
    parts = [] if file.name == "__init__.py" else [file.stem]
    directory = file.parent
    while (directory / "__init__.py").is_file() and directory.parent != directory:
        parts.insert(0, directory.name)
        directory = directory.parent
    for part in parts:
        if not part.isidentifier() or keyword.iskeyword(part):
            raise PackageError(
                f"{path}: {part!r} is not a valid Python module name, so the runner could "
                "not import it; rename it (letters, digits and _, not starting with a digit)",
                file)
    return SourceLocation(file, directory, ".".join(parts))


def load_topology(path: str | os.PathLike[str], class_name: str | None = None, *,
                  name: str | None = None) -> type[Topology]:
    """Import a topology file and return the :class:`Topology` subclass it defines.

    The file is imported as a module of its project root (see :func:`locate`), so its
    components get the module names the runner will import them by. The import is
    isolated: modules of the project loaded before (another project's ``wordcount``)
    do not stand in, and ``sys.path`` and the project's ``sys.modules`` entries are as
    they were afterwards (the returned classes keep working).

    Args:
        path: the ``.py`` file.
        class_name: the class to take when the file defines several.
        name: when the file defines several and ``class_name`` is not given, the class
            whose topology name (:func:`topology_name`) is ``name``.

    Raises:
        PackageError: the file is missing, fails to import (the message has the
            exception's last line and where in the project it was raised), a
            ``TopologyError`` in its definition, no Topology subclass, several and none
            chosen, or ``class_name`` not among them.
    """
    where = locate(path)
    module = _import_isolated(where, str(path))
    defined = [value for value in vars(module).values()
               if isinstance(value, type) and issubclass(value, Topology)
               and value is not Topology and value.__module__ == module.__name__]
    if class_name is not None:
        chosen = [cls for cls in defined if cls.__name__ == class_name]
        if not chosen:
            listed = ", ".join(sorted(c.__name__ for c in defined)) or "none"
            raise PackageError(f"{path} defines no Topology class {class_name!r} "
                               f"(it defines: {listed})", where.file)
        return _loaded(chosen[0], where)
    # A base class without components (shared config for several topologies) is not
    # a candidate when a subclass with components is there.
    candidates = [cls for cls in defined if cls.specs()] or defined
    if not candidates:
        raise PackageError(f"{path} defines no Topology subclass (a class with component "
                           "specs as attributes, see nimbus_thrift.topology)", where.file)
    if len(candidates) > 1 and name is not None:
        named = [cls for cls in candidates if _default_name(cls, where) == name]
        if len(named) == 1:
            return _loaded(named[0], where)
    if len(candidates) > 1:
        listed = ", ".join(sorted(c.__name__ for c in candidates))
        raise PackageError(f"{path} defines several topologies ({listed}); choose one "
                           "with --topology CLASS (class_name=...)", where.file)
    return _loaded(candidates[0], where)


def _loaded(topology: type[Topology], where: SourceLocation) -> type[Topology]:
    _LOADED[topology] = where
    return topology


def _import_isolated(where: SourceLocation, shown: str) -> ModuleType:
    regular, namespace = _top_level_names(where.root)
    names = regular | namespace

    def collides(key: str) -> bool:
        top = key.partition(".")[0]
        if top in regular:
            return True
        # A directory without __init__.py only stands in for a namespace package: a
        # regular module of that name elsewhere on sys.path wins, here as in the runner.
        return top in namespace and getattr(sys.modules.get(top), "__file__", None) is None

    saved_path = list(sys.path)
    saved_bytecode = sys.dont_write_bytecode
    # Modules of the same names loaded before (from another project, or an earlier
    # version of this one) must not stand in for this project's: set them aside.
    set_aside = {key: sys.modules.pop(key) for key in
                 [k for k in sys.modules if collides(k)]}
    sys.path.insert(0, str(where.root))
    sys.dont_write_bytecode = True      # leave no __pycache__ in the user's project
    importlib.invalidate_caches()
    try:
        return importlib.import_module(where.module)
    except TopologyError as exc:
        raise PackageError(f"{shown}: {exc}", where.file) from None
    except (Exception, SystemExit) as exc:
        raise PackageError(f"cannot import {shown}: {_last_line(exc)}"
                           f"{_raised_at(exc, where.root)}", where.file) from None
    finally:
        sys.path[:] = saved_path
        sys.dont_write_bytecode = saved_bytecode
        for key in [k for k, m in list(sys.modules.items())
                    if k.partition(".")[0] in names and _from_root(m, where.root)]:
            del sys.modules[key]
        sys.modules.update(set_aside)


def _top_level_names(root: Path) -> tuple[frozenset[str], frozenset[str]]:
    """Top-level module names a root provides: ``(regular, namespace)``, regular being
    ``x.py`` and packages ``x/__init__.py``, namespace other directories. The DSL and
    the standard library are left out: the project cannot replace them."""
    regular, namespace = set(), set()
    try:
        entries = list(os.scandir(root))
    except OSError:
        entries = []
    for entry in entries:
        if entry.name.endswith(".py") and entry.is_file():
            regular.add(entry.name[:-3])
        elif entry.name.isidentifier() and entry.is_dir():
            if os.path.isfile(os.path.join(entry.path, "__init__.py")):
                regular.add(entry.name)
            else:
                namespace.add(entry.name)
    keep = _SHARED_MODULES | frozenset(sys.stdlib_module_names)
    return frozenset(regular - keep), frozenset(namespace - keep)


def _from_root(module: Any, root: Path) -> bool:
    """Whether a module was loaded from under ``root``."""
    file = getattr(module, "__file__", None)
    paths = [file] if file else list(getattr(module, "__path__", None) or ())
    for path in paths:
        try:
            Path(path).relative_to(root)
        except (TypeError, ValueError):
            continue
        return True
    return False


def _last_line(exc: BaseException) -> str:
    if isinstance(exc, SyntaxError):
        # str() keeps the file and line ("invalid syntax (wordcount.py, line 3)"),
        # which format_exception_only's last line drops.
        return f"{type(exc).__name__}: {exc}"
    if isinstance(exc, SystemExit):
        return f"SystemExit({exc.code!r}) was raised while importing"
    return traceback.format_exception_only(exc)[-1].strip()


def _raised_at(exc: BaseException, root: Path) -> str:
    """`` (at wordcount/bolts.py line 12)``: the innermost frame in the project."""
    if isinstance(exc, SyntaxError):
        return ""
    found = ""
    for frame in traceback.extract_tb(exc.__traceback__):
        try:
            rel = Path(frame.filename).relative_to(root)
        except ValueError:
            continue
        found = f" (at {rel.as_posix()} line {frame.lineno})"
    return found


def topology_name(topology: type[Topology], name: str | None = None,
                  where: SourceLocation | None = None) -> str:
    """The name to submit under: ``name``, else the class's ``name`` attribute, else the
    stem of its module's file (``wordcount`` for wordcount.py, the package for
    ``__init__.py``).

    Raises:
        PackageError: the name is invalid (``nimbus.validate.check_name``).
    """
    try:
        return check_name(name if name is not None else _default_name(topology, where))
    except InvalidTopology as exc:
        raise PackageError(str(exc)) from None


def _default_name(topology: type[Topology], where: SourceLocation | None) -> str:
    declared = getattr(topology, "name", None)
    if isinstance(declared, str) and declared:
        return declared
    module = where.module if where is not None else topology.__module__
    return module.rpartition(".")[2]


# --------------------------------------------------------------------------- configuration


def parse_conf_value(text: str) -> Any:
    """A ``--conf`` value: JSON when it parses (``2``, ``true``, ``null``, ``{"a": 1}``,
    ``"quoted"``), else the text itself as a string. ``NaN`` and ``Infinity`` stay
    strings: they are not JSON numbers, and the daemon refuses them."""
    try:
        return json.loads(text, parse_constant=_not_a_number)
    except ValueError:
        return text


def _not_a_number(name: str) -> Any:
    raise ValueError(name)


def parse_conf_option(item: str) -> tuple[str, Any]:
    """``key=value`` (the first ``=`` splits) as ``(key, parsed value)``.

    Raises:
        PackageError: no ``=``, or an empty key.
    """
    key, sep, value = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise PackageError(f"{item!r} is not key=value")
    return key, parse_conf_value(value)


def parse_conf_options(items: Iterable[str]) -> dict[str, Any]:
    """Several ``key=value`` items, later ones overriding earlier ones."""
    return dict(parse_conf_option(item) for item in items)


def topology_conf(topology: type[Topology], overrides: Mapping[str, Any] | None = None
                  ) -> dict[str, Any]:
    """The configuration to submit: the class's ``config``, then ``overrides``, checked
    as the daemon checks it.

    Raises:
        PackageError: not JSON-serialisable, or a key the daemon reads with a bad value.
    """
    conf = {**dict(topology.config), **dict(overrides or {})}
    try:
        text = json.dumps(conf, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise PackageError(f"the configuration of {topology.__name__} is not JSON: {exc}") \
            from None
    try:
        return parse_conf(text, "the topology configuration")
    except InvalidTopology as exc:
        raise PackageError(str(exc)) from None


# --------------------------------------------------------------------------- the zip


@dataclass(frozen=True)
class CodeZip:
    """A built code zip: where it is, its SHA-256 and size, what it holds and what
    was left out that a user should hear about (symbolic links)."""

    path: Path
    root: Path
    sha256: str
    size: int
    files: tuple[str, ...]
    skipped: tuple[str, ...]


def code_files(root: Path) -> tuple[list[tuple[str, Path]], list[str]]:
    """What :func:`build_zip` packages from ``root``: ``(member name, file)`` pairs in
    member order, and a sentence per symbolic link skipped.

    Packaged: every ``*.py`` file, and every other file inside a Python package (its
    data). Never: hidden files and directories (``.git``, ``.venv``, ``.env``),
    virtualenvs (any directory holding ``pyvenv.cfg``), ``__pycache__``, ``*.pyc``,
    ``build``, ``dist``, ``*.egg-info`` and installed packages (``site-packages``),
    unless such a directory is itself a Python package. Symbolic links are skipped,
    not followed: the zip holds what is under the root and nothing else.
    """
    files: list[tuple[str, Path]] = []
    skipped: list[str] = []
    in_package = {root: False}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        kept = []
        for name in sorted(dirnames):
            sub = here / name
            if sub.is_symlink():
                skipped.append(_link_note(root, sub))
                continue
            is_package = (sub / "__init__.py").is_file()
            if name.startswith(".") or (sub / "pyvenv.cfg").exists():
                continue
            if not is_package and (name in EXCLUDED_DIRS or name.endswith(".egg-info")):
                continue
            in_package[sub] = in_package[here] or is_package
            kept.append(name)
        dirnames[:] = kept
        for name in sorted(filenames):
            file = here / name
            if name.startswith(".") or name.endswith(EXCLUDED_SUFFIXES):
                continue
            if file.is_symlink():
                skipped.append(_link_note(root, file))
                continue
            if not file.is_file():
                continue                    # a socket, a FIFO
            if name.endswith(".py") or in_package[here]:
                files.append((file.relative_to(root).as_posix(), file))
    files.sort()
    skipped.sort()
    return files, skipped


def _link_note(root: Path, link: Path) -> str:
    try:
        target = os.readlink(link)
    except OSError:
        target = "?"
    return f"skipped symbolic link {link.relative_to(root).as_posix()} -> {target}"


def build_zip(root: str | os.PathLike[str], dest: str | os.PathLike[str], *,
              max_bytes: int = DEFAULT_MAX_PACKAGE_BYTES) -> CodeZip:
    """Zip the code under ``root`` (see :func:`code_files`) into ``dest``.

    Deterministic: members sorted, fixed timestamps and permissions, fixed
    compression, no directory entries; the same files give the same bytes, so the
    same SHA-256.

    Raises:
        PackageError: more than ``max_bytes`` of files (the message names the largest),
            more members than the daemon accepts, or a file unreadable.
    """
    root = Path(os.path.abspath(root))
    dest = Path(dest)
    files, skipped = code_files(root)
    sizes = []
    for arcname, file in files:
        try:
            sizes.append((file.stat().st_size, arcname))
        except OSError as exc:
            raise PackageError(f"cannot read {file}: {exc.strerror or exc}", file) from None
    total = sum(size for size, _ in sizes)
    if total > max_bytes:
        largest = ", ".join(f"{name} ({size:,} bytes)"
                            for size, name in sorted(sizes, reverse=True)[:3])
        raise PackageError(f"the code under {root} is {total:,} bytes, over the limit of "
                           f"{max_bytes:,}; the largest files: {largest} (only *.py files "
                           "and files inside Python packages are packaged)", root)
    if len(files) > MAX_MEMBERS:
        raise PackageError(f"the code under {root} has {len(files):,} files; the daemon "
                           f"accepts at most {MAX_MEMBERS:,}", root)
    digest = hashlib.sha256()
    with open(dest, "wb") as out:
        with zipfile.ZipFile(out, "w") as zf:
            for arcname, file in files:
                info = zipfile.ZipInfo(arcname, date_time=ZIP_EPOCH)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.create_system = 3          # Unix, so external_attr reads as a mode
                info.external_attr = ZIP_MODE
                try:
                    data = file.read_bytes()
                except OSError as exc:
                    raise PackageError(f"cannot read {file}: {exc.strerror or exc}",
                                       file) from None
                zf.writestr(info, data, compresslevel=9)
    with open(dest, "rb") as built:
        for block in iter(lambda: built.read(1 << 20), b""):
            digest.update(block)
    return CodeZip(path=dest, root=root, sha256=digest.hexdigest(),
                   size=dest.stat().st_size, files=tuple(name for name, _ in files),
                   skipped=tuple(skipped))


# --------------------------------------------------------------------------- all of it


@dataclass(frozen=True)
class PreparedTopology:
    """A topology ready to upload and submit, having passed the daemon's checks."""

    name: str
    topology: type[Topology]
    struct: Any                     # the IDL's StormTopology
    conf: dict[str, Any]
    code: CodeZip
    plan: TopologyPlan

    @property
    def json_conf(self) -> str:
        """The configuration as submitTopology's jsonConf."""
        return json.dumps(self.conf, sort_keys=True)


def source_of(topology: type[Topology]) -> SourceLocation:
    """Where a Topology subclass's module sits: its file, project root and module name.

    Raises:
        PackageError: the class's module has no file (defined in an interactive
            session), or its file does not match its module name.
    """
    if topology in _LOADED:
        return _LOADED[topology]
    module = sys.modules.get(topology.__module__)
    filename = getattr(module, "__file__", None)
    if not filename:
        raise PackageError(f"{topology.__name__} is defined in {topology.__module__!r}, "
                           "which has no file; define it in a .py file")
    file = Path(os.path.abspath(filename))
    if topology.__module__ == "__main__":
        # Run as a script: its classes say __main__, which the runner cannot import.
        # The file is imported again under its own name (see prepare).
        return locate(file)
    parts = topology.__module__.split(".")
    root = file.parent if file.name == "__init__.py" else file
    for _ in parts:
        root = root.parent
    return SourceLocation(file, root, topology.__module__)


def prepare(topology: type[Topology] | str | os.PathLike[str], dest: str | os.PathLike[str],
            *, name: str | None = None, conf: Mapping[str, Any] | None = None,
            class_name: str | None = None,
            max_bytes: int = DEFAULT_MAX_PACKAGE_BYTES) -> PreparedTopology:
    """Load (a path) or take (a class) a topology, build its code zip at ``dest`` and
    run the daemon's submit checks locally: the name, the configuration, the
    topology's structure, and every component's ``module.Class`` found in the zip.

    Args:
        topology: a topology ``.py`` file, or a Topology subclass (its project root
            is derived from its module's file and name).
        dest: where to write the zip (the caller removes it).
        name: the topology name (default: see :func:`topology_name`).
        conf: configuration over the class's ``config``.
        class_name: which class, when the file defines several.
        max_bytes: the cap on the packaged files' total size.

    Raises:
        PackageError: any of the above fails; one sentence naming the file.
    """
    if isinstance(topology, type):
        if not issubclass(topology, Topology):
            raise PackageError(f"{topology.__name__} is not a Topology subclass")
        where = source_of(topology)
        shown = str(where.file)
        if topology.__module__ == "__main__":
            topology = load_topology(where.file, topology.__name__)
    else:
        where = locate(topology)
        shown = str(topology)
        topology = load_topology(topology, class_name, name=name)
    if where.root.name in ("site-packages", "dist-packages"):
        raise PackageError(f"{shown} is installed in {where.root}; submit it from its "
                           "project's sources (the whole of site-packages is not packaged)",
                           where.file)
    submit_name = topology_name(topology, name, where)
    full_conf = topology_conf(topology, conf)
    try:
        struct = topology.to_thrift()
    except TopologyError as exc:
        raise PackageError(f"{shown}: {exc}", where.file) from None
    code = build_zip(where.root, dest, max_bytes=max_bytes)
    try:
        archive = CodeArchive.open(code.path)
        plan = check_topology(struct, full_conf, archive)
    except (InvalidTopology, CodeError) as exc:
        raise PackageError(f"{shown}: {exc} (in the code packaged from {where.root}); "
                           "nothing was uploaded", where.file) from None
    return PreparedTopology(submit_name, topology, struct, full_conf, code, plan)
