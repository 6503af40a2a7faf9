"""Apache Storm's own IDL (storm.thrift), for the Nimbus compatibility tests.

Storm does not publish its IDL on a package registry, but the PyPI wheel of
streamparse 5.0.1 embeds Storm 1.1's storm.thrift verbatim, as the module-level
string ``_THRIFT_STR`` of ``streamparse/thrift.py``. scripts/install_interop.sh
downloads that wheel (no dependencies) into :data:`CACHE_DIR` and runs this file
as a script to write :data:`STORM_IDL`::

    python tests/interop/storm_idl.py WHEEL [OUT]

The string is read with :mod:`ast` (``ast.literal_eval`` of the assignment), never
by importing streamparse: its dependencies are heavy and importing would run its
code. The wheel is pinned by sha256 (PyPI files are immutable), and the written
file's first line says where it came from.

As a module (``interop.storm_idl``) it gives the tests :func:`storm_idl_present`,
:func:`require_storm_idl` and :func:`load_storm`. Script mode needs only the
standard library; pytest and thriftpy2 are imported by the functions that use them.
"""

from __future__ import annotations

import ast
import hashlib
import os
import sys
import zipfile
from functools import lru_cache
from pathlib import Path
from types import ModuleType

INTEROP_DIR = Path(__file__).resolve().parent
#: Downloaded wheels (gitignored).
CACHE_DIR = INTEROP_DIR / "cache"
#: The extracted IDL (gitignored).
STORM_IDL = INTEROP_DIR / "storm" / "storm.thrift"
#: ``thrift --gen py`` of :data:`STORM_IDL` (package ``storm``) and of idl/nimbus.thrift
#: (package ``nimbus``), both written by scripts/install_interop.sh.
GEN_STORM_PY = INTEROP_DIR / "gen-storm-py"
GEN_NIMBUS_PY = INTEROP_DIR / "gen-nimbus-py"

STREAMPARSE_VERSION = "5.0.1"
#: sha256 of streamparse-5.0.1-py2.py3-none-any.whl as served by PyPI.
WHEEL_SHA256 = "0afdf06c3d64d12425839ddda729c3d8b4a10d9ba6fd9e81a38aeef9288b6ce5"
SOURCE_MEMBER = "streamparse/thrift.py"
SOURCE_NAME = "_THRIFT_STR"
#: thriftpy2 registers this name in sys.modules; distinct from our nimbus_idl_thrift.
MODULE_NAME = "storm_idl_thrift"

INSTALL_HINT = "run scripts/install_interop.sh (or scripts/setup.sh) to extract it"


class ExtractError(Exception):
    """The wheel is not the pinned one, or does not hold the IDL where expected."""


def sha256_of(path: Path) -> str:
    """Return the hex sha256 of the file at ``path``."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 16), b""):
            digest.update(block)
    return digest.hexdigest()


def idl_from_source(source: str) -> str:
    """Return the string literal assigned to ``_THRIFT_STR`` in Python ``source``.

    Raises:
        ExtractError: no such assignment, or its value is not a string literal.
    """
    for node in ast.parse(source).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == SOURCE_NAME):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                raise ExtractError(f"{SOURCE_NAME} is not assigned a literal") from None
            if not isinstance(value, str):
                raise ExtractError(f"{SOURCE_NAME} is a {type(value).__name__}, not a str")
            return value
    raise ExtractError(f"no module-level assignment to {SOURCE_NAME}")


def extract(wheel: Path) -> str:
    """Return the text of Storm's IDL from the streamparse wheel at ``wheel``, preceded by
    a one-line ``//`` comment naming the wheel and its sha256.

    Raises:
        ExtractError: the wheel's sha256 is not :data:`WHEEL_SHA256`, or it lacks
            :data:`SOURCE_MEMBER` or the ``_THRIFT_STR`` literal.
    """
    digest = sha256_of(wheel)
    if digest != WHEEL_SHA256:
        raise ExtractError(f"{wheel} has sha256 {digest}, expected {WHEEL_SHA256} "
                           f"(streamparse {STREAMPARSE_VERSION}); delete it and download again")
    with zipfile.ZipFile(wheel) as zf:
        try:
            source = zf.read(SOURCE_MEMBER).decode("utf-8")
        except KeyError:
            raise ExtractError(f"{wheel} has no {SOURCE_MEMBER}") from None
    idl = idl_from_source(source)
    header = (f"// Apache Storm's storm.thrift, extracted by tests/interop/storm_idl.py from "
              f"{wheel.name} (sha256 {digest}), {SOURCE_MEMBER} {SOURCE_NAME}.\n")
    return header + idl.lstrip("\n")


def write(wheel: Path, out: Path = STORM_IDL) -> None:
    """Extract the IDL from ``wheel`` into ``out``, atomically (a reader never sees a
    half-written file). Raises what :func:`extract` raises, and ``OSError``."""
    text = extract(wheel)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.name}.tmp.{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, out)


def storm_idl_present() -> bool:
    """Whether :data:`STORM_IDL` has been extracted."""
    return STORM_IDL.is_file()


def require_storm_idl() -> Path:
    """Return :data:`STORM_IDL`; fail the calling test (never skip) if it is missing."""
    if not storm_idl_present():
        import pytest
        pytest.fail(f"Storm's IDL is missing ({STORM_IDL}): {INSTALL_HINT}", pytrace=False)
    return STORM_IDL


@lru_cache(maxsize=None)
def load_storm() -> ModuleType:
    """Load :data:`STORM_IDL` with thriftpy2 as module ``storm_idl_thrift``, once per process.

    Raises:
        FileNotFoundError: the IDL has not been extracted (see :func:`require_storm_idl`).
    """
    import thriftpy2

    if not storm_idl_present():
        raise FileNotFoundError(f"{STORM_IDL} is missing: {INSTALL_HINT}")
    return thriftpy2.load(str(STORM_IDL), module_name=MODULE_NAME)


def main(argv: list[str]) -> int:
    """``storm_idl.py WHEEL [OUT]``: write the IDL; returns the exit status."""
    if len(argv) not in (1, 2):
        print(f"usage: {Path(__file__).name} WHEEL [OUT]", file=sys.stderr)
        return 2
    wheel = Path(argv[0])
    out = Path(argv[1]) if len(argv) == 2 else STORM_IDL
    try:
        write(wheel, out)
    except (ExtractError, OSError, zipfile.BadZipFile, SyntaxError) as exc:
        print(f"storm_idl: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
