"""Storm UI's REST API, v1 (Storm's docs/STORM-UI-REST-API.md): the GET paths, with
Storm's JSON field names, built from the handler's own IDL methods (so each is
authorized as its IDL method, and the figures are the ones Thrift clients and
``nimbus-thrift info`` see).

Every field Storm's document lists for these paths is present, with Storm's type
(tools index them: streamparse's ``sparse worker_uptime`` reads ``workerLogLink``).
A field with no meaning on Spark has the neutral value Storm itself answers when it
has nothing to say (docs/nimbus-api.md lists them): 0 for ``acked`` and ``failed``
(a micro-batch is replayed whole, there is no per-tuple acking), 0.0 for the
resource-aware scheduler's memory and CPU, ``""`` for an event log or nimbus log
link, false and ``[]`` for profiling. Log links point at the topology's log on this
daemon (:mod:`.logs`).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from ...topology.validate import TOPOLOGY_DEFAULTS
from ..service.pages import WINDOWS
from ..service.infos import ALL_TIME
from .calls import call_as
from .logs import log_link, web_port
from .messages import Request, Response

#: The conf key Storm's ``msgTimeout`` shows.
TOPOLOGY_MESSAGE_TIMEOUT = "topology.message.timeout.secs"
#: Storm's figures of its resource-aware scheduler, 0.0 as Storm answers them without
#: one: Spark's own scheduler places the executors (docs/nimbus-api.md).
REQUESTED = {"requestedMemOnHeap": 0.0, "requestedMemOffHeap": 0.0, "requestedCpu": 0.0}
ASSIGNED = {"assignedMemOnHeap": 0.0, "assignedMemOffHeap": 0.0, "assignedCpu": 0.0}
TOTALS = {"requestedTotalMem": 0.0, "assignedTotalMem": 0.0}
#: Per-tuple acking does not exist on Spark (a micro-batch is replayed whole): Storm's
#: counts of a topology run without ackers.
NO_ACKS = {"acked": 0, "failed": 0}
#: Storm's last-error fields of a component that has none (its own answer).
NO_ERROR = {"lastError": "", "errorHost": "", "errorPort": None, "errorTime": None,
            "errorLapsedSecs": None, "errorWorkerLogLink": ""}


def pretty_secs(secs: int | None) -> str:
    """Storm's uptime format: ``1d 2h 3m 4s`` with leading zero units left out
    (``5m 58s``; ``0s`` for zero)."""
    if secs is None:
        return ""
    secs = int(secs)
    parts = []
    for unit, size in (("s", 60), ("m", 60), ("h", 24)):
        if secs <= 0:
            break
        parts.append(f"{secs % size}{unit}")
        secs //= size
    if secs > 0:
        parts.append(f"{secs}d")
    return " ".join(reversed(parts)) or "0s"


def window_hint(window: str) -> str:
    """Storm's ``windowHint``/``windowPretty``: ``All time`` or the window's length."""
    return "All time" if window == ALL_TIME else pretty_secs(int(window))


def float_str(value: float | None) -> str | None:
    """Storm's figures in strings with three decimals (StatsUtil.floatStr)."""
    return None if value is None else f"{value:.3f}"


