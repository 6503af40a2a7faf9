"""Loading user code: a component's ``module.Class`` imported and instantiated, and
:class:`UserCodeError`, how what user code does wrong is reported.

No PySpark here (see :mod:`.tasks`).
"""

from __future__ import annotations

import importlib
from typing import Any

from ..topology.components import Context
from .plan import Node


class UserCodeError(Exception):
    """User code raised, or emitted something it did not declare.

    The message starts with the component (``bolt 'split' (wordcount.SplitBolt)
    raised ValueError: ...``): the driver finds it in Spark's error text by
    :data:`MARKER` and reports it as the failure.
    """

    #: How the driver recognises the message inside a Python traceback from Spark.
    MARKER = "UserCodeError: "

    def __init__(self, component: str, message: str):
        super().__init__(message)
        self.component = component


def user_error(node: Node, exc: BaseException, what: str = "") -> UserCodeError:
    where = f" in {what}" if what else ""
    return UserCodeError(node.id, f"{node.label} raised {type(exc).__name__}{where}: {exc}")


def load_class(node: Node) -> type:
    """Import ``module.Class`` of a component (nested classes allowed)."""
    parts = node.script.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:split]))
        except ModuleNotFoundError as exc:
            if exc.name and ".".join(parts[:split]).startswith(exc.name):
                continue
            raise user_error(node, exc, "import") from exc
        except Exception as exc:
            raise user_error(node, exc, "import") from exc
        try:
            for attr in parts[split:]:
                obj = getattr(obj, attr)
        except AttributeError:
            break
        if isinstance(obj, type):
            return obj
        break
    raise UserCodeError(node.id, f"{node.label}: cannot import {node.script!r} (is the "
                                 "code on the Python path of the driver and workers?)")


def new_instance(topology: str, node: Node, task: int, batch_id: int | None) -> Any:
    """An initialised instance of ``node``'s class for ``task``."""
    cls = load_class(node)
    try:
        instance = cls()
    except Exception as exc:
        raise user_error(node, exc, "__init__") from exc
    instance._emitted = []
    instance.context = Context(topology, node.id, task, node.parallelism, batch_id,
                               dict(node.conf))
    try:
        instance.initialize(dict(node.conf), instance.context)
    except Exception as exc:
        raise user_error(node, exc, "initialize()") from exc
    return instance
