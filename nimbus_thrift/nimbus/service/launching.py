"""The launcher's side of the topologies: what the launcher is told of a topology (its
:class:`~..launcher.LaunchSpec`), and each launcher call run after the state change
that led to it is committed, outside every lock, on the topology's background queue
(:mod:`..state.background`), in the order the changes committed.

A launcher call that fails is recorded as an error on the topology (getTopologyInfo
shows it) and counted by method (``/metrics``): the request that led to it is
already committed, so it still succeeds for the client.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import ParamSpec

import structlog

from ...idl import NIMBUS_COMPONENT
from ...topology.validate import InvalidTopology, TopologyPlan, check_topology
from ..blobs.calls import TopologyBlobs
from ..config import NimbusConfig
from ..launcher import Launcher, LaunchSpec
from ..security.runas import run_as_name
from ..state.background import Job, SerialQueues
from ..state.lifecycle import Status
from ..state.store import Store, TopologyRecord
from ..transfers.partfiles import file_sha256
from ..transfers.uploads import Transfers
from .infos import Infos

log = structlog.get_logger(__name__)

P = ParamSpec("P")


class Launching:
    """Tells the launcher what the committed state says, one topology's calls in order.

    Args:
        launcher: what runs the topologies.
        store: the daemon's state.
        background: one serial queue per topology, where launcher calls run.
        config: the daemon's configuration (how long a reply waits for the launcher;
            whether topologies run as their owner's OS user).
        infos: the topologies' decoded structures.
        transfers: where a topology's uploaded code is.
        placement: places a topology's blobs before each launch.
        topologies_dir: the topologies' work directories.
        clock: epoch seconds (when a failure is recorded).
    """

    def __init__(self, launcher: Launcher, store: Store, background: SerialQueues,
                 config: NimbusConfig, infos: Infos, transfers: Transfers,
                 placement: TopologyBlobs, topologies_dir: Path,
                 clock: Callable[[], float]):
        self._launcher = launcher
        self._store = store
        self._background = background
        self._config = config
        self._infos = infos
        self._transfers = transfers
        self._placement = placement
        self._topologies_dir = topologies_dir
        self._clock = clock
        #: Launcher calls that raised, by method (launch, stop, ...): /metrics.
        self.failures: dict[str, int] = {}
        self._failures_lock = threading.Lock()

    def work_dir(self, topology_id: str) -> Path:
        """The topology's work directory (whether it exists or not)."""
        return self._topologies_dir / topology_id

    def spec(self, rec: TopologyRecord, plan: TopologyPlan | None = None) -> LaunchSpec:
        """What the launcher needs of ``rec``; ``plan`` is the submit's, else it is made
        here from the stored topology and conf (once per launch or rebalance)."""
        topology = self._infos.structure(rec)
        invalid = ""
        if plan is None:
            try:
                plan = check_topology(topology, rec.conf, None)
            except InvalidTopology as exc:
                # Only a launcher that needs the plan fails, as when it made it itself.
                invalid = str(exc)
        return LaunchSpec(
            topology_id=rec.id, name=rec.name,
            topology=topology,
            conf=rec.conf, code_path=self._transfers.code_path(rec.code_upload),
            work_dir=self.work_dir(rec.id), num_workers=rec.num_workers,
            executors=rec.executors, tasks=rec.tasks,
            active=rec.status == Status.ACTIVE.value, plan=plan, invalid=invalid,
            run_as=run_as_name(self._config, rec.owner))

    # --- launches -------------------------------------------------------------------
    def launch_submitted(self, topology_id: str, spec: LaunchSpec) -> None:
        """Launch a topology just submitted (``spec`` made from the submit's plan)."""
        self._placement.materialise(topology_id, spec.conf)
        self.call(topology_id, self._launcher.launch, spec)

    def launch_now(self, topology_id: str) -> None:
        """Launch a stored topology as it is now (at the daemon's start, and when a
        nimbus takes over in HA mode)."""
        rec = self._store.topology(topology_id)
        if rec is not None:
            if self._config.shared_dir is not None and not self._code_intact(rec):
                return
            self._placement.materialise(rec.id, rec.conf)
            self.call(rec.id, self._launcher.launch, self.spec(rec))

    def _code_intact(self, rec: TopologyRecord) -> bool:
        """HA mode: the code this nimbus is about to start is the code submitted (the
        shared directory may be unmounted, stale or damaged on this host). Otherwise
        the topology is not started and the error says why, on the topology."""
        path = self._transfers.code_path(rec.code_upload)
        try:
            digest = file_sha256(path)
        except OSError as exc:
            problem = f"cannot read its code at {path}: {exc.strerror or exc}"
        else:
            if digest == rec.code_sha256:
                return True
            problem = (f"its code at {path} has sha256 {digest}, not the {rec.code_sha256} "
                       f"submitted")
        message = f"not started on this nimbus: {problem}; check shared_dir here"
        log.error("topology_code_unreadable", topology=rec.id, problem=problem,
                  effect="not started; kept")
        self._store.add_error(rec.id, NIMBUS_COMPONENT, message, int(self._clock()))
        return False

    def rebalance_now(self, topology_id: str) -> None:
        """Tell the launcher the topology's parallelism as stored now."""
        rec = self._store.topology(topology_id)
        if rec is not None:             # its spec as of now: later changes are queued
            self.call(rec.id, self._launcher.rebalance, self.spec(rec))

    # --- calls ----------------------------------------------------------------------
    def call(self, topology_id: str, method: Callable[P, object],
             *args: P.args, **kwargs: P.kwargs) -> bool:
        """Call ``method`` of the launcher; on failure record the error on the topology
        and return False. The request that led here is already committed, so it still
        succeeds for the client."""
        try:
            method(*args, **kwargs)
            return True
        except Exception as exc:  # noqa: BLE001 - any launcher failure is recorded
            name = method.__name__
            with self._failures_lock:
                self.failures[name] = self.failures.get(name, 0) + 1
            message = f"launcher {name} failed: {type(exc).__name__}: {exc}"
            log.error("launcher_failed", topology=topology_id, method=name,
                      error=str(exc), exc_info=exc)
            if self._store.topology(topology_id) is not None:
                self._store.add_error(topology_id, NIMBUS_COMPONENT, message,
                                      int(self._clock()))
            return False
        finally:
            # What the launcher reports of it may have changed: the summaries ask again.
            self._infos.views.run_changed(topology_id)

    def in_background(self, topology_id: str, what: str,
                      func: Callable[P, object], *args: P.args, **kwargs: P.kwargs
                      ) -> Job:
        """Queue ``func`` on the topology's launcher queue (after its earlier calls)."""
        return self._background.submit(topology_id, lambda: func(*args, **kwargs), what)

    def queue_call(self, topology_id: str, method: Callable[P, object],
                   *args: P.args, **kwargs: P.kwargs) -> Job:
        """Queue a launcher call behind the topology's earlier ones. Called under the
        topology's lock, so the launcher sees its calls in the order their state
        changes committed (a kill's pause before the removal's stop; two toggles in
        the order they were stored)."""
        return self._background.submit(
            topology_id, lambda: self.call(topology_id, method, *args, **kwargs),
            method.__name__)

    def reply_after(self, topology_id: str, job: Job | None) -> None:
        """Wait a moment for a queued launcher call (outside every lock), so a quick
        launcher's outcome is in the reply; a slow one goes on after the reply."""
        wait = self._config.launcher_reply_wait_secs
        if job is not None and not job.wait(wait):
            log.info("launcher_call_continues", topology=topology_id, method=job.what,
                     waited_secs=wait)
