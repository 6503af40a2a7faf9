"""Groupings, as in Storm: how the tuples of a bolt's input are spread over its tasks.

Below :mod:`.components` and :mod:`.topology`, which both use them.
"""

from __future__ import annotations

from dataclasses import dataclass

from .streams import TopologyError


@dataclass(frozen=True)
class GroupingSpec:
    """How tuples of one input are spread over a bolt's tasks."""

    kind: str                               # shuffle, fields, global, all, none, local_or_shuffle
    fields: tuple[str, ...] = ()

    def __repr__(self) -> str:
        if self.kind == "fields":
            return f"Grouping.fields({', '.join(map(repr, self.fields))})"
        return f"Grouping.{self.kind}"


class Grouping:
    """Groupings, as in Storm: ``Grouping.shuffle``, ``Grouping.fields("word")``, ..."""

    shuffle = GroupingSpec("shuffle")
    global_ = GroupingSpec("global")
    all = GroupingSpec("all")
    none = GroupingSpec("none")
    local_or_shuffle = GroupingSpec("local_or_shuffle")

    @staticmethod
    def fields(*names: str) -> GroupingSpec:
        """Tuples with equal values of ``names`` go to the same task."""
        if len(names) == 1 and isinstance(names[0], (list, tuple)):
            names = tuple(names[0])
        if not names or not all(isinstance(n, str) and n for n in names):
            raise TopologyError(f"Grouping.fields needs field names, not {names!r}")
        return GroupingSpec("fields", tuple(names))


# ``Grouping.global`` cannot be written in Python source; getattr(Grouping, "global") can.
setattr(Grouping, "global", Grouping.global_)
