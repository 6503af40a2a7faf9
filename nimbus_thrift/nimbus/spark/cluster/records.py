"""What a cluster-mode launch records of one topology (:class:`ClusterRun`), kept in its
work directory as ``launch.json`` with ``"mode": "cluster"``: the driver id above all,
by which any daemon that reads the directory (this one restarted, or another nimbus
that took over) adopts the driver instead of submitting a second one.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from ....runner.rundir import RunDir, RunState, write_atomic
from ..proctree import proc_info
from ..records import StatusFile

log = structlog.get_logger(__name__)

MODE = "cluster"


@dataclass
class ClusterRun(StatusFile):
    """One topology's driver on the cluster, as this launcher knows it."""

    topology_id: str
    dir: RunDir
    #: Held by launch, stop, rebalance and resume for as long as they take.
    lock: threading.RLock = field(default_factory=threading.RLock)
    driver_id: str = ""                 # "" until submitted
    submitted_at: float = 0.0
    submissions: int = 0                # drivers submitted for it, in all
    num_workers: int = 1
    spouts: tuple[str, ...] = ()
    stopped: bool = False               # stop() finished: never submitted again
    pending_relaunch: bool = False      # a rebalance stopped it and has not resubmitted
    launch_error: str = ""
    #: (component, message, epoch secs) of failures noticed, newest last.
    errors: list[tuple[str, str, int]] = field(default_factory=list)
    #: The attempt of the driver whose failure was last recorded in ``errors``.
    noted_attempt: int = 0
    status_key: tuple[int, int, int] | None = None
    status_cache: RunState | None = None

    def record(self) -> dict[str, Any]:
        return {"mode": MODE, "driver_id": self.driver_id,
                "submitted_at": self.submitted_at, "submissions": self.submissions,
                "num_workers": self.num_workers, "spouts": list(self.spouts),
                "stopped": self.stopped, "pending_relaunch": self.pending_relaunch,
                "launch_error": self.launch_error,
                "errors": [list(e) for e in self.errors],
                "noted_attempt": self.noted_attempt}

    def load(self, raw: dict[str, Any]) -> None:
        self.driver_id = str(raw.get("driver_id") or "")
        self.submitted_at = float(raw.get("submitted_at") or 0.0)
        self.submissions = int(raw.get("submissions") or 0)
        self.num_workers = int(raw.get("num_workers") or 1)
        self.spouts = tuple(str(s) for s in raw.get("spouts") or ())
        self.stopped = bool(raw.get("stopped"))
        self.pending_relaunch = bool(raw.get("pending_relaunch"))
        self.launch_error = str(raw.get("launch_error") or "")
        self.errors = [(str(c), str(m), int(w)) for c, m, w in raw.get("errors") or []]
        self.noted_attempt = int(raw.get("noted_attempt") or 0)

    @classmethod
    def read(cls, topology_id: str, root: Path) -> tuple["ClusterRun", int]:
        """The record in ``root/launch.json`` (an empty one if there is none), and the
        pid of a client-mode launch recorded there instead (0: none), whose driver
        may still run on this host."""
        run = cls(topology_id, RunDir(root))
        try:
            raw = json.loads(run.dir.launch.read_text())
        except FileNotFoundError:
            return run, 0
        except (OSError, ValueError) as exc:
            log.warning("cluster_launch_record_unreadable", topology=topology_id,
                        error=str(exc))
            return run, 0
        if not isinstance(raw, dict):
            return run, 0
        if raw.get("mode") != MODE:
            pid = int(raw.get("pid") or 0)
            info = proc_info(pid) if pid else None
            alive = info is not None and info.live and \
                info.start_ticks == int(raw.get("start_ticks") or 0)
            return run, pid if alive else 0
        try:
            run.load(raw)
        except (TypeError, ValueError) as exc:
            log.warning("cluster_launch_record_unreadable", topology=topology_id,
                        error=str(exc))
        return run, 0

    def save(self) -> None:
        if self.dir.root.is_dir():
            write_atomic(self.dir.launch, json.dumps(self.record(), indent=1))
