"""What the daemon does on its own, outside any call: recovery at start (uploads, blobs,
work directories and rows reconciled, timers re-armed, every topology handed to the
launcher again), the topologies' due actions (a killed topology's removal, a
rebalance's apply) run by the timers, and the periodic sweep of expired uploads.

A due action's state change is committed under the topology's lock; its launcher
part runs after, on the topology's background queue (:mod:`.launching`).
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

import structlog

from ..blobs.store import BlobStore
from ..config import NimbusConfig
from ..launcher import Launcher
from ..role import Role
from ..state.lifecycle import GONE, PREVIOUS, Event, Status, next_status
from ..state.locks import KeyedLocks
from ..state.store import Action, Store, TopologyRecord
from ..state.timers import Timers
from ..transfers.uploads import Transfers
from .infos import Infos
from .launching import Launching

log = structlog.get_logger(__name__)

#: A due action met while this nimbus does not lead (yet) is looked at again this
#: much later.
FOLLOWER_RETRY_SECS = 1.0

#: A removal whose launcher stop failed is retried after this long.
REMOVE_RETRY_SECS = 30.0


class Upkeep:
    """Recovery, due actions and sweeps; owns the :class:`~..state.timers.Timers`
    that run them (``timers``, which the calls arm when they store an action).

    Args:
        config: the daemon's configuration (sweep period, stop grace, reply wait).
        store: the daemon's state.
        launcher: told to stop a removed topology.
        launching: runs launcher calls in each topology's order.
        infos: forgets what it cached of a removed topology.
        transfers: the uploads, recovered at start and swept.
        blobs: the blob store, recovered at start and swept.
        locks: the topologies' locks.
        names_lock: the name table's lock, which a sweep holds (a submit checks its
            upload under it before its row references it).
        topologies_dir: the topologies' work directories.
        clock: epoch seconds.
    """

    def __init__(self, config: NimbusConfig, store: Store, launcher: Launcher,
                 launching: Launching, infos: Infos, transfers: Transfers,
                 blobs: BlobStore, locks: KeyedLocks, names_lock: threading.Lock,
                 topologies_dir: Path, clock: Callable[[], float],
                 role: Role | None = None):
        self._config = config
        self._role = role
        self._store = store
        self._launcher = launcher
        self._launching = launching
        self._infos = infos
        self._transfers = transfers
        self._blobs = blobs
        self._locks = locks
        self._names_lock = names_lock
        self._topologies_dir = topologies_dir
        self._clock = clock
        self._removing: set[str] = set()        # removals whose stop is under way
        self._removing_lock = threading.Lock()
        self.timers = Timers(self.run_action, self.sweep,
                             sweep_every=config.sweep_secs, clock=clock)

    # --- at start -------------------------------------------------------------------
    def recover(self) -> None:
        """After (re)start: reconcile uploads and work directories with the rows,
        re-arm timers, hand every known topology to the launcher again (which adopts
        what still runs)."""
        self._transfers.recover()
        self._blobs.recover()
        ids = self._store.topology_ids()
        self._sweep_work_dirs(ids)
        for action in self._store.actions():
            self.timers.arm(action.topology_id, action.due_at)
        jobs = []
        for topology_id in ids:
            try:
                rec = self._store.topology(topology_id)
            except ValueError as exc:       # a row this daemon cannot decode
                log.error("topology_unreadable", topology=topology_id, error=str(exc))
                continue
            if rec is None or not self._launching.work_dir(rec.id).is_dir():
                continue
            log.info("topology_recovered", topology=rec.id, status=rec.status)
            jobs.append(self._launching.in_background(
                rec.id, "launch", self._launching.launch_now, rec.id))
        # Quick launchers (adopting what runs) are done before the daemon serves; a
        # slow one carries on in the background.
        deadline = time.monotonic() + self._config.launcher_reply_wait_secs
        for job in jobs:
            job.wait(max(0.0, deadline - time.monotonic()))

    def _sweep_work_dirs(self, ids: list[str]) -> None:
        """A work directory without a row is a leftover of a removal or a submit cut
        short: deleted. A row without its work directory (a crash between deleting the
        directory and the row, or a directory deleted by hand) is removed the normal
        way: its launcher is told to stop, then the row goes."""
        known = set(ids)
        for entry in sorted(self._topologies_dir.iterdir()):
            if entry.name not in known and self._role is None:
                log.warning("work_dir_orphan_removed", topology=entry.name,
                            path=str(entry))
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
        now = self._clock()
        for topology_id in ids:
            if self._launching.work_dir(topology_id).is_dir():
                continue
            if self._role is not None:
                # HA mode: the shared directory may be unmounted or lagging on this
                # host; a nimbus that deleted what it could not read once removed every
                # topology of a Storm cluster (STORM-526). Reported, never removed.
                log.error("topology_code_unreadable", topology=topology_id,
                          path=str(self._launching.work_dir(topology_id)),
                          action="kept; check shared_dir on this nimbus")
                continue
            log.warning("topology_without_work_dir", topology=topology_id,
                        action="removed now")
            with self._store.transaction():
                self._store.set_status(topology_id, Status.KILLED.value, None)
                self._store.set_action(Action(topology_id, "remove", now, {}))

    # --- periodically ---------------------------------------------------------------
    def _follows(self) -> bool:
        """HA mode, another nimbus leads: state changes are its to make."""
        return self._role is not None and not self._role.leading()

    def step_down(self) -> None:
        """Leadership lost (HA mode): no timer fires here any more, and every topology
        is stopped on this host, in the background (see NimbusHandler.step_down),
        unless the launcher runs them elsewhere (``runs_elsewhere``: cluster mode)."""
        self.timers.clear()
        if getattr(self._launcher, "runs_elsewhere", False):
            # Drivers on a cluster (deploy_mode cluster): nothing of them is on this
            # host, and the new leader adopts them by their driver ids.
            log.info("step_down_drivers_kept", launcher=self._launcher.name)
            return
        for topology_id in self._store.topology_ids():
            self._launching.in_background(topology_id, "stop", self._stop_here,
                                          topology_id)

    def _stop_here(self, topology_id: str) -> None:
        # Not Launching.call: a failure is this host's to log, not a state change.
        try:
            self._launcher.stop(topology_id, self._config.stop_grace_secs)
        except Exception as exc:  # noqa: BLE001 - the others are still stopped
            log.error("step_down_stop_failed", topology=topology_id, error=str(exc))

    def sweep(self) -> None:
        """Delete expired uploads and blob sessions (the timers call this)."""
        if self._follows():
            return
        # Under the name table's lock: a submit that found its upload complete checks it
        # again under this lock before its row references it, so the retention sweep
        # cannot delete it in between.
        with self._names_lock:
            self._transfers.sweep()
            self._blobs.sweep()

    # --- due actions ----------------------------------------------------------------
    def run_action(self, topology_id: str) -> None:
        """Run the topology's pending action if it is due (called by the timers). The
        state change is committed here; the launcher's part runs in the background."""
        if self._follows():
            # Not yet leading (taking over: recover armed it) or no longer (the timers
            # were cleared): look again in a second rather than drop it.
            self.timers.arm(topology_id, self._clock() + FOLLOWER_RETRY_SECS)
            return
        with self._locks.hold(topology_id):
            action = self._store.action(topology_id)
            rec = self._store.topology(topology_id)
            if action is None or rec is None or action.due_at > self._clock():
                return
            if action.kind == "remove":
                assert next_status(rec.name, Status(rec.status), Event.REMOVE) == GONE
                with self._removing_lock:
                    if topology_id in self._removing:
                        return              # its stop is under way already
                    self._removing.add(topology_id)
            elif action.kind == "rebalance":
                self._apply_rebalance(rec, action)
                return
            else:
                log.error("unknown_action", topology=topology_id, kind=action.kind)
                self._store.clear_action(topology_id)
                return
        self._launching.in_background(topology_id, "stop", self._remove, topology_id)

    def _remove(self, topology_id: str) -> None:
        """Stop the topology's processes, then delete its work directory, then its row
        (a crash in between leaves a row without a directory: swept at start)."""
        try:
            stopped = self._launching.call(topology_id, self._launcher.stop, topology_id,
                                           self._config.stop_grace_secs)
            with self._locks.hold(topology_id):
                if self._store.topology(topology_id) is None:
                    return
                if not stopped:
                    due = self._clock() + REMOVE_RETRY_SECS
                    self._store.set_action(Action(topology_id, "remove", due, {}))
                    self.timers.arm(topology_id, due)
                    return
                shutil.rmtree(self._launching.work_dir(topology_id), ignore_errors=True)
                self._store.delete_topology(topology_id)
                self._infos.forget(topology_id)
            log.info("topology_removed", topology=topology_id)
        finally:
            with self._removing_lock:
                self._removing.discard(topology_id)

    def _apply_rebalance(self, rec: TopologyRecord, action: Action) -> None:
        target = next_status(rec.name, Status(rec.status), Event.DO_REBALANCE)
        assert target == PREVIOUS
        restored = rec.prev_status or Status.ACTIVE.value
        workers = action.options.get("num_workers") or rec.num_workers
        executors = {**rec.executors, **action.options.get("num_executors", {})}
        with self._store.transaction():
            self._store.set_parallelism(rec.id, workers, executors)
            self._store.set_status(rec.id, restored, None)
            self._store.clear_action(rec.id)
        log.info("topology_rebalanced", topology=rec.id, num_workers=workers,
                 executors=executors, status=restored)
        self._launching.in_background(rec.id, "rebalance", self._launching.rebalance_now,
                                      rec.id)
