"""Admitting topologies: how many a nimbus keeps, and the memory they take together on
this machine against a budget, checked at submit so that a topology that cannot run is
refused with a sentence instead of accepted and left to fail (or to push the machine
into swap). What one topology takes is its launcher's to say (``memory_request``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from ..topology.validate import InvalidTopology

#: Of the machine's memory, the share topologies may take by default: the rest is the
#: daemon's, the page cache's and everyone else's.
DEFAULT_BUDGET_SHARE = 0.8


def check_admission(request: int, confs: Iterable[Mapping[str, Any]],
                    memory_of: Callable[[Mapping[str, Any]], int], *,
                    max_topologies: int, budget: int) -> None:
    """Refuse a topology taking ``request`` bytes when the nimbus keeps
    ``max_topologies`` already (``confs``: one per kept topology, killed ones included
    until removed: their processes hold memory until stopped), or when the memory of
    those (``memory_of`` each conf) plus ``request`` would pass ``budget`` (0: none).

    Raises:
        InvalidTopology: with what is in use, what is free and the setting to change.
    """
    confs = list(confs)
    if len(confs) >= max_topologies:
        raise InvalidTopology(
            f"this nimbus keeps {len(confs)} topologies, its limit (max_topologies); "
            "kill one before submitting another")
    if request <= 0 or budget <= 0:
        return
    used = 0
    for conf in confs:
        try:
            used += memory_of(conf)
        except ValueError:
            pass            # an older row's setting this daemon would refuse: takes none
    if used + request > budget:
        raise InvalidTopology(
            f"the topology needs {format_bytes(request)} of this machine's memory, and "
            f"the {len(confs)} topologies here take {format_bytes(used)} of the "
            f"{format_bytes(budget)} they may use (spark_memory_budget): "
            f"{format_bytes(max(0, budget - used))} are free")


def machine_memory(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """Bytes of memory this machine has (``MemTotal``), or None where it cannot tell."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def default_budget(total: int | None = None) -> int:
    """The memory topologies may take together when no budget is set: a share of the
    machine's (:data:`DEFAULT_BUDGET_SHARE`), or 0 (no limit) where it is unknown."""
    total = machine_memory() if total is None else total
    return int(total * DEFAULT_BUDGET_SHARE) if total else 0


def format_bytes(size: int) -> str:
    """``1.7 GiB``, ``512 MiB``: how refusals state memory."""
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} bytes"
