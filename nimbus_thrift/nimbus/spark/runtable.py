"""The launch records a launcher holds, by topology id (:class:`RunTable`), for both
deploy modes: a record is read from its work directory the first time it is asked
for (after a daemon restart, or on another nimbus in HA mode), kept while its
topology may run, and forgotten once it is stopped.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from ...runner.rundir import RunDir


class LaunchRecord(Protocol):
    """What the table needs of a record."""

    dir: RunDir
    stopped: bool


R = TypeVar("R", bound=LaunchRecord)


class RunTable(Generic[R]):
    """Records by topology id.

    Args:
        topologies_dir: where the work directories are (``files_dir/topologies``).
        read: ``read(topology_id, root, launching)``: the record in the work directory
            ``root``, or None when there is none to look at (only when not
            ``launching``: a launch makes one); may raise to refuse the topology.
    """

    def __init__(self, topologies_dir: Path,
                 read: Callable[[str, Path, bool], R | None]):
        self.topologies_dir = topologies_dir
        self._read = read
        self._runs: dict[str, R] = {}
        self._lock = threading.Lock()

    def record(self, topology_id: str, work_dir: Path | None) -> R | None:
        """The record of ``topology_id``: with ``work_dir`` (a launch, a rebalance)
        always one, whose directory is that; without, the one held or read from the
        topology's directory, or None."""
        with self._lock:
            run = self._runs.get(topology_id)
            if run is not None:
                if work_dir is not None and work_dir != run.dir.root:
                    run.dir = RunDir(work_dir)
                return run
            root = work_dir if work_dir is not None else self.topologies_dir / topology_id
            run = self._read(topology_id, root, work_dir is not None)
            if run is None:
                return None
            if work_dir is not None or not run.stopped:
                # A stopped one is only being looked at (its directory is removed next).
                self._runs[topology_id] = run
            return run

    def forget(self, topology_id: str) -> None:
        with self._lock:
            self._runs.pop(topology_id, None)

    def all(self) -> list[R]:
        """The records held now."""
        with self._lock:
            return list(self._runs.values())

    def __getitem__(self, topology_id: str) -> R:
        with self._lock:
            return self._runs[topology_id]

    def __iter__(self) -> Iterator[str]:
        with self._lock:
            return iter(list(self._runs))
