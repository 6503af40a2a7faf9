"""The Nimbus service's page-info calls, what Storm's UI and REST API show:
``getTopologyPageInfo``, ``getComponentPageInfo`` and ``getSupervisorPageInfo``.

Figures per window come from the daemon's time series of what the runner reports
(:mod:`.timeseries`), sampled every :data:`~.timeseries.SAMPLE_SECS` by the daemon's
sampler thread (:meth:`PageCalls.sample_figures`) and by each query for its topology,
so a query's ``:all-time`` figures are the ones ``getTopologyInfo`` shows at that
moment.

What each Storm figure is here (a field with no meaning on Spark is left unset rather
than made up)::

    emitted, transferred      tuples the component emitted (each is handed on once
                              to Spark, so transferred = emitted, as in TopologyInfo)
    executed                  tuples a bolt processed
    complete_latency_ms       a spout's tuples are done when their micro-batch is:
    process_latency_ms        the mean micro-batch duration, weighted by the tuples
                              processed in the window
    execute_latency_ms        a bolt's task time per tuple (decoding it, the bolt's
                              code, converting what it emitted)
    capacity                  the share of the window its executors spent on its
                              tuples (the mean over executors, Storm's is the
                              busiest's)
    errors                    the topology's errors (launcher, application, user
                              code), with the time and host:port where known
    unset                     acked, failed (no per-tuple acking: a micro-batch is
                              replayed as a whole), resources, event logger host/port
                              (sampled tuples go to the topology's log), input stats
                              of a bolt with several inputs and output stats of a
                              component with several streams (counts are per
                              component, not per stream)

``is_include_sys`` changes nothing: there are no system components (ackers, metrics
consumers) on Spark.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from ...runner.rundir import ALL_COMPONENTS
from ...topology.validate import task_ranges
from ..launcher import Launcher, RunStatus, WorkerNode
from ..security.authz import Authorizer
from ..state.store import Store, TopologyRecord
from .access import Access
from .infos import ALL_TIME, CODE_REPLICATION, Infos
from .logs import debug_options, settings_of
from ..state.timeseries import TimeSeries, WindowStats
from .wire_errors import InvalidOption, storm_errors

#: Storm's windows, as its UI asks for them: all time, 10 minutes, 3 hours, a day.
WINDOWS = (ALL_TIME, "600", "10800", "86400")
#: The IDL's i32, for counts that could be stored larger.
I32_MAX = 2**31 - 1


def window_seconds(window: Any) -> float | None:
    """The seconds of a window key (None for ``:all-time``, also when no window is
    given, as Storm's UI defaults to it).

    Raises:
        InvalidOption: neither ``:all-time`` nor a positive whole number of seconds.
    """
    if window is None or window == "" or window == ALL_TIME:
        return None
    if isinstance(window, str) and window.isdigit() and 0 < int(window) <= I32_MAX:
        return float(int(window))
    raise InvalidOption(f"window {window!r} is neither {ALL_TIME!r} nor a number of "
                        f"seconds (Storm's windows: {', '.join(WINDOWS)})")


class PageCalls:
    """The page-info IDL methods, and the sampling of the time series they read.

    Args:
        idl: the loaded IDL module.
        access: the gate and the topology lookups.
        authz: who may call what.
        store: the daemon's state.
        launcher: asked for the cluster's nodes.
        infos: the topologies' structures and run status, the daemon's address.
        figures: each topology's component stats over time (what the windows show).
        topologies_dir: the topologies' work directories (their debug settings).
        clock: epoch seconds.
    """

    def __init__(self, idl: ModuleType, access: Access, authz: Authorizer, store: Store,
                 launcher: Launcher, infos: Infos, figures: TimeSeries,
                 topologies_dir: Path, clock: Callable[[], float]):
        self.idl = idl
        self._access = access
        self._authz = authz
        self._store = store
        self._launcher = launcher
        self._infos = infos
        self._figures = figures
        self._topologies_dir = topologies_dir
        self._clock = clock

    # --- sampling ---------------------------------------------------------------------
    def sample_figures(self) -> None:
        """Sample every topology's figures into the time series, and forget removed
        topologies' (the daemon's sampler thread calls this every SAMPLE_SECS)."""
        ids = self._store.topology_ids()
        for topology_id in ids:
            self._sample_one(topology_id)
        self._figures.keep_only(set(ids))

    def _sample_one(self, topology_id: str) -> RunStatus:
        run = self._infos.run_status(topology_id)
        self._infos.views.run_seen(topology_id, run)    # a new sched_status is listed
        if run.components:
            # A launcher that does not know when the run started gives no run key:
            # all its samples are one run.
            self._figures.record(topology_id, self._clock(),
                                 run.started_at if run.started_at is not None
                                 else float("-inf"), run.components)
        return run

    # --- the IDL methods --------------------------------------------------------------
    @storm_errors
    def getTopologyPageInfo(self, id: str, window: str, is_include_sys: bool) -> Any:
        with self._access.gate("getTopologyPageInfo", topology=id) as call:
            rec = self._access.permitted(call, id)
            seconds = window_seconds(window)
            return self._topology_page(rec, seconds)

    @storm_errors
    def getComponentPageInfo(self, topology_id: str, component_id: str, window: str,
                             is_include_sys: bool) -> Any:
        with self._access.gate("getComponentPageInfo", topology=topology_id,
                               component=component_id) as call:
            rec = self._access.permitted(call, topology_id)
            seconds = window_seconds(window)
            if not isinstance(component_id, str) or component_id not in rec.tasks:
                raise self.idl.NotAliveException(
                    msg=f"topology {rec.name!r} has no component {component_id!r}; its "
                        f"components: {', '.join(sorted(rec.tasks))}")
            return self._component_page(rec, component_id, seconds)

    @storm_errors
    def getSupervisorPageInfo(self, id: str, host: str, is_include_sys: bool) -> Any:
        with self._access.gate("getSupervisorPageInfo", supervisor=id, host=host) as call:
            self._authz.check(call)
            nodes = self._launcher.nodes()
            if id:
                nodes = [n for n in nodes if n.node_id == id]
                if not nodes:
                    raise self.idl.NotAliveException(msg=f"no Spark worker with id {id!r}")
            else:
                nodes = [n for n in nodes if n.host == host]
            now = self._clock()
            workers = []
            for node in nodes:
                for topology_id in node.topologies:
                    rec = self._store.topology(topology_id)
                    if rec is not None:
                        run = self._infos.run_status(rec.id)
                        details = self._access.may_read(call, rec)
                        workers.append(self._worker_summary(rec, run, node, now,
                                                            details=details))
            return self.idl.SupervisorPageInfo(
                supervisor_summaries=[self._supervisor_summary(n, now) for n in nodes],
                worker_summaries=workers)

    # --- pages ------------------------------------------------------------------------
    def _topology_page(self, rec: TopologyRecord, seconds: float | None) -> Any:
        idl = self.idl
        run = self._sample_one(rec.id)
        now = self._clock()
        spouts = self._infos.spouts(rec)
        figures = self._figures.window(rec.id, seconds)
        errors = self._page_errors(rec, run)
        by_kind: dict[bool, dict[str, Any]] = {True: {}, False: {}}
        for component in sorted(rec.tasks):
            spout = component in spouts
            by_kind[spout][component] = self._aggregate_stats(
                rec, component, spout, figures.get(component),
                last_error=errors.get(component, [None])[-1])
        settings = settings_of(self._topologies_dir, rec.id)
        node = self._node_of(rec.id) if run.assigned else None
        return idl.TopologyPageInfo(
            id=rec.id, name=rec.name, uptime_secs=_i32(now - rec.submitted_at),
            status=rec.status, num_tasks=_i32(sum(rec.tasks.values())),
            num_workers=_i32(rec.num_workers),
            num_executors=_i32(sum(rec.executors.values())),
            topology_conf=self._infos.views.conf_json(rec.id, rec),
            id_to_spout_agg_stats=by_kind[True], id_to_bolt_agg_stats=by_kind[False],
            sched_status=run.sched_status, topology_stats=self._topology_stats(rec, spouts),
            owner=rec.owner, debug_options=debug_options(idl, settings, ALL_COMPONENTS),
            replication_count=CODE_REPLICATION,
            workers=[self._worker_summary(rec, run, node, now)] if run.assigned else [],
            storm_version=getattr(self._infos.structure(rec), "storm_version", None))

    def _component_page(self, rec: TopologyRecord, component: str,
                        seconds: float | None) -> Any:
        idl = self.idl
        run = self._sample_one(rec.id)
        spout = component in self._infos.spouts(rec)
        errors = self._page_errors(rec, run).get(component, [])
        last = errors[-1] if errors else None
        windows = {key: self._aggregate_stats(rec, component, spout,
                                        self._figures.window(rec.id, window_seconds(key))
                                        .get(component), last_error=last)
                   for key in WINDOWS}
        figures = self._figures.window(rec.id, seconds).get(component)
        settings = settings_of(self._topologies_dir, rec.id)
        return idl.ComponentPageInfo(
            component_id=component,
            component_type=idl.ComponentType.SPOUT if spout else idl.ComponentType.BOLT,
            topology_id=rec.id, topology_name=rec.name,
            num_executors=_i32(rec.executors.get(component, 0)),
            num_tasks=_i32(rec.tasks.get(component, 0)),
            window_to_stats=windows,
            gsid_to_input_stats=None if spout else self._input_stats(rec, component, figures),
            sid_to_output_stats=self._output_stats(rec, component, figures),
            exec_stats=self._exec_stats(rec, run, component, spout, figures),
            errors=errors, debug_options=debug_options(idl, settings, component),
            topology_status=rec.status)

    # --- parts ------------------------------------------------------------------------
    def _aggregate_stats(self, rec: TopologyRecord, component: str, spout: bool,
                   figures: WindowStats | None, *, last_error: Any = None,
                   executors: int | None = None, tasks: int | None = None,
                   share: tuple[int, int] | None = None) -> Any:
        """A component's ComponentAggregateStats over one window (``share``: the
        ``(index, count)`` of one executor's even share of the counts)."""
        idl = self.idl
        common = idl.CommonAggregateStats(
            num_executors=_i32(rec.executors.get(component, 0) if executors is None
                               else executors),
            num_tasks=_i32(rec.tasks.get(component, 0) if tasks is None else tasks))
        specific = None
        if figures is not None:
            emitted = _share(figures.emitted, share)
            common.emitted = common.transferred = emitted
            if spout:
                specific = idl.SpecificAggregateStats(spout=idl.SpoutAggregateStats(
                    complete_latency_ms=figures.latency_ms))
            else:
                specific = idl.SpecificAggregateStats(bolt=idl.BoltAggregateStats(
                    execute_latency_ms=figures.execute_ms,
                    process_latency_ms=figures.latency_ms,
                    executed=_share(figures.processed, share),
                    capacity=figures.capacity(rec.executors.get(component, 0))))
        return idl.ComponentAggregateStats(
            type=idl.ComponentType.SPOUT if spout else idl.ComponentType.BOLT,
            common_stats=common, specific_stats=specific, last_error=last_error)

    def _topology_stats(self, rec: TopologyRecord, spouts: set[str]) -> Any:
        emitted: dict[str, int] = {}
        latencies: dict[str, float] = {}
        for key in WINDOWS:
            figures = self._figures.window(rec.id, window_seconds(key))
            if not figures:
                continue
            emitted[key] = sum(f.emitted for f in figures.values())
            spout_latency = [f.latency_ms for cid, f in figures.items() if cid in spouts]
            if spout_latency:
                latencies[key] = sum(spout_latency) / len(spout_latency)
        return self.idl.TopologyStats(window_to_emitted=emitted,
                                      window_to_transferred=dict(emitted),
                                      window_to_complete_latencies_ms=latencies)

    def _input_stats(self, rec: TopologyRecord, component: str,
                     figures: WindowStats | None) -> Any:
        """A bolt's figures by input stream: known only when it has one input."""
        inputs = self._infos.inputs(rec, component)
        if len(inputs) != 1 or figures is None:
            return None
        source = inputs[0]
        key = self.idl.GlobalStreamId(componentId=source.componentId,
                                      streamId=source.streamId)
        return {key: self.idl.ComponentAggregateStats(
            type=self.idl.ComponentType.BOLT,
            specific_stats=self.idl.SpecificAggregateStats(bolt=self.idl.BoltAggregateStats(
                execute_latency_ms=figures.execute_ms,
                process_latency_ms=figures.latency_ms, executed=figures.processed)))}

    def _output_stats(self, rec: TopologyRecord, component: str,
                      figures: WindowStats | None) -> Any:
        """A component's figures by output stream: known only when it declares at most
        one stream (none: an empty map)."""
        streams = self._infos.output_streams(rec, component)
        if len(streams) > 1 or figures is None:
            return None
        return {stream: self.idl.ComponentAggregateStats(
            type=self.idl.ComponentType.SPOUT if component in self._infos.spouts(rec)
            else self.idl.ComponentType.BOLT,
            common_stats=self.idl.CommonAggregateStats(emitted=figures.emitted,
                                                       transferred=figures.emitted))
            for stream in streams}

    def _exec_stats(self, rec: TopologyRecord, run: RunStatus, component: str,
                    spout: bool, figures: WindowStats | None) -> list[Any]:
        """One entry per executor while the topology runs, each with an even share of
        the component's counts (as getTopologyInfo's executors: sums come out exact)."""
        if not run.assigned:
            return []
        ranges = [(first, last) for c, first, last in task_ranges(rec.tasks, rec.executors)
                  if c == component]
        uptime = _i32(self._clock() - (run.started_at or self._clock()))
        result = []
        for index, (first, last) in enumerate(ranges):
            summary = self.idl.ExecutorSummary(
                executor_info=self.idl.ExecutorInfo(task_start=first, task_end=last),
                component_id=component, host=run.host, port=run.port, uptime_secs=uptime)
            result.append(self.idl.ExecutorAggregateStats(
                exec_summary=summary,
                stats=self._aggregate_stats(rec, component, spout, figures, executors=1,
                                      tasks=last - first + 1,
                                      share=(index, len(ranges)))))
        return result

    def _page_errors(self, rec: TopologyRecord, run: RunStatus) -> dict[str, list[Any]]:
        """The topology's errors by component, oldest first: the daemon's own (at its
        address) and the application's (at its host and port)."""
        host, port = self._infos.address
        found: dict[str, list[Any]] = {}
        for component, message, when in self._store.errors(rec.id):
            found.setdefault(component, []).append(self.idl.ErrorInfo(
                error=message, error_time_secs=_i32(when), host=host, port=port))
        for component, message, when in run.errors:
            found.setdefault(component, []).append(self.idl.ErrorInfo(
                error=message, error_time_secs=_i32(when), host=run.host or host,
                port=run.port or None))
        for errors in found.values():
            errors.sort(key=lambda e: e.error_time_secs)
        return found

    def _worker_summary(self, rec: TopologyRecord, run: RunStatus, node: WorkerNode | None,
                now: float, details: bool = True) -> Any:
        """The topology's application as Storm's worker (one per application)."""
        worker = self.idl.WorkerSummary(
            supervisor_id=node.node_id if node is not None else None,
            host=run.host or (node.host if node is not None else None),
            port=run.port or None, topology_id=rec.id, topology_name=rec.name,
            num_executors=_i32(sum(rec.executors.values())),
            uptime_secs=_i32(now - run.started_at) if run.started_at else None)
        if details:
            worker.component_to_num_tasks = dict(rec.tasks)
            worker.owner = rec.owner
        return worker

    def _supervisor_summary(self, node: WorkerNode, now: float) -> Any:
        return self.idl.SupervisorSummary(
            host=node.host, uptime_secs=_i32(now - node.started_at),
            num_workers=node.slots, num_used_workers=node.used_slots,
            supervisor_id=node.node_id, version=node.version or "VERSION_NOT_PROVIDED")

    def _node_of(self, topology_id: str) -> WorkerNode | None:
        try:
            nodes = self._launcher.nodes()
        except Exception:  # noqa: BLE001 - a page must still answer
            return None
        return next((n for n in nodes if topology_id in n.topologies), None)


def _share(total: int, share: tuple[int, int] | None) -> int:
    if share is None:
        return total
    index, count = share
    return total // count + (1 if index < total % count else 0)


def _i32(value: float) -> int:
    return max(0, min(int(value), I32_MAX))
