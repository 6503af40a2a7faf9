"""The methods Storm 2.x added to ``service Nimbus`` that are not the blob store's, the
log levels' or the UI pages' (:mod:`..blobs.calls`, :mod:`.logs`,
:mod:`.pages`): summaries and lookups by name, getTopologyInfo with options,
history and owners, and the calls that mean nothing on Spark.

What each does here:

===================================  ===============================================
getTopologySummaries                 getClusterInfo's topologies (``storm list``)
getTopologySummary(ByName)           one of them by id (name), or NotAliveException
getTopologyInfoByName                getTopologyInfo by name
getTopologyInfo(ByName)WithOpts      with GetInfoOptions.num_err_choice ALL/NONE/ONE
getTopologyHistory                   ids of the stored topologies ``user`` may read
getOwnerResourceSummaries            counts and requested memory per owner
getComponentPendingProfileActions    an empty list: nothing is ever pending
createStateInZookeeper               nothing to do: no ZooKeeper; succeeds (Storm's
                                     blob store client calls it after every upload)
setWorkerProfiler,                   not supported on Spark: a TApplicationException
uploadNewCredentials,                saying so, after the caller is authorized and
Storm's supervisor calls             the topology found
===================================  ===============================================

Each method runs inside :meth:`.access.Access.gate` (the rule of
:data:`.authz.METHODS`, then the audit) and :func:`.wire_errors.storm_errors` (errors
Storm does not declare for the method go back as a TApplicationException with a
sentence, never as a dropped connection or a traceback).
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import structlog

from ..launcher import Launcher
from ..security.authz import Authorizer
from ..state.store import Store, TopologyRecord
from .access import Access, acl_of
from .infos import Infos
from .wire_errors import NotSupported
from .wire_errors import storm_errors as _storm_errors

log = structlog.get_logger(__name__)

#: Storm's memory figures are in MB.
MB = 1024 * 1024


class StormTwoCalls:
    """Storm 2.x's summaries, lookups, history, owners and unsupported calls.

    Args:
        idl: the loaded IDL module (``idl`` is what :func:`.wire_errors.storm_errors`
            reads the declared exceptions from).
        access: the gate and the topology lookups.
        authz: who may call what.
        store: the daemon's state.
        launcher: asked what memory a topology takes.
        infos: builds the summaries and TopologyInfos.
        clock: epoch seconds.
    """

    def __init__(self, idl: ModuleType, access: Access, authz: Authorizer, store: Store,
                 launcher: Launcher, infos: Infos, clock: Callable[[], float]):
        self.idl = idl
        self._access = access
        self._authz = authz
        self._store = store
        self._launcher = launcher
        self._infos = infos
        self._views = infos.views
        self._clock = clock

    # --- summaries and lookups --------------------------------------------------------
    @_storm_errors
    def getTopologySummaries(self) -> list[Any]:
        with self._access.gate("getTopologySummaries") as call:
            self._authz.check(call)
            return self._views.summaries()

    @_storm_errors
    def getTopologySummaryByName(self, name: str) -> Any:
        with self._access.gate("getTopologySummaryByName", topology=name) as call:
            self._authz.check(call)
            return self._one_summary(lambda row: row.name == name,
                                     f"no topology named {name!r}")

    @_storm_errors
    def getTopologySummary(self, id: str) -> Any:
        with self._access.gate("getTopologySummary", topology=id) as call:
            self._authz.check(call)
            return self._one_summary(lambda row: row.id == id,
                                     f"no topology with id {id!r}")

    def _one_summary(self, match: Any, missing: str) -> Any:
        # The summaries getClusterInfo lists (kept by the views, with the same defences
        # against a damaged row); at most max_topologies of them.
        for summary in self._views.cluster_summary().topologies:
            if match(summary):
                return summary
        raise self.idl.NotAliveException(msg=missing)

    @_storm_errors
    def getTopologyInfoByName(self, name: str) -> Any:
        with self._access.gate("getTopologyInfoByName", topology=name) as call:
            rec = self._access.permitted_named(call, name)
            return self._views.topology_info(self._views.topology(rec.id)[0], rec)

    @_storm_errors
    def getTopologyInfoWithOpts(self, id: str, options: Any) -> Any:
        with self._access.gate("getTopologyInfoWithOpts", topology=id) as call:
            view, rec = self._views.topology(id)
            self._authz.check(call, view.acl)
            return self._views.topology_info(view, rec, _num_errors(options))

    @_storm_errors
    def getTopologyInfoByNameWithOpts(self, name: str, options: Any) -> Any:
        with self._access.gate("getTopologyInfoByNameWithOpts", topology=name) as call:
            rec = self._access.permitted_named(call, name)
            return self._views.topology_info(self._views.topology(rec.id)[0], rec,
                                             _num_errors(options))

    # --- history and owners -----------------------------------------------------------
    @_storm_errors
    def getTopologyHistory(self, user: str) -> Any:
        """Ids of the topologies ``user`` may read (every one for an admin, or when
        ``user`` is empty), from the store: the daemon keeps no row of a removed
        topology, so those are the live ones."""
        with self._access.gate("getTopologyHistory", user=user) as call:
            self._authz.check(call)
            ids = []
            for rec in self._store.topologies():
                if not user or self._authz.may_read(user, acl_of(rec)):
                    ids.append(rec.id)
            return self.idl.TopologyHistoryInfo(topo_ids=sorted(ids))

    @_storm_errors
    def getOwnerResourceSummaries(self, owner: str) -> list[Any]:
        """One summary per owner of stored topologies (``owner`` empty: all of them;
        else that owner's, with zeros when it has none, as Storm answers): topologies,
        executors, workers and tasks as stored, and the memory the launcher takes for
        them (its own estimate; 0 when it takes none on this machine). Storm's
        scheduler guarantees and the assigned figures have no counterpart: unset."""
        with self._access.gate("getOwnerResourceSummaries", owner=owner) as call:
            self._authz.check(call)
            totals: dict[str, _OwnerTotals] = {}
            if owner:
                totals[owner] = _OwnerTotals()
            for rec in self._store.topologies():
                if owner and rec.owner != owner:
                    continue
                totals.setdefault(rec.owner, _OwnerTotals()).add(
                    rec, self._requested_bytes(rec))
            return [t.summary(self.idl, name) for name, t in sorted(totals.items())]

    def _requested_bytes(self, rec: TopologyRecord) -> int:
        try:
            return max(0, int(self._launcher.memory_request(rec.conf)))
        except ValueError:      # a conf stored before the launcher checked it
            return 0

    # --- what means nothing on Spark --------------------------------------------------
    @_storm_errors
    def getComponentPendingProfileActions(self, id: str, component_id: str,
                                          action: Any) -> list[Any]:
        # Storm's UI asks on every component page; nothing is ever pending here.
        with self._access.gate("getComponentPendingProfileActions", topology_id=id) as call:
            self._access.permitted(call, id)
            return []

    @_storm_errors
    def setWorkerProfiler(self, id: str, profileRequest: Any) -> None:
        with self._access.gate("setWorkerProfiler", topology_id=id) as call:
            self._access.permitted(call, id)
            raise NotSupported(
                "setWorkerProfiler is not supported on Spark: its actions (JVM "
                "profiling, heap and thread dumps, worker restarts) act on Storm's "
                "worker JVMs, and a topology here runs as a Spark application")

    @_storm_errors
    def uploadNewCredentials(self, name: str, creds: Any) -> None:
        with self._access.gate("uploadNewCredentials", topology=name) as call:
            self._access.permitted_named(call, name)
            raise NotSupported(
                "uploadNewCredentials is not supported on Spark: this daemon has no "
                "credential plugins to hand them to (SubmitOptions.creds are accepted "
                "and ignored likewise)")

    @_storm_errors
    def getSupervisorAssignments(self, node: str) -> Any:
        with self._access.gate("getSupervisorAssignments", node=node) as call:
            self._authz.check(call)
            raise _no_supervisors("getSupervisorAssignments")

    @_storm_errors
    def sendSupervisorWorkerHeartbeats(self, heartbeats: Any) -> None:
        with self._access.gate("sendSupervisorWorkerHeartbeats") as call:
            self._authz.check(call)
            raise _no_supervisors("sendSupervisorWorkerHeartbeats")

    @_storm_errors
    def sendSupervisorWorkerHeartbeat(self, heatbeat: Any) -> None:
        with self._access.gate("sendSupervisorWorkerHeartbeat") as call:
            self._authz.check(call)
            raise _no_supervisors("sendSupervisorWorkerHeartbeat")

    @_storm_errors
    def processWorkerMetrics(self, metrics: Any) -> None:
        with self._access.gate("processWorkerMetrics") as call:
            self._authz.check(call)
            raise _no_supervisors("processWorkerMetrics")

    @_storm_errors
    def createStateInZookeeper(self, key: str) -> None:
        # Storm's Nimbus registers a finished blob in ZooKeeper here; this daemon's
        # blob is complete once finishBlobUpload returns, so there is nothing to do.
        with self._access.gate("createStateInZookeeper", blob=key) as call:
            self._authz.check(call)


class _OwnerTotals:
    """What getOwnerResourceSummaries adds up for one owner."""

    def __init__(self) -> None:
        self.topologies = 0
        self.executors = 0
        self.workers = 0
        self.tasks = 0
        self.memory_bytes = 0

    def add(self, rec: TopologyRecord, memory_bytes: int) -> None:
        self.topologies += 1
        self.executors += _total(rec.executors)
        self.workers += rec.num_workers if isinstance(rec.num_workers, int) else 0
        self.tasks += _total(rec.tasks)
        self.memory_bytes += memory_bytes

    def summary(self, idl: Any, owner: str) -> Any:
        memory_mb = self.memory_bytes / MB
        return idl.OwnerResourceSummary(
            owner=owner, total_topologies=_i32(self.topologies),
            total_executors=_i32(self.executors), total_workers=_i32(self.workers),
            total_tasks=_i32(self.tasks), requested_total_memory=memory_mb)


def _total(counts: Any) -> int:
    """The sum of a stored count per component (0 for a damaged row)."""
    if not isinstance(counts, dict):
        return 0
    return sum(v for v in counts.values() if isinstance(v, int) and not isinstance(v, bool))


def _i32(value: int) -> int:
    return max(0, min(value, 2**31 - 1))


def _num_errors(options: Any) -> Any:
    return getattr(options, "num_err_choice", None)


def _no_supervisors(method: str) -> NotSupported:
    return NotSupported(
        f"{method} is not supported on Spark: it is a call of Storm's supervisors and "
        "workers, and here Spark's own workers run the topologies")