def _drop_none(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


class StormApi:
    """The GET side of ``/api/v1``; ``handler`` is the daemon's NimbusHandler."""

    def __init__(self, handler: Any, csrf_token: str):
        self.handler = handler
        self.idl = handler.idl
        self.csrf_token = csrf_token

    def _call(self, request: Request, operation: str, *args: Any) -> Any:
        return call_as(request, self.idl, operation, getattr(self.handler, operation),
                       *args)

    # --- cluster ------------------------------------------------------------------------
    def cluster_configuration(self, request: Request, params: dict[str, str]) -> Response:
        return Response.json(json.loads(self._call(request, "getNimbusConf")))

    def cluster_summary(self, request: Request, params: dict[str, str]) -> Response:
        summary = self._call(request, "getClusterInfo")
        slots = sum(s.num_workers or 0 for s in summary.supervisors)
        used = sum(s.num_used_workers or 0 for s in summary.supervisors)
        leader = summary.nimbuses[0] if summary.nimbuses else None
        return Response.json({
            "stormVersion": leader.version if leader is not None else None,
            "nimbusUptime": pretty_secs(summary.nimbus_uptime_secs),
            "nimbusUptimeSeconds": summary.nimbus_uptime_secs,
            "supervisors": len(summary.supervisors),
            "topologies": len(summary.topologies),
            "slotsTotal": slots, "slotsUsed": used, "slotsFree": max(0, slots - used),
            "executorsTotal": sum(t.num_executors or 0 for t in summary.topologies),
            "tasksTotal": sum(t.num_tasks or 0 for t in summary.topologies),
            "schedulerDisplayResource": False,
            "totalMem": 0.0, "totalCpu": 0.0, "availMem": 0.0, "availCpu": 0.0,
            "memAssignedPercentUtil": 0.0, "cpuAssignedPercentUtil": 0.0,
        })

    def nimbus_summary(self, request: Request, params: dict[str, str]) -> Response:
        leader = self._call(request, "getLeader")
        return Response.json({"nimbuses": [{
            "host": leader.host, "port": leader.port, "status": "Leader",
            "version": leader.version, "nimbusUpTime": pretty_secs(leader.uptime_secs),
            "nimbusUpTimeSeconds": str(leader.uptime_secs),
            # The daemon's own log is not served (it goes where its stderr goes).
            "nimbusLogLink": ""}]})

    def supervisor_summary(self, request: Request, params: dict[str, str]) -> Response:
        summary = self._call(request, "getClusterInfo")
        return Response.json({"supervisors": [{
            "id": s.supervisor_id, "host": s.host, "uptime": pretty_secs(s.uptime_secs),
            "uptimeSeconds": s.uptime_secs, "slotsTotal": s.num_workers,
            "slotsUsed": s.num_used_workers, "version": s.version,
            "totalMem": 0.0, "totalCpu": 0.0, "usedMem": 0.0, "usedCpu": 0.0}
            for s in summary.supervisors], "schedulerDisplayResource": False})

    def topology_summary(self, request: Request, params: dict[str, str]) -> Response:
        summary = self._call(request, "getClusterInfo")
        return Response.json({"topologies": [_drop_none({
            "id": t.id, "encodedId": quote(t.id, safe=""), "name": t.name,
            "status": t.status, "uptime": pretty_secs(t.uptime_secs),
            "uptimeSeconds": t.uptime_secs, "tasksTotal": t.num_tasks,
            "workersTotal": t.num_workers, "executorsTotal": t.num_executors,
            "replicationCount": t.replication_count, "owner": t.owner,
            "schedulerInfo": t.sched_status, **REQUESTED, **ASSIGNED, **TOTALS})
            for t in summary.topologies],
            "schedulerDisplayResource": False})

    # --- one topology -------------------------------------------------------------------
    def topology(self, request: Request, params: dict[str, str]) -> Response:
        window = request.query.get("window") or ALL_TIME
        page = self._call(request, "getTopologyPageInfo", params["id"], window, False)
        conf = json.loads(page.topology_conf) if page.topology_conf else {}
        stats = page.topology_stats
        topology_stats = []
        for key in WINDOWS:
            if stats is None or key not in (stats.window_to_emitted or {}):
                continue
            topology_stats.append({
                "window": key, "windowPretty": window_hint(key),
                "emitted": stats.window_to_emitted[key],
                "transferred": (stats.window_to_transferred or {}).get(key, 0),
                "completeLatency": float_str(
                    (stats.window_to_complete_latencies_ms or {}).get(key, 0.0)),
                **NO_ACKS})
        debug = page.debug_options
        now = self.handler.clock()
        return Response.json(_drop_none({
            "id": page.id, "encodedId": quote(page.id, safe=""), "name": page.name,
            "status": page.status, "uptime": pretty_secs(page.uptime_secs),
            "uptimeSeconds": page.uptime_secs, "tasksTotal": page.num_tasks,
            "workersTotal": page.num_workers, "executorsTotal": page.num_executors,
            "owner": page.owner, "schedulerInfo": page.sched_status,
            "replicationCount": page.replication_count, "stormVersion": page.storm_version,
            "msgTimeout": conf.get(TOPOLOGY_MESSAGE_TIMEOUT,
                                   TOPOLOGY_DEFAULTS[TOPOLOGY_MESSAGE_TIMEOUT]),
            "window": window, "windowHint": window_hint(window),
            "debug": bool(debug.enable) if debug is not None else False,
            "samplingPct": float(debug.samplingpct or 0.0) if debug is not None else 0.0,
            "schedulerDisplayResource": False, **REQUESTED, **ASSIGNED, **TOTALS,
            "topologyStats": topology_stats,
            "workers": [self._worker(request, w) for w in page.workers or []],
            "spouts": [self._component_row(request, page.id, cid, s, "spout", now)
                       for cid, s in sorted((page.id_to_spout_agg_stats or {}).items())],
            "bolts": [self._component_row(request, page.id, cid, s, "bolt", now)
                      for cid, s in sorted((page.id_to_bolt_agg_stats or {}).items())],
            "configuration": conf,
            # Storm 0.9.3's field: actions send it back as x-csrf-token (csrf.py).
            "antiForgeryToken": self.csrf_token,
        }))

    def _worker(self, request: Request, w: Any) -> dict[str, Any]:
        return {**_drop_none({
            "supervisorId": w.supervisor_id, "host": w.host, "port": w.port,
            "topologyId": w.topology_id, "topologyName": w.topology_name,
            "executorsTotal": w.num_executors, "componentNumTasks": w.component_to_num_tasks,
            "uptime": pretty_secs(w.uptime_secs or 0),
            "uptimeSeconds": w.uptime_secs or 0, "owner": w.owner}), **ASSIGNED,
            "workerLogLink": log_link(request, w.topology_id)}

    def _component_row(self, request: Request, topology_id: str, component: str,
                       stats: Any, kind: str, now: float) -> dict[str, Any]:
        """A spout's or bolt's row of Storm's topology page: its figures (a figure
        the window has not measured is Storm's zero) and its last error."""
        common = stats.common_stats
        specific = stats.specific_stats
        row: dict[str, Any] = {
            f"{kind}Id": component, f"encoded{kind.title()}Id": quote(component, safe=""),
            "executors": common.num_executors, "tasks": common.num_tasks,
            "emitted": common.emitted or 0, "transferred": common.transferred or 0,
            **NO_ACKS, **REQUESTED}
        if kind == "spout":
            spout = specific.spout if specific is not None else None
            row["completeLatency"] = float_str(
                spout.complete_latency_ms if spout is not None and
                spout.complete_latency_ms is not None else 0.0)
        else:
            bolt = specific.bolt if specific is not None else None

            def figure(name: str) -> float:
                value = getattr(bolt, name, None) if bolt is not None else None
                return 0.0 if value is None else value
            row.update(executed=int(figure("executed")),
                       executeLatency=float_str(figure("execute_latency_ms")),
                       processLatency=float_str(figure("process_latency_ms")),
                       capacity=float_str(figure("capacity")))
        row.update(_last_error(stats.last_error, now, log_link(request, topology_id)))
        return row

    def component(self, request: Request, params: dict[str, str]) -> Response:
        window = request.query.get("window") or ALL_TIME
        page = self._call(request, "getComponentPageInfo", params["id"],
                          params["component"], window, False)
        # Storm's ``user``: ComponentPageInfo has no owner; the summary has (read as
        # the same topology's readers may).
        owner = self._call(request, "getTopologySummary", page.topology_id).owner
        spout = page.component_type == self.idl.ComponentType.SPOUT
        kind = "spout" if spout else "bolt"
        link = log_link(request, page.topology_id)
        now = self.handler.clock()
        windows = []
        for key in WINDOWS:
            stats = (page.window_to_stats or {}).get(key)
            if stats is None or stats.common_stats.emitted is None:
                continue
            row = self._component_row(request, page.topology_id, page.component_id,
                                      stats, kind, now)
            windows.append({"window": key, "windowPretty": window_hint(key),
                            **{k: v for k, v in row.items() if k in _WINDOW_FIELDS}})
        debug = page.debug_options
        errors = [{
            "errorTime": e.error_time_secs, "errorHost": e.host or "",
            "errorPort": e.port, "error": e.error,
            "errorLapsedSecs": max(0, int(now) - e.error_time_secs),
            "errorWorkerLogLink": link}
            for e in reversed(page.errors or [])]      # the latest first, as Storm
        result: dict[str, Any] = {
            "user": owner or "",
            "id": page.component_id, "encodedId": quote(page.component_id, safe=""),
            "name": page.topology_name, "topologyId": page.topology_id,
            "encodedTopologyId": quote(page.topology_id, safe=""),
            "topologyStatus": page.topology_status,
            "componentType": kind,
            "executors": page.num_executors, "tasks": page.num_tasks, **REQUESTED,
            "window": window, "windowHint": window_hint(window),
            "debug": bool(debug.enable) if debug is not None else False,
            "samplingPct": float(debug.samplingpct or 0.0) if debug is not None else 0.0,
            "schedulerDisplayResource": False,
            # Sampled tuples go to the topology's log, not to an event logger; there
            # is no JVM profiling on Spark (docs/nimbus-api.md).
            "eventLogLink": "", "profilingAndDebuggingCapable": False,
            "profileActionEnabled": False, "profilerActive": [],
            "componentErrors": errors,
            "spoutSummary" if spout else "boltStats": windows,
            "outputStats": [{
                "stream": stream, "emitted": s.common_stats.emitted or 0,
                "transferred": s.common_stats.transferred or 0}
                for stream, s in sorted((page.sid_to_output_stats or {}).items())],
            "executorStats": [self._executor_row(request, page.topology_id, e, kind)
                              for e in page.exec_stats or []],
        }
        if not spout:
            result["inputStats"] = [{
                "component": gsid.componentId,
                "encodedComponentId": quote(gsid.componentId, safe=""),
                "stream": gsid.streamId,
                "executed": s.specific_stats.bolt.executed or 0,
                "executeLatency": float_str(s.specific_stats.bolt.execute_latency_ms or 0.0),
                "processLatency": float_str(s.specific_stats.bolt.process_latency_ms or 0.0),
                **NO_ACKS}
                for gsid, s in (page.gsid_to_input_stats or {}).items()]
        return Response.json(result)

    def _executor_row(self, request: Request, topology_id: str, e: Any, kind: str
                      ) -> dict[str, Any]:
        summary = e.exec_summary
        info = summary.executor_info
        row = {"id": f"[{info.task_start}-{info.task_end}]",
               "encodedId": quote(f"[{info.task_start}-{info.task_end}]", safe=""),
               "host": summary.host, "port": summary.port,
               "uptime": pretty_secs(summary.uptime_secs or 0),
               "uptimeSeconds": summary.uptime_secs or 0,
               "workerLogLink": log_link(request, topology_id)}
        stats = self._component_row(request, topology_id, summary.component_id, e.stats,
                                    kind, 0.0)
        row.update({k: v for k, v in stats.items() if k in _WINDOW_FIELDS})
        return row

    def topology_workers(self, request: Request, params: dict[str, str]) -> Response:
        info = self._call(request, "getTopologyInfo", params["id"])
        places = sorted({(e.host, e.port) for e in info.executors or [] if e.host})
        # Storm's logviewer port: here the web side, which serves the topology's log.
        return Response.json({"hostPortList": [{"host": h, "port": p} for h, p in places],
                              "logviewerPort": web_port(request)})


#: The figures of a component's row that its per-window and per-executor rows show.
_WINDOW_FIELDS = ("emitted", "transferred", "completeLatency", "executed",
                  "executeLatency", "processLatency", "capacity", "acked", "failed")


def _last_error(error: Any, now: float, link: str) -> dict[str, Any]:
    """Storm's last-error fields of a component row (its first line as ``lastError``,
    as Storm truncates it; the whole text is in the component's ``componentErrors``);
    ``link`` is the topology's log, where the error was written."""
    if error is None:
        return dict(NO_ERROR)
    return {"lastError": (error.error or "").split("\n", 1)[0],
            "errorHost": error.host or "", "errorPort": error.port,
            "errorTime": error.error_time_secs,
            "errorLapsedSecs": max(0, int(now) - error.error_time_secs),
            "errorWorkerLogLink": link}
