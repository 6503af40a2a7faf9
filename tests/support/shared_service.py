"""A small service whose one call returns a struct the handler shares (rpc/shared.py),
and whose other returns an equal struct built per call: the shared-results tests'
service, over the same value both ways."""

from __future__ import annotations

import io
from types import ModuleType
from typing import Any

import thriftpy2

from nimbus_thrift.rpc.shared import share

SOURCE = """
struct Summary {
  1: list<string> names,
  2: i32 count,
}
service Board {
  Summary shared(),
  Summary fresh(),
}
"""


def board_thrift() -> ModuleType:
    return thriftpy2.load_fp(io.StringIO(SOURCE), module_name="shared_board_thrift")


class BoardHandler:
    """``shared()`` returns the one shared Summary until :meth:`replace`; ``fresh()``
    an equal Summary built for each call."""

    def __init__(self, idl: ModuleType, names: list[str]) -> None:
        self.idl = idl
        self.value: Any = None
        self.replace(names)

    def replace(self, names: list[str]) -> None:
        self.value = share(self.idl.Summary(names=list(names), count=len(names)))

    def shared(self) -> Any:
        return self.value

    def fresh(self) -> Any:
        return self.idl.Summary(names=list(self.value.names), count=self.value.count)
