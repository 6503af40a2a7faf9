"""The Nimbus service: the IDL's methods over durable state, a launcher and timers.

Every state-changing call runs under one lock, checks, commits to SQLite, and only then
tells the launcher; so what the client was told is what survives a crash, and a
launcher failure shows up in ``getTopologyInfo`` instead of losing the request.

Errors the IDL declares go back as themselves (NotAliveException, ...). Errors Storm
reports as a bare RuntimeException (an unknown upload location, activating a KILLED
topology) go back as a TApplicationException INTERNAL_ERROR whose message is one
sentence saying what happened, without a traceback in the log: they are the client's
mistake, not ours.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import shutil
import socket
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, ParamSpec, TypeVar

import structlog
from thriftpy2.protocol import TBinaryProtocolFactory
from thriftpy2.thrift import TApplicationException
from thriftpy2.utils import deserialize, serialize

from .. import __version__
from ..idl import NIMBUS_COMPONENT
from ..topology.code import CodeArchive, CodeError
from ..topology.streams import STATEFUL_KEY
from ..topology.validate import (TOPOLOGY_DEFAULTS, InvalidTopology, TopologyPlan,
                                 check_name, check_topology, parse_conf, task_ranges)
from .config import NimbusConfig, to_public
from .launcher import Launcher, LaunchSpec, RunStatus
from .lifecycle import GONE, PREVIOUS, Event, Status, TransitionRefused, next_status
from .store import Action, Store, TopologyRecord
from .timers import Timers
from .transfers import TransferError, Transfers

log = structlog.get_logger(__name__)

#: A removal whose launcher stop failed is retried after this long.
REMOVE_RETRY_SECS = 30.0
#: Storm's window key for all-time statistics.
ALL_TIME = ":all-time"

F = TypeVar("F", bound=Callable[..., Any])
P = ParamSpec("P")


def _client_errors(func: F) -> F:
    """Map the service's own errors onto what Storm clients expect on the wire."""
    @functools.wraps(func)
    def wrapper(self: "NimbusHandler", *args: Any) -> Any:
        try:
            return func(self, *args)
        except InvalidTopology as exc:
            log.info("request_refused", error=str(exc))
            raise self.idl.InvalidTopologyException(msg=str(exc)) from None
        except (TransitionRefused, TransferError) as exc:
            log.info("request_refused", error=str(exc))
            raise TApplicationException(TApplicationException.INTERNAL_ERROR,
                                        str(exc)) from None
    return wrapper  # type: ignore[return-value]


