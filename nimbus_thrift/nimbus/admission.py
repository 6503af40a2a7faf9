"""Admitting topologies: how many a nimbus keeps, and the memory they take together on
this machine against a budget, checked at submit so that a topology that cannot run is
refused with a sentence instead of accepted and left to fail (or to push the machine
into swap). What one topology takes is its launcher's to say (``memory_request``).

The daemon keeps what the kept topologies take in an :class:`AdmissionLedger`, updated
as topologies come and go, so a submit's check does not grow with how many are kept
(summing decoded every topology's conf at each submit: ~0.5 s at 10,000).
"""

from __future__ import annotations

import threading
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
    used = 0
    if len(confs) < max_topologies and request > 0 and budget > 0:
        used = sum(_memory_or_none(memory_of, conf) for conf in confs)
    check_room(request, len(confs), used, max_topologies=max_topologies, budget=budget)


def check_room(request: int, kept: int, used: int, *, max_topologies: int,
               budget: int) -> None:
    """Refuse a topology taking ``request`` bytes when ``kept`` topologies are kept
    already and ``max_topologies`` is reached, or when the ``used`` bytes they take plus
    ``request`` would pass ``budget`` (0: none). :func:`check_admission` with the
    totals already known.

    Raises:
        InvalidTopology: with what is in use, what is free and the setting to change.
    """
    if kept >= max_topologies:
        raise InvalidTopology(
            f"this nimbus keeps {kept} topologies, its limit (max_topologies); "
            "kill one before submitting another")
    if request <= 0 or budget <= 0:
        return
    if used + request > budget:
        raise InvalidTopology(
            f"the topology needs {format_bytes(request)} of this machine's memory, and "
            f"the {kept} topologies here take {format_bytes(used)} of the "
            f"{format_bytes(budget)} they may use (spark_memory_budget): "
            f"{format_bytes(max(0, budget - used))} are free")


def _memory_or_none(memory_of: Callable[[Mapping[str, Any]], int],
                    conf: Mapping[str, Any]) -> int:
    try:
        return memory_of(conf)
    except ValueError:
        return 0            # an older row's setting this daemon would refuse: takes none


class AdmissionLedger:
    """The memory each kept topology takes (``memory_of`` its conf), and their total.

    A submit records what it added (:meth:`add`); rows removed since (or written by
    anything else) are found by comparing the number of rows with the number recorded
    (:meth:`sync`): the store counts its rows without reading them, so the check stays
    cheap however many are kept, and only a change costs a pass over the ids (confs are
    read only for ids not yet recorded). Exact while rows are inserted only by the
    submit path, which calls :meth:`add` (as in the daemon); a row written otherwise is
    found at the next sync, unless as many were removed meanwhile. Thread-safe.
    """

    def __init__(self, memory_of: Callable[[Mapping[str, Any]], int]):
        self._memory_of = memory_of
        self._bytes: dict[str, int] = {}
        self._total = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._bytes)

    @property
    def total(self) -> int:
        """Bytes the recorded topologies take together."""
        with self._lock:
            return self._total

    def add(self, topology_id: str, conf: Mapping[str, Any]) -> None:
        """Record the topology ``topology_id`` just stored with ``conf``."""
        size = _memory_or_none(self._memory_of, conf)
        with self._lock:
            self._total += size - self._bytes.get(topology_id, 0)
            self._bytes[topology_id] = size

    def sync(self, count: int, ids: Callable[[], Iterable[str]],
             conf_of: Callable[[str], Mapping[str, Any] | None]) -> None:
        """Make the records those of the stored topologies when ``count`` (how many
        are stored) differs from how many are recorded: ``ids()`` lists them and
        ``conf_of`` reads the conf of one not recorded (None: removed meanwhile)."""
        with self._lock:
            if count == len(self._bytes):
                return
            current: dict[str, int] = {}
            for topology_id in ids():
                size = self._bytes.get(topology_id)
                if size is None:
                    conf = conf_of(topology_id)
                    if conf is None:
                        continue
                    size = _memory_or_none(self._memory_of, conf)
                current[topology_id] = size
            self._bytes = current
            self._total = sum(current.values())


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
