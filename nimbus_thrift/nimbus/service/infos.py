"""What the daemon says of itself and of its topologies, as the IDL's structs: its
configuration, its NimbusSummary, the cluster summary, a topology's summary and
TopologyInfo, and each topology's decoded structure. Several groups of calls answer
with these (getClusterInfo and getTopologySummaries, getTopologyInfo and its Storm 2.x
variants, the UI's pages), so they are built by one :class:`Infos` the handler gives
each of them.

Nothing here takes a lock: the store gives each reading thread its own connection,
and what is derived from a record (its decoded structure, its listed counts) is cached
per topology id, which never changes. What the read calls answer is built here and
kept, up to date, by :attr:`Infos.views` (:mod:`.views`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import structlog
from thriftpy2.protocol import TBinaryProtocolFactory
from thriftpy2.thrift import TApplicationException
from thriftpy2.utils import deserialize

from ... import __version__
from ...idl import NO_LEADER_MESSAGE
from ...runner.rundir import ALL_COMPONENTS, RunDir
from ...topology.streams import STATEFUL_KEY
from ...topology.validate import TOPOLOGY_DEFAULTS, task_ranges
from ..config import NimbusConfig, to_public
from ..launcher import Launcher, RunStatus
from ..role import Role
from ..state.store import Store, TopologyListing, TopologyRecord
from .listing import SummaryCountsCache, number, secs, text
from .views import Views
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


class Infos:
    """Builds the IDL's info structs of the daemon and its topologies.

    Args:
        idl: the loaded IDL module.
        config: the daemon's configuration (what getNimbusConf shows of it).
        store: the daemon's state.
        launcher: asked what runs (:meth:`run_status`, the cluster's nodes).
        topologies_dir: the topologies' work directories (their run-time settings).
        clock: epoch seconds; the daemon's uptime counts from its first reading.
        role: in HA mode, who leads and which nimbuses run (else this one alone).
    """

    def __init__(self, idl: ModuleType, config: NimbusConfig, store: Store,
                 launcher: Launcher, topologies_dir: Path, clock: Callable[[], float],
                 role: Role | None = None):
        self._idl = idl
        self._role = role
        self._config = config
        self._store = store
        self._launcher = launcher
        self._topologies_dir = topologies_dir
        self._clock = clock
        self.started_at = clock()
        #: Where clients reach this nimbus (the configured address until the daemon
        #: starts serving and says where it listens).
        self.address = (config.host, config.port)
        self._counts = SummaryCountsCache()
        self._protocol = TBinaryProtocolFactory()
        self._structs: dict[str, Any] = {}
        #: The read calls' answers, kept up to date from the store's commits.
        self.views = Views(idl, store, self, clock)

    def forget(self, topology_id: str) -> None:
        """Drop what is cached of a removed topology."""
        self._structs.pop(topology_id, None)
        self._counts.forget(topology_id)
        self.views.forget(topology_id)

    # --- the daemon -----------------------------------------------------------------
    def nimbus_conf(self) -> str:
        """getNimbusConf's JSON: Storm's keys for what a client needs, and the public
        settings of this daemon."""
        # No paths (Storm's storm.local.dir, the data directory, TLS files, socket) and
        # no lists of principals: config.to_public says which settings are public.
        host, port = self.address
        config = self._config
        storm = {
            "nimbus.seeds": [host],
            "nimbus.thrift.port": port,
            "nimbus.thrift.max_buffer_size": config.max_frame_size,
            "nimbus.thrift.threads": config.worker_threads,
            "nimbus.file.copy.expiration.secs": config.file_copy_expiration_secs,
            "storm.thrift.transport": "framed, binary protocol",
            **TOPOLOGY_DEFAULTS,
        }
        ours = {f"nimbus-thrift.{key}": value
                for key, value in to_public(config).items()}
        return json.dumps({**storm, **ours, "nimbus-thrift.version": __version__,
                           "nimbus-thrift.bound.port": port}, sort_keys=True)

    def leader(self) -> Any:
        """The leader's NimbusSummary: this daemon's when it runs alone; in HA mode
        the elected one's, or INTERNAL_ERROR saying none is elected yet."""
        if self._role is None:
            return self._nimbus_summary(*self.address, self.started_at, nimbus_version(),
                                        True)
        peer = self._role.leader()
        if peer is None:
            raise TApplicationException(TApplicationException.INTERNAL_ERROR,
                                        NO_LEADER_MESSAGE)
        return self._nimbus_summary(peer.host, peer.port, peer.started_at, peer.version,
                                    True)

    def nimbuses(self) -> list[Any]:
        """Every running nimbus's NimbusSummary (ClusterSummary.nimbuses)."""
        if self._role is None:
            return [self.leader()]
        leader = self._role.leader()
        return [self._nimbus_summary(p.host, p.port, p.started_at, p.version, p == leader)
                for p in self._role.nimbuses()]

    def _nimbus_summary(self, host: str, port: int, started_at: float, version: str,
                        is_leader: bool) -> Any:
        # TLS, when configured, is on the same port (the daemon tells it from the
        # first bytes), so that is the TLS port too; every nimbus of a cluster runs
        # with the same settings.
        tls_port = port if self._config.tls_cert_file is not None else None
        return self._idl.NimbusSummary(host=host, port=port,
                                       uptime_secs=secs(self._clock() - started_at),
                                       isLeader=is_leader, version=version,
                                       tlsPort=tls_port)

    def cluster_parts(self, now: float) -> tuple[list[Any], int, list[Any]]:
        """What a ClusterSummary holds besides its topologies: the launcher's nodes as
        SupervisorSummaries, this nimbus's uptime and the nimbuses' NimbusSummaries."""
        supervisors = [self._idl.SupervisorSummary(
            host=n.host, uptime_secs=secs(now - n.started_at), num_workers=n.slots,
            num_used_workers=n.used_slots, supervisor_id=n.node_id,
            version=n.version or "VERSION_NOT_PROVIDED") for n in self._launcher.nodes()]
        return supervisors, secs(now - self.started_at), self.nimbuses()

    # --- summaries ------------------------------------------------------------------
    def summary(self, row: TopologyListing, now: float, run: RunStatus | None = None
                ) -> Any:
        """One listed topology: its small columns only, counts cached per id; a value
        that does not fit the IDL is clamped and said so in ``sched_status``. ``run``:
        its run status if just asked (else the launcher is asked)."""
        topology_id = text(row.id)
        counts = self._counts.counts(row)
        if run is None:
            run = self.run_status(topology_id)
        detail = run.sched_status
        if counts.problems:
            detail = "invalid: " + "; ".join(counts.problems) + f" ({detail})"
            log.warning("topology_row_invalid", topology=topology_id,
                        problems=list(counts.problems))
        return self._idl.TopologySummary(
            id=topology_id, name=text(row.name), num_tasks=counts.num_tasks,
            num_executors=counts.num_executors, num_workers=counts.num_workers,
            uptime_secs=secs(now - number(row.submitted_at)), status=text(row.status),
            sched_status=detail, owner=text(row.owner), replication_count=CODE_REPLICATION)

    def run_status(self, topology_id: str) -> RunStatus:
        """What the launcher reports of ``topology_id``; a launcher that fails gives
        state ``unknown`` with the reason (a query must still answer)."""
        try:
            return self._launcher.status(topology_id)
        except Exception as exc:  # noqa: BLE001 - a query must still answer
            log.warning("launcher_status_failed", topology=topology_id, error=str(exc))
            return RunStatus(state="unknown",
                             detail=f"unknown: the launcher failed ({type(exc).__name__}: "
                                    f"{exc})")

    # --- one topology ---------------------------------------------------------------
    def topology_info(self, rec: TopologyRecord, num_errors: int | None = None,
                      run: RunStatus | None = None) -> Any:
        """``rec``'s TopologyInfo; ``num_errors`` is a NumErrorsChoice (None: ALL);
        ``run``: its run status if just asked (else the launcher is asked)."""
        idl = self._idl
        now = self._clock()
        if run is None:
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
            uptime = secs(now - (run.started_at or now))
            ranges = task_ranges(rec.tasks, rec.executors)
            per_component: dict[str, int] = {}
            for component, _, _ in ranges:
                per_component[component] = per_component.get(component, 0) + 1
            seen: dict[str, int] = {}
            for component, first, last in ranges:
                index = seen[component] = seen.get(component, -1) + 1
                executors.append(idl.ExecutorSummary(
                    executor_info=idl.ExecutorInfo(task_start=first, task_end=last),
                    component_id=component, host=run.host, port=run.port,
                    uptime_secs=uptime,
                    stats=self._executor_stats(rec, run, component, index,
                                               per_component[component])))
        errors: dict[str, list[Any]] = {}
        for component, message, when in [*self._store.errors(rec.id), *run.errors]:
            errors.setdefault(component, []).append(
                idl.ErrorInfo(error=message, error_time_secs=int(when)))
        return idl.TopologyInfo(
            id=rec.id, name=rec.name, uptime_secs=secs(now - rec.submitted_at),
            executors=executors, status=rec.status,
            errors=self._chosen_errors(errors, num_errors),
            component_debug=self._component_debug(rec),
            # After a colon, so the state word still leads (``submit --wait``).
            sched_status=run.sched_status if executors_listed or not run.assigned else
            f"{run.sched_status}: {listed} executors, not listed", owner=rec.owner,
            storm_version=self.structure(rec).storm_version,
            replication_count=CODE_REPLICATION)

    def _component_debug(self, rec: TopologyRecord) -> dict[str, Any] | None:
        """TopologyInfo.component_debug: the tuple sampling set by ``debug``, by
        component id, the topology-wide setting under the topology's id (Storm's key for
        it); None when debug was never set, or the settings cannot be read (a query must
        still answer)."""
        try:
            settings = RunDir(self._topologies_dir / rec.id).read_settings()
        except (OSError, ValueError, TypeError) as exc:
            log.warning("settings_unreadable", topology=rec.id, error=str(exc))
            return None
        debug = {rec.id if component == ALL_COMPONENTS else component:
                 self._idl.DebugOptions(enable=sampling.enable,
                                        samplingpct=sampling.percent)
                 for component, sampling in settings.sampling.items()}
        return debug or None

    def _chosen_errors(self, errors: dict[str, list[Any]], choice: int | None
                       ) -> dict[str, list[Any]]:
        """``errors`` as GetInfoOptions.num_err_choice asks: ALL (or unset), NONE (each
        component listed with no errors), ONE (its latest). Any other value is refused
        with a sentence, as the IDL's enum has only these three."""
        choices = self._idl.NumErrorsChoice
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
        idl = self._idl
        kind = "spout" if component in self.spouts(rec) else "bolt"
        if kind == "spout":
            specific = idl.ExecutorSpecificStats(spout=idl.SpoutStats(
                acked={ALL_TIME: {"default": share(stats.processed)}}, failed={},
                complete_ms_avg={ALL_TIME: {"default": stats.latency_ms}}))
        else:
            sources = [idl.GlobalStreamId(componentId=k.componentId, streamId=k.streamId)
                       for k in self.inputs(rec, component)]
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

    # --- a topology's structure -----------------------------------------------------
    def structure(self, rec: TopologyRecord) -> Any:
        """``rec``'s StormTopology, decoded once per topology id (it never changes)."""
        struct = self._structs.get(rec.id)
        if struct is None:
            struct = self._structs[rec.id] = deserialize(
                self._idl.StormTopology(), rec.topology, self._protocol)
        return struct

    def structure_of(self, topology_id: str, rec: TopologyRecord | None = None) -> Any:
        """The StormTopology of ``topology_id`` (``rec``: its record if just read), the
        store read only the first time.

        Raises:
            NotAliveException: there is no such topology.
        """
        struct = self._structs.get(topology_id)
        if struct is not None:
            return struct
        rec = rec if rec is not None else self._store.topology(topology_id)
        if rec is None:
            raise self._idl.NotAliveException(msg=f"no topology with id {topology_id!r}")
        return self.structure(rec)

    def stateful(self, rec: TopologyRecord, component: str) -> bool:
        """True for a component the DSL marked stateful (in its json_conf)."""
        bolt = (self.structure(rec).bolts or {}).get(component)
        if bolt is None or bolt.common is None or not bolt.common.json_conf:
            return False
        try:
            conf = json.loads(bolt.common.json_conf)
        except ValueError:
            return False
        return isinstance(conf, dict) and conf.get(STATEFUL_KEY) is True

    def spouts(self, rec: TopologyRecord) -> set[str]:
        """The ids of ``rec``'s spouts."""
        return set(self.structure(rec).spouts or {})

    def inputs(self, rec: TopologyRecord, component: str) -> list[Any]:
        """The GlobalStreamIds a bolt reads, in order (none for a spout)."""
        bolt = (self.structure(rec).bolts or {}).get(component)
        return sorted((bolt.common.inputs or {}) if bolt else {},
                      key=lambda g: (g.componentId, g.streamId))

    def output_streams(self, rec: TopologyRecord, component: str) -> list[str]:
        """The streams a component declares, in order."""
        struct = self.structure(rec)
        spec = (struct.spouts or {}).get(component) or (struct.bolts or {}).get(component)
        common = getattr(spec, "common", None)
        return sorted(getattr(common, "streams", None) or {})


def nimbus_version() -> str:
    """NimbusSummary.version: the Storm API spoken, with this package's version as a
    PEP 440 local label (``2.8.0+nimbus.thrift.0.1.0``). Tools compare it as a Storm
    version: streamparse parses it with ``pkg_resources.parse_version`` and calls
    isTopologyNameAllowed from 1.1.0 on; Storm's own code reads "major.minor" from its
    start."""
    return f"{STORM_API_VERSION}+nimbus.thrift.{__version__}"