class NimbusHandler:
    """Implements ``service Nimbus`` of idl/nimbus.thrift."""

    def __init__(self, idl: ModuleType, config: NimbusConfig, store: Store,
                 launcher: Launcher, *, clock: Callable[[], float] = time.time):
        self.idl = idl
        self.config = config
        self.store = store
        self.launcher = launcher
        self.clock = clock
        self.started_at = clock()
        self.topologies_dir = config.data_dir / "topologies"
        self.topologies_dir.mkdir(parents=True, exist_ok=True)
        self.transfers = Transfers(
            store, config.data_dir, max_upload_bytes=config.max_upload_bytes,
            expiration_secs=config.file_copy_expiration_secs,
            retention_secs=config.upload_retention_secs,
            chunk_bytes=config.download_chunk_bytes, clock=clock)
        self.timers = Timers(self.run_action, self._sweep,
                             sweep_every=config.sweep_secs, clock=clock)
        self._lock = threading.RLock()
        self._protocol = TBinaryProtocolFactory()
        self._structs: dict[str, Any] = {}
        self.address = (config.host, config.port)

    # --- life of the daemon ---------------------------------------------------------
    def recover(self) -> None:
        """After (re)start: reconcile uploads, re-arm timers, hand every known topology
        to the launcher again (which adopts what still runs)."""
        self.transfers.recover()
        for action in self.store.actions():
            self.timers.arm(action.topology_id, action.due_at)
        for rec in self.store.topologies():
            log.info("topology_recovered", topology=rec.id, status=rec.status)
            self._launcher_call(rec.id, self.launcher.launch, self._spec(rec))

    def start(self, address: tuple[str, int]) -> None:
        """Start timers; ``address`` is where clients reach this nimbus."""
        host, port = address
        if host in ("", "0.0.0.0", "::"):
            host = socket.getfqdn()
        self.address = (host, port)
        self.timers.start()

    def close(self) -> None:
        self.timers.stop()

    def _sweep(self) -> None:
        # Under the submit lock: a submit that found its upload complete must not see
        # it deleted by the retention sweep before the topology row references it.
        with self._lock:
            self.transfers.sweep()

    # --- submit ---------------------------------------------------------------------
    def submitTopology(self, name: str, uploadedJarLocation: str, jsonConf: str,
                       topology: Any) -> None:
        self.submitTopologyWithOpts(name, uploadedJarLocation, jsonConf, topology, None)

    @_client_errors
    def submitTopologyWithOpts(self, name: str, uploadedJarLocation: str, jsonConf: str,
                               topology: Any, options: Any) -> None:
        check_name(name)
        if topology is None:
            raise InvalidTopology("no topology was sent")
        conf = parse_conf(jsonConf, "the topology configuration")
        initial = getattr(options, "initial_status", None)
        if initial is None:
            initial = self.idl.TopologyInitialStatus.ACTIVE
        if initial not in (self.idl.TopologyInitialStatus.ACTIVE,
                           self.idl.TopologyInitialStatus.INACTIVE):
            raise InvalidTopology(f"initial_status {initial} is neither ACTIVE (1) "
                                  "nor INACTIVE (2)")
        status = Status.ACTIVE if initial == self.idl.TopologyInitialStatus.ACTIVE \
            else Status.INACTIVE
        with self._lock:
            self._check_name_free(name)
            upload = self.transfers.completed(uploadedJarLocation) \
                if isinstance(uploadedJarLocation, str) else None
            if upload is None:
                raise InvalidTopology(
                    f"uploaded code location {uploadedJarLocation!r} is unknown, unfinished "
                    "or expired: upload the code with beginFileUpload, uploadChunk and "
                    "finishFileUpload, then submit with the location beginFileUpload returned")
            try:
                code = CodeArchive.open(self.transfers.code_path(upload.id))
            except CodeError as exc:
                raise InvalidTopology(str(exc)) from None
            plan = check_topology(topology, conf, code)
            now = self.clock()
            topology_id = f"{name}-{self.store.next_counter()}-{int(now)}"
            full_conf = {**plan.conf,
                         "topology.name": name,
                         "storm.id": topology_id,
                         "nimbus-thrift.code.location": upload.location,
                         "nimbus-thrift.code.sha256": upload.sha256}
            rec = TopologyRecord(
                id=topology_id, name=name, status=status.value, prev_status=None,
                owner=str(conf.get("topology.submitter.user") or ""), submitted_at=now,
                num_workers=plan.num_workers, executors=plan.executors, tasks=plan.tasks,
                conf=full_conf, topology=serialize(topology, self._protocol),
                code_upload=upload.id, code_sha256=upload.sha256 or "",
                code_bytes=upload.bytes)
            self.store.insert_topology(rec)
            self._work_dir(topology_id).mkdir(parents=True, exist_ok=True)
            log.info("topology_submitted", topology=topology_id, status=status.value,
                     components=len(plan.components), executors=sum(plan.executors.values()),
                     code_sha256=upload.sha256)
            # The plan of the record: its conf is the one stored (the submitted one with
            # the name, id and code location), as when it is made from the record.
            self._launcher_call(topology_id, self.launcher.launch,
                                self._spec(rec, dataclasses.replace(plan, conf=full_conf)))

    def _check_name_free(self, name: str) -> None:
        rec = self.store.topology_named(name)
        if rec is None:
            return
        detail = ""
        if rec.status == Status.KILLED.value:
            action = self.store.action(rec.id)
            if action is not None:
                detail = f", removed in {max(0, round(action.due_at - self.clock()))} s"
        raise self.idl.AlreadyAliveException(
            msg=f"topology {name!r} already exists ({rec.id}, {rec.status}{detail})")

    # --- lifecycle ------------------------------------------------------------------
    def killTopology(self, name: str) -> None:
        self.killTopologyWithOpts(name, None)

    @_client_errors
    def killTopologyWithOpts(self, name: str, options: Any) -> None:
        with self._lock:
            rec = self._alive(name)
            wait = getattr(options, "wait_secs", None)
            if wait is None:
                wait = rec.conf.get("topology.message.timeout.secs",
                                    TOPOLOGY_DEFAULTS["topology.message.timeout.secs"])
            wait = max(0, wait)
            next_status(name, Status(rec.status), Event.KILL)
            due = self.clock() + wait
            with self.store.transaction():
                self.store.set_status(rec.id, Status.KILLED.value, None)
                self.store.set_action(Action(rec.id, "remove", due, {}))
            self.timers.arm(rec.id, due)
            log.info("topology_killed", topology=rec.id, wait_secs=wait,
                     previous=rec.status)
            if rec.status != Status.KILLED.value:
                # Spouts stop while in-flight tuples drain, as Storm does during the wait.
                self._launcher_call(rec.id, self.launcher.pause, rec.id)

    @_client_errors
    def activate(self, name: str) -> None:
        self._toggle(name, Event.ACTIVATE)

    @_client_errors
    def deactivate(self, name: str) -> None:
        self._toggle(name, Event.DEACTIVATE)

    def _toggle(self, name: str, event: Event) -> None:
        with self._lock:
            rec = self._alive(name)
            target = next_status(name, Status(rec.status), event)
            assert isinstance(target, Status)
            if target.value == rec.status:
                return
            self.store.set_status(rec.id, target.value, None)
            log.info("topology_" + event.value + "d", topology=rec.id)
            self._launcher_call(rec.id, self.launcher.resume if event is Event.ACTIVATE
                                else self.launcher.pause, rec.id)

    @_client_errors
    def rebalance(self, name: str, options: Any) -> None:
        with self._lock:
            rec = self._alive(name)
            wait = getattr(options, "wait_secs", None)
            workers = getattr(options, "num_workers", None)
            executors = getattr(options, "num_executors", None) or {}
            if wait is None:
                wait = rec.conf.get("topology.message.timeout.secs",
                                    TOPOLOGY_DEFAULTS["topology.message.timeout.secs"])
            if wait < 0:
                raise InvalidTopology(f"wait_secs must not be negative, not {wait}")
            if workers is not None and workers <= 0:
                raise InvalidTopology(f"num_workers must be at least 1, not {workers}")
            for component, count in sorted(executors.items()):
                if component not in rec.tasks:
                    raise InvalidTopology(f"topology {name!r} has no component {component!r}"
                                          f"; components: {', '.join(sorted(rec.tasks))}")
                if count <= 0:
                    raise InvalidTopology(f"component {component!r} cannot run on {count} "
                                          "executors; the least is 1")
                if count > rec.tasks[component]:
                    raise InvalidTopology(
                        f"component {component!r} has {rec.tasks[component]} tasks and "
                        f"cannot run on {count} executors (tasks are fixed at submit; set "
                        "topology.tasks in the component's json_conf to allow more)")
                current = rec.executors.get(component)
                if count != current and self._stateful(rec, component):
                    raise InvalidTopology(
                        f"component {component!r} is a stateful bolt: its keyed state is "
                        f"partitioned in the checkpoint, which pins it to the {current} "
                        f"executors it started with, so it cannot run on {count}; kill "
                        "and resubmit to change it (its state starts empty)")
            next_status(name, Status(rec.status), Event.REBALANCE)
            due = self.clock() + wait
            with self.store.transaction():
                self.store.set_status(rec.id, Status.REBALANCING.value, rec.status)
                self.store.set_action(Action(rec.id, "rebalance", due, {
                    "num_workers": workers, "num_executors": dict(executors)}))
            self.timers.arm(rec.id, due)
            log.info("topology_rebalancing", topology=rec.id, wait_secs=wait,
                     num_workers=workers, num_executors=dict(executors))
            self._launcher_call(rec.id, self.launcher.pause, rec.id)

    def run_action(self, topology_id: str) -> None:
        """Run the topology's pending action if it is due (called by the timers)."""
        with self._lock:
            action = self.store.action(topology_id)
            rec = self.store.topology(topology_id)
            if action is None or rec is None or action.due_at > self.clock():
                return
            if action.kind == "remove":
                self._remove(rec)
            elif action.kind == "rebalance":
                self._apply_rebalance(rec, action)
            else:
                log.error("unknown_action", topology=topology_id, kind=action.kind)
                self.store.clear_action(topology_id)

    def _remove(self, rec: TopologyRecord) -> None:
        assert next_status(rec.name, Status(rec.status), Event.REMOVE) == GONE
        if not self._launcher_call(rec.id, self.launcher.stop, rec.id,
                                   self.config.stop_grace_secs):
            due = self.clock() + REMOVE_RETRY_SECS
            self.store.set_action(Action(rec.id, "remove", due, {}))
            self.timers.arm(rec.id, due)
            return
        self.store.delete_topology(rec.id)
        self._structs.pop(rec.id, None)
        shutil.rmtree(self._work_dir(rec.id), ignore_errors=True)
        log.info("topology_removed", topology=rec.id)

    def _apply_rebalance(self, rec: TopologyRecord, action: Action) -> None:
        target = next_status(rec.name, Status(rec.status), Event.DO_REBALANCE)
        assert target == PREVIOUS
        restored = rec.prev_status or Status.ACTIVE.value
        workers = action.options.get("num_workers") or rec.num_workers
        executors = {**rec.executors, **action.options.get("num_executors", {})}
        with self.store.transaction():
            self.store.set_parallelism(rec.id, workers, executors)
            self.store.set_status(rec.id, restored, None)
            self.store.clear_action(rec.id)
        log.info("topology_rebalanced", topology=rec.id, num_workers=workers,
                 executors=executors, status=restored)
        updated = self.store.topology(rec.id)
        assert updated is not None
        self._launcher_call(rec.id, self.launcher.rebalance, self._spec(updated))

    def _alive(self, name: Any) -> TopologyRecord:
        rec = self.store.topology_named(name) if isinstance(name, str) else None
        if rec is None:
            raise self.idl.NotAliveException(msg=f"no topology named {name!r}")
        return rec

    # --- code transfer --------------------------------------------------------------
    @_client_errors
    def beginFileUpload(self) -> str:
        return self.transfers.begin_upload()

    @_client_errors
    def uploadChunk(self, location: str, chunk: bytes) -> None:
        self.transfers.upload_chunk(location, chunk or b"")

    @_client_errors
    def finishFileUpload(self, location: str) -> None:
        self.transfers.finish_upload(location)

    @_client_errors
    def beginFileDownload(self, file: str) -> str:
        rec = self.store.topology(file) if isinstance(file, str) else None
        upload = self.store.upload(rec.code_upload) if rec is not None else \
            self.transfers.completed(file) if isinstance(file, str) else None
        if upload is None or upload.state != "complete":
            raise TransferError(f"{file!r} is neither a topology id nor the location of a "
                                "finished upload")
        return self.transfers.begin_download(upload)

    @_client_errors
    def downloadChunk(self, id: str) -> bytes:
        return self.transfers.download_chunk(id)

    # --- queries --------------------------------------------------------------------
    def getNimbusConf(self) -> str:
        host, port = self.address
        storm = {
            "nimbus.seeds": [host],
            "nimbus.thrift.port": port,
            "nimbus.thrift.max_buffer_size": self.config.max_frame_size,
            "nimbus.thrift.threads": self.config.worker_threads,
            "nimbus.file.copy.expiration.secs": self.config.file_copy_expiration_secs,
            "storm.local.dir": str(self.config.data_dir),
            "storm.thrift.transport": "framed, binary protocol",
            **TOPOLOGY_DEFAULTS,
        }
        ours = {f"nimbus-thrift.{key}": value
                for key, value in to_public(self.config).items()}
        return json.dumps({**storm, **ours, "nimbus-thrift.version": __version__,
                           "nimbus-thrift.bound.port": port}, sort_keys=True)

    def getClusterInfo(self) -> Any:
        nodes = self.launcher.nodes()
        now = self.clock()
        supervisors = [self.idl.SupervisorSummary(
            host=n.host, uptime_secs=_secs(now - n.started_at), num_workers=n.slots,
            num_used_workers=n.used_slots, supervisor_id=n.node_id,
            version=n.version or "VERSION_NOT_PROVIDED") for n in nodes]
        topologies = [self._summary(rec, now) for rec in self.store.topologies()]
        return self.idl.ClusterSummary(
            supervisors=supervisors, nimbus_uptime_secs=_secs(now - self.started_at),
            topologies=topologies, nimbuses=[self.getLeader()])

    def getLeader(self) -> Any:
        host, port = self.address
        return self.idl.NimbusSummary(host=host, port=port,
                                      uptime_secs=_secs(self.clock() - self.started_at),
                                      isLeader=True, version=__version__)

    def isTopologyNameAllowed(self, name: str) -> bool:
        try:
            check_name(name)
        except InvalidTopology:
            return False
        return self.store.topology_named(name) is None

    def getTopologyInfo(self, id: str) -> Any:
        rec = self._by_id(id)
        now = self.clock()
        run = self._run_status(rec)
        executors = []
        if run.assigned:
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
            executors=executors, status=rec.status, errors=errors,
            sched_status=run.detail, owner=rec.owner)

    def getTopologyConf(self, id: str) -> str:
        return json.dumps(self._by_id(id).conf, sort_keys=True)

    def getTopology(self, id: str) -> Any:
        # Storm adds its system components (ackers, metrics) here; there are none on Spark.
        return self.getUserTopology(id)

    def getUserTopology(self, id: str) -> Any:
        return self._topology_struct(self._by_id(id))

    def _by_id(self, topology_id: Any) -> TopologyRecord:
        rec = self.store.topology(topology_id) if isinstance(topology_id, str) else None
        if rec is None:
            raise self.idl.NotAliveException(msg=f"no topology with id {topology_id!r}")
        return rec

    def _summary(self, rec: TopologyRecord, now: float) -> Any:
        run = self._run_status(rec)
        return self.idl.TopologySummary(
            id=rec.id, name=rec.name, num_tasks=sum(rec.tasks.values()),
            num_executors=sum(rec.executors.values()), num_workers=rec.num_workers,
            uptime_secs=_secs(now - rec.submitted_at), status=rec.status,
            sched_status=run.detail, owner=rec.owner)

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
                execute_ms_avg={ALL_TIME: {s: stats.latency_ms for s in first}}))
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

    # --- launcher -------------------------------------------------------------------
    def _work_dir(self, topology_id: str) -> Path:
        return self.topologies_dir / topology_id

    def _spec(self, rec: TopologyRecord, plan: TopologyPlan | None = None) -> LaunchSpec:
        """What the launcher needs of ``rec``; ``plan`` is the submit's, else it is made
        here from the stored topology and conf (once per launch or rebalance)."""
        topology = self._topology_struct(rec)
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
            conf=rec.conf, code_path=self.transfers.code_path(rec.code_upload),
            work_dir=self._work_dir(rec.id), num_workers=rec.num_workers,
            executors=rec.executors, tasks=rec.tasks,
            active=rec.status == Status.ACTIVE.value, plan=plan, invalid=invalid)

    def _launcher_call(self, topology_id: str, method: Callable[P, object],
                       *args: P.args, **kwargs: P.kwargs) -> bool:
        """Call ``method`` of the launcher; on failure record the error on the topology.
        The request that led here is already committed, so it still succeeds for the
        client."""
        try:
            method(*args, **kwargs)
            return True
        except Exception as exc:  # noqa: BLE001 - any launcher failure is recorded
            name = method.__name__
            message = f"launcher {name} failed: {type(exc).__name__}: {exc}"
            log.error("launcher_failed", topology=topology_id, method=name,
                      error=str(exc), exc_info=exc)
            if self.store.topology(topology_id) is not None:
                self.store.add_error(topology_id, NIMBUS_COMPONENT, message,
                                     int(self.clock()))
            return False

    def _run_status(self, rec: TopologyRecord) -> RunStatus:
        try:
            return self.launcher.status(rec.id)
        except Exception as exc:  # noqa: BLE001 - a query must still answer
            log.warning("launcher_status_failed", topology=rec.id, error=str(exc))
            return RunStatus(state="unknown",
                             detail=f"unknown: the launcher failed ({type(exc).__name__}: "
                                    f"{exc})")


def _secs(seconds: float) -> int:
    """Seconds as the IDL's i32, never negative (clocks can step back)."""
    return max(0, min(int(seconds), 2**31 - 1))
