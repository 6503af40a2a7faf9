"""Names a package re-exports from its modules, imported on first use (PEP 562's module
``__getattr__``), for packages whose ``__init__`` must stay cheap to import: see the
tables in ``nimbus_thrift/__init__.py`` and ``nimbus_thrift/client/__init__.py``."""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable


def lazy_exports(package: str, exports: dict[str, str]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, where ``exports`` maps each
    name to the submodule (relative to ``package``) that defines it. A name is imported
    once, then kept in the package's namespace."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{module}", package), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *exports})

    return __getattr__, __dir__
