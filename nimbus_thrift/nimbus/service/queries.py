"""The read-only calls of ``service Nimbus``: configuration, the cluster summary, one
topology's information, configuration and structure.

They take no lock: the store gives each reading thread its own connection, and what is
derived from a record (its decoded structure, its listed counts) is cached per topology
id, which never changes. :class:`NimbusQueries` is the read half of
:class:`~.handler.NimbusHandler` (which extends it and owns the attributes declared
here), so both halves reach the daemon's state as attributes of one handler object.

Every IDL method, in both halves, runs inside :meth:`NimbusQueries._gate`: the call's
principal is checked by the rule of :data:`.authz.METHODS` before the method reads or
changes anything, and its outcome goes to the audit log (:mod:`.audit`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import structlog
from thriftpy2.utils import deserialize

from ... import __version__
from ...runner.rundir import ALL_COMPONENTS, RunDir
from ...topology.streams import STATEFUL_KEY
from ...topology.validate import TOPOLOGY_DEFAULTS, InvalidTopology, check_name, task_ranges
from ..security.audit import audited
from ..security.authz import Authorizer, Call, TopologyAcl, Unauthorized
from ..config import NimbusConfig, to_public
from ..launcher import Launcher, RunStatus
from .listing import CountsCache, number, text
from ..state.store import Store, TopologyListing, TopologyRecord
from .wire_errors import InvalidOption

log = structlog.get_logger(__name__)

#: Storm's window key for all-time statistics.
ALL_TIME = ":all-time"
#: The Storm release whose Nimbus API this daemon speaks (idl/nimbus.thrift follows
#: Storm 2.8's storm.thrift).
STORM_API_VERSION = "2.8.0"
#: Copies of a topology's code, as TopologySummary/TopologyInfo.replication_count
#: report it: one nimbus keeps one copy.
CODE_REPLICATION = 1
#: Executors listed by getTopologyInfo at most: a stored row with absurd counts (an
#: older daemon's) must not make one query loop for hours.
MAX_LISTED_EXECUTORS = 100_000


class NimbusQueries:
    """The read-only IDL methods; the handler's state is set by its ``__init__``."""

    idl: ModuleType
    config: NimbusConfig
    authz: Authorizer
    store: Store
    launcher: Launcher
    clock: Callable[[], float]
    started_at: float
    address: tuple[str, int]
    topologies_dir: Path
    _counts: CountsCache
    _protocol: Any
    _structs: dict[str, Any]

    @contextmanager
    def _gate(self, operation: str, **subject: Any) -> Iterator[Call]:
        """Run one IDL call: yields its :class:`~.authz.Call` (the method checks it
        with ``self.authz`` before it reads or changes anything), records the outcome
        in the audit log, and answers a refusal with the IDL's AuthorizationException."""
        call = Call.current(operation, **subject)
        try:
            with audited(call):
                yield call
        except Unauthorized as exc:
            raise self.idl.AuthorizationException(msg=str(exc)) from None

    def _alive(self, name: Any) -> TopologyRecord:
        """The topology named ``name``, or the IDL's NotAliveException."""
        rec = self.store.topology_named(name) if isinstance(name, str) else None
        if rec is None:
            raise self.idl.NotAliveException(msg=f"no topology named {name!r}")
        return rec

    def _acl(self, rec: TopologyRecord) -> TopologyAcl:
        return TopologyAcl.of(rec.id, rec.owner, rec.conf)

    def _readable(self, call: Call, topology_id: Any) -> TopologyRecord:
        """The topology ``topology_id``, if ``call`` may read it."""
        rec = self._by_id(topology_id)
        self.authz.check(call, self._acl(rec))
        return rec

    def getNimbusConf(self) -> str:
        with self._gate("getNimbusConf") as call:
            self.authz.check(call)
            return self._nimbus_conf()

    def _nimbus_conf(self) -> str:
        # No paths (Storm's storm.local.dir, the data directory, TLS files, socket) and
        # no lists of principals: config.to_public says which settings are public.
        host, port = self.address
        storm = {
            "nimbus.seeds": [host],
            "nimbus.thrift.port": port,
            "nimbus.thrift.max_buffer_size": self.config.max_frame_size,
            "nimbus.thrift.threads": self.config.worker_threads,
            "nimbus.file.copy.expiration.secs": self.config.file_copy_expiration_secs,
            "storm.thrift.transport": "framed, binary protocol",
            **TOPOLOGY_DEFAULTS,
        }
        ours = {f"nimbus-thrift.{key}": value
                for key, value in to_public(self.config).items()}
        return json.dumps({**storm, **ours, "nimbus-thrift.version": __version__,
                           "nimbus-thrift.bound.port": port}, sort_keys=True)

    def metrics_scope(self) -> Callable[[str], bool]:
        """The HTTP side's ``/metrics`` for the caller of this request: checked as
        getClusterInfo (USER), then which topologies' series it may see, by id: those
        it may read (TOPOLOGY_READ).

        Raises:
            AuthorizationException: the caller may not call getClusterInfo.
        """
        with self._gate("getClusterInfo") as call:
            self.authz.check(call)
        principal = call.principal

        def readable(topology_id: str) -> bool:
            if principal is None:
                return True             # the daemon itself
            rec = self.store.topology(topology_id)
            return rec is not None and self.authz.may_read(principal, self._acl(rec))
        return readable

    def getClusterInfo(self) -> Any:
        # Every topology is listed to every user, as Storm does: names, owners and
        # counts are not secret; confs, code and details are (the topology rules).
        with self._gate("getClusterInfo") as call:
            self.authz.check(call)
            return self._cluster_info()

    def _cluster_info(self) -> Any:
        nodes = self.launcher.nodes()
        now = self.clock()
        supervisors = [self.idl.SupervisorSummary(
            host=n.host, uptime_secs=_secs(now - n.started_at), num_workers=n.slots,
            num_used_workers=n.used_slots, supervisor_id=n.node_id,
            version=n.version or "VERSION_NOT_PROVIDED") for n in nodes]
        return self.idl.ClusterSummary(
            supervisors=supervisors, nimbus_uptime_secs=_secs(now - self.started_at),
            topologies=self._summaries(now), nimbuses=[self._leader()])

    def _summaries(self, now: float) -> list[Any]:
        """Every stored topology's TopologySummary (and the counts cache pruned to them)."""
        rows = self.store.listing()
        topologies = [self._summary(row, now) for row in rows]
        self._counts.keep_only({row.id for row in rows})
        return topologies

    def getLeader(self) -> Any:
        with self._gate("getLeader") as call:
            self.authz.check(call)
            return self._leader()

    def _leader(self) -> Any:
        host, port = self.address
        # TLS, when configured, is on the same port (the daemon tells it from the
        # first bytes), so that is the TLS port too.
        tls_port = port if self.config.tls_cert_file is not None else None
        return self.idl.NimbusSummary(host=host, port=port,
                                      uptime_secs=_secs(self.clock() - self.started_at),
                                      isLeader=True, version=nimbus_version(),
                                      tlsPort=tls_port)

    def isTopologyNameAllowed(self, name: str) -> bool:
        with self._gate("isTopologyNameAllowed") as call:
            self.authz.check(call)
            try:
                check_name(name)
            except InvalidTopology:
                return False
            return not self.store.name_taken(name)

    def getTopologyInfo(self, id: str) -> Any:
        with self._gate("getTopologyInfo", topology=id) as call:
            return self._topology_info(self._readable(call, id))

    def _topology_info(self, rec: TopologyRecord, num_errors: int | None = None) -> Any:
        """``rec``'s TopologyInfo; ``num_errors`` is a NumErrorsChoice (None: ALL)."""
        now = self.clock()
        run = self.run_status(rec.id)
        executors = []
        listed = sum(min(max(0, e), max(0, rec.tasks.get(c, 0)))
                     for c, e in rec.executors.items()
                     if isinstance(e, int) and isinstance(rec.tasks.get(c, 0), int))
        if run.assigned and listed > MAX_LISTED_EXECUTORS:
            log.warning("executors_not_listed", topology=rec.id, executors=listed)
            run = dataclasses.replace(
                run, detail=f"{run.detail} (its {listed} executors are not listed: the "
                            f"limit is {MAX_LISTED_EXECUTORS})", components={})
            executors_listed = False
        else:
            executors_listed = run.assigned
        if executors_listed:
            uptime = _secs(now - (run.started_at or now))
            ranges = task_ranges(rec.tasks, rec.executors)
            per_component: dict[str, int] = {}
            for component, _, _ in ranges:
                per_component[component] = per_component.get(component, 0) + 1
            seen: dict[str, int] = {}
            for component, first, last in ranges:
                index = seen[component] = seen.get(component, -1) + 1
                executors.append(self.idl.ExecutorSummary(
                    executor_info=self.idl.ExecutorInfo(task_start=first, task_end=last),
                    component_id=component, host=run.host, port=run.port,
                    uptime_secs=uptime,
                    stats=self._executor_stats(rec, run, component, index,
                                               per_component[component])))
        errors: dict[str, list[Any]] = {}
        for component, message, when in [*self.store.errors(rec.id), *run.errors]:
            errors.setdefault(component, []).append(
                self.idl.ErrorInfo(error=message, error_time_secs=int(when)))
        return self.idl.TopologyInfo(
            id=rec.id, name=rec.name, uptime_secs=_secs(now - rec.submitted_at),
            executors=executors, status=rec.status,
            errors=self._chosen_errors(errors, num_errors),
            component_debug=self._component_debug(rec),
            sched_status=run.detail, owner=rec.owner,
            storm_version=self._topology_struct(rec).storm_version,
            replication_count=CODE_REPLICATION)

    def _component_debug(self, rec: TopologyRecord) -> dict[str, Any] | None:
        """TopologyInfo.component_debug: the tuple sampling set by ``debug``, by
        component id, the topology-wide setting under the topology's id (Storm's key for
        it); None when debug was never set, or the settings cannot be read (a query must
        still answer)."""
        try:
            settings = RunDir(self.topologies_dir / rec.id).read_settings()
        except (OSError, ValueError, TypeError) as exc:
            log.warning("settings_unreadable", topology=rec.id, error=str(exc))
            return None
        debug = {rec.id if component == ALL_COMPONENTS else component:
                 self.idl.DebugOptions(enable=sampling.enable, samplingpct=sampling.percent)
                 for component, sampling in settings.sampling.items()}
        return debug or None

    def _chosen_errors(self, errors: dict[str, list[Any]], choice: int | None
                       ) -> dict[str, list[Any]]:
        """``errors`` as GetInfoOptions.num_err_choice asks: ALL (or unset), NONE (each
        component listed with no errors), ONE (its latest). Any other value is refused
        with a sentence, as the IDL's enum has only these three."""
        choices = self.idl.NumErrorsChoice
        if choice is None or choice == choices.ALL:
            return errors
        if choice == choices.NONE:
            return {component: [] for component in errors}
        if choice == choices.ONE:
            # The latest; of two at the same second, the one recorded last.
            return {component: [max(reversed(found), key=lambda e: e.error_time_secs)]
                    for component, found in errors.items()}
        raise InvalidOption(f"GetInfoOptions.num_err_choice {choice!r} is not ALL (0), "
                            "NONE (1) or ONE (2)")

    def getTopologyConf(self, id: str) -> str:
        with self._gate("getTopologyConf", topology=id) as call:
            return json.dumps(self._readable(call, id).conf, sort_keys=True)

    def getTopology(self, id: str) -> Any:
        # Storm adds its system components (ackers, metrics) here; there are none on Spark.
        with self._gate("getTopology", topology=id) as call:
            return self._topology_struct(self._readable(call, id))

    def getUserTopology(self, id: str) -> Any:
        with self._gate("getUserTopology", topology=id) as call:
            return self._topology_struct(self._readable(call, id))

    def _by_id(self, topology_id: Any) -> TopologyRecord:
        rec = self.store.topology(topology_id) if isinstance(topology_id, str) else None
        if rec is None:
            raise self.idl.NotAliveException(msg=f"no topology with id {topology_id!r}")
        return rec

    def _summary(self, row: TopologyListing, now: float) -> Any:
        """One listed topology: its small columns only, counts cached per id; a value
        that does not fit the IDL is clamped and said so in ``sched_status``."""
        topology_id = text(row.id)
        counts = self._counts.counts(row)
        run = self.run_status(topology_id)
        detail = run.detail
        if counts.problems:
            detail = "invalid: " + "; ".join(counts.problems) + f" ({detail})"
            log.warning("topology_row_invalid", topology=topology_id,
                        problems=list(counts.problems))
        return self.idl.TopologySummary(
            id=topology_id, name=text(row.name), num_tasks=counts.num_tasks,
            num_executors=counts.num_executors, num_workers=counts.num_workers,
            uptime_secs=_secs(now - number(row.submitted_at)), status=text(row.status),
            sched_status=detail, owner=text(row.owner), replication_count=CODE_REPLICATION)

    def _executor_stats(self, rec: TopologyRecord, run: RunStatus, component: str,
                        index: int, count: int) -> Any:
        stats = run.components.get(component)
        if stats is None:
            return None
        # The launcher counts per component; executors get even shares so that sums over
        # executors (what Storm's UI and tools compute) come out exact.
        def share(total: int) -> int:
            return total // count + (1 if index < total % count else 0)
        emitted = {ALL_TIME: {"default": share(stats.emitted)}}
        idl = self.idl
        kind = "spout" if component in self._spouts(rec) else "bolt"
        if kind == "spout":
            specific = idl.ExecutorSpecificStats(spout=idl.SpoutStats(
                acked={ALL_TIME: {"default": share(stats.processed)}}, failed={},
                complete_ms_avg={ALL_TIME: {"default": stats.latency_ms}}))
        else:
            sources = [idl.GlobalStreamId(componentId=k.componentId, streamId=k.streamId)
                       for k in self._inputs(rec, component)]
            first = sources[:1]
            specific = idl.ExecutorSpecificStats(bolt=idl.BoltStats(
                acked={}, failed={},
                process_ms_avg={ALL_TIME: {s: stats.latency_ms for s in first}},
                executed={ALL_TIME: {s: share(stats.processed) for s in first}},
                # Task time per tuple, as page info's execute_latency_ms; the batch
                # latency is the process latency.
                execute_ms_avg={ALL_TIME: {s: stats.execute_ms for s in first}}))
        return idl.ExecutorStats(emitted=emitted, transferred=emitted, specific=specific,
                                 rate=stats.rate / count)

    def _stateful(self, rec: TopologyRecord, component: str) -> bool:
        """True for a component the DSL marked stateful (in its json_conf)."""
        bolt = (self._topology_struct(rec).bolts or {}).get(component)
        if bolt is None or bolt.common is None or not bolt.common.json_conf:
            return False
        try:
            conf = json.loads(bolt.common.json_conf)
        except ValueError:
            return False
        return isinstance(conf, dict) and conf.get(STATEFUL_KEY) is True

    def _spouts(self, rec: TopologyRecord) -> set[str]:
        return set(self._topology_struct(rec).spouts or {})

    def _inputs(self, rec: TopologyRecord, component: str) -> list[Any]:
        bolt = (self._topology_struct(rec).bolts or {}).get(component)
        return sorted((bolt.common.inputs or {}) if bolt else {},
                      key=lambda g: (g.componentId, g.streamId))

    def _topology_struct(self, rec: TopologyRecord) -> Any:
        # A topology id's structure never changes; decode it once.
        struct = self._structs.get(rec.id)
        if struct is None:
            struct = self._structs[rec.id] = deserialize(
                self.idl.StormTopology(), rec.topology, self._protocol)
        return struct

    def run_status(self, topology_id: str) -> RunStatus:
        """What the launcher reports of ``topology_id``; a launcher that fails gives
        state ``unknown`` with the reason (a query must still answer)."""
        try:
            return self.launcher.status(topology_id)
        except Exception as exc:  # noqa: BLE001 - a query must still answer
            log.warning("launcher_status_failed", topology=topology_id, error=str(exc))
            return RunStatus(state="unknown",
                             detail=f"unknown: the launcher failed ({type(exc).__name__}: "
                                    f"{exc})")


def nimbus_version() -> str:
    """NimbusSummary.version: the Storm API spoken, with this package's version as a
    PEP 440 local label (``2.8.0+nimbus.thrift.0.1.0``). Tools compare it as a Storm
    version: streamparse parses it with ``pkg_resources.parse_version`` and calls
    isTopologyNameAllowed from 1.1.0 on; Storm's own code reads "major.minor" from its
    start."""
    return f"{STORM_API_VERSION}+nimbus.thrift.{__version__}"


def _secs(seconds: float) -> int:
    """Seconds as the IDL's i32, never negative (clocks can step back)."""
    return max(0, min(int(seconds), 2**31 - 1))
