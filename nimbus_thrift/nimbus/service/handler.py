"""The Nimbus service: the IDL's methods over durable state, a launcher and timers.

Every state-changing call checks, commits to SQLite, and only then tells the launcher;
so what the client was told is what survives a crash, and a launcher failure shows up
in ``getTopologyInfo`` instead of losing the request.

Locking (no cheap request holds shared state for long):

- validation and the code check (parsing the uploaded modules) run before any lock,
  at most :data:`CODE_CHECK_SLOTS` at a time;
- the name table (a name is taken by one topology) has a short lock, held only to
  check a name and commit the new row (and by the upload sweep, so a submit's upload
  cannot be swept between its check and its row);
- state changes of a topology (kill, activate, deactivate, rebalance, the timers'
  actions) hold that topology's lock (:mod:`.locks`) only to read and commit;
- launcher calls run after the commit, outside every lock, on the topology's
  background queue (:mod:`.background`); a call waits at most
  ``launcher_reply_wait_secs`` for its outcome, then answers;
- read-only calls take no lock at all (the store gives them their own connection).

Authorization (:mod:`.authz`): every IDL method checks its caller by its rule in
:data:`.authz.METHODS` first, before it validates, locks, writes or queues anything;
a refusal is the IDL's AuthorizationException and an audit event (:mod:`.audit`), as
is every state-changing call whatever its outcome.

Errors the IDL declares go back as themselves (NotAliveException, ...). Errors Storm
reports as a bare RuntimeException (an unknown upload location, activating a KILLED
topology) go back as a TApplicationException INTERNAL_ERROR whose message is one
sentence saying what happened, without a traceback in the log: they are the client's
mistake, not ours.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import threading
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator, ParamSpec

import structlog
from thriftpy2.protocol import TBinaryProtocolFactory
from thriftpy2.utils import serialize

from ...idl import NIMBUS_COMPONENT
from ...topology.code import CodeArchive, CodeError
from ...topology.validate import (MAX_EXECUTORS_PER_TOPOLOGY, MAX_WORKERS,
                                 TOPOLOGY_DEFAULTS, InvalidTopology, TopologyPlan,
                                 check_count, check_name, check_topology, parse_conf)
from ..admission import check_admission, default_budget
from ..security.authz import (Authorizer, Call, Unauthorized, acl_conf_problem, daemon_principal,
                    unclassified, upload_name)
from ..state.background import Job, SerialQueues
from .codecheck import parse_in_child
from ..config import NimbusConfig
from ..launcher import Launcher, LaunchSpec
from ..state.lifecycle import GONE, PREVIOUS, Event, Status, next_status
from ..blobs.calls import BlobCalls
from ..blobs.store import BlobStore
from .listing import CountsCache
from .logs import LogCalls
from ..state.locks import KeyedLocks
from .pages import PageCalls
from ..security.runas import TRAVERSE_MODE, RunAsRefused, os_user_of, run_as_name
from ..state.store import Action, Store, TopologyRecord
from .storm2 import StormTwoCalls
from ..state.timers import Timers
from ..state.timeseries import Sampler, TimeSeries
from ..transfers.calls import TransferCalls
from .wire_errors import client_errors as _client_errors
from ..transfers.uploads import TransferLimits, Transfers

log = structlog.get_logger(__name__)

#: A removal whose launcher stop failed is retried after this long.
REMOVE_RETRY_SECS = 30.0
#: Submits whose code is parsed at once: a parse may peak at ~500 MB per MiB of source
#: (max_code_parse_bytes), so two bound the daemon's transient memory to ~1 GB while a
#: third submit waits (holding its own worker thread only, never a lock).
CODE_CHECK_SLOTS = 2
#: A submit waits this long for a code-check slot, then is refused (a retry is safe).
CODE_CHECK_WAIT_SECS = 60.0
#: Submits waiting for a code-check slot at most; one more is refused at once. Each
#: waiter holds a worker thread: 64 of them (scripts/abuse/nimbus_rows.py row 2) left
#: none for anyone else's calls.
CODE_CHECK_WAITERS = 8
#: At stop, how long the launcher calls running get to finish (the ones queued behind
#: them are redone by the next start's recovery).
CLOSE_WAIT_SECS = 5.0

P = ParamSpec("P")


class NimbusHandler(LogCalls, PageCalls, StormTwoCalls, BlobCalls, TransferCalls):
    """Implements ``service Nimbus`` of idl/nimbus.thrift: the state-changing calls
    here, the file transfers in :class:`~.transfer_calls.TransferCalls`, the read-only
    ones in :class:`~.queries.NimbusQueries`, Storm 2.x's summaries, lookups and the
    calls Spark has no meaning for in :class:`~.storm2_calls.StormTwoCalls`, the blob
    store in :class:`~.blob_calls.BlobCalls`, run-time log levels and tuple sampling in
    :class:`~.log_calls.LogCalls`, the UI's page info in :class:`~.page_calls.PageCalls`."""

    def __init__(self, idl: ModuleType, config: NimbusConfig, store: Store,
                 launcher: Launcher, *, clock: Callable[[], float] = time.time):
        missing = unclassified(idl.Nimbus)
        if missing:
            raise ValueError("methods of service Nimbus missing from nimbus/authz.py's "
                             "METHODS (who may call them): " + ", ".join(missing))
        self.idl = idl
        self.config = config
        #: Who owns what the daemon itself submits (outside a request); with no users
        #: set, the service's only user besides the admins.
        self.daemon_principal = daemon_principal()
        self.authz = Authorizer(config.admins, config.users,
                                daemon_user=self.daemon_principal,
                                allow_anonymous=config.allow_anonymous)
        self.store = store
        self.launcher = launcher
        self.clock = clock
        self.started_at = clock()
        self.topologies_dir = config.data_dir / "topologies"
        self.topologies_dir.mkdir(parents=True, exist_ok=True)
        if config.run_as_user:
            # Each user enters their own work directory by its name; nobody lists.
            os.chmod(self.topologies_dir, TRAVERSE_MODE)
        self.transfers = Transfers(
            store, config.data_dir, max_upload_bytes=config.max_upload_bytes,
            expiration_secs=config.file_copy_expiration_secs,
            retention_secs=config.upload_retention_secs,
            chunk_bytes=config.download_chunk_bytes, clock=clock,
            limits=TransferLimits.of(config))
        self.blobs = BlobStore.of(config, store, self.transfers, self.topologies_dir, clock)
        self.timers = Timers(self.run_action, self._sweep,
                             sweep_every=config.sweep_secs, clock=clock)
        self.background = SerialQueues()
        self._names_lock = threading.Lock()
        self._locks = KeyedLocks()
        self._code_checks = threading.BoundedSemaphore(CODE_CHECK_SLOTS)
        self._code_waiters = 0                 # submits waiting for a code-check slot
        self._code_waiters_lock = threading.Lock()
        self._removing: set[str] = set()        # removals whose stop is under way
        self._removing_lock = threading.Lock()
        self._counts = CountsCache()
        #: Launcher calls that raised, by method (launch, stop, ...): /metrics.
        self.launcher_failures: dict[str, int] = {}
        self._failures_lock = threading.Lock()
        self._memory_budget = config.spark_memory_budget or default_budget()
        self._protocol = TBinaryProtocolFactory()
        self._structs: dict[str, Any] = {}
        #: Each topology's component figures over time: the page-info calls' windows.
        self.figures = TimeSeries()
        self._figure_sampler = Sampler(self.sample_figures)
        self.address = (config.host, config.port)

    # --- life of the daemon ---------------------------------------------------------
    def recover(self) -> None:
        """After (re)start: reconcile uploads and work directories with the rows,
        re-arm timers, hand every known topology to the launcher again (which adopts
        what still runs)."""
        self.transfers.recover()
        self.blobs.recover()
        ids = self.store.topology_ids()
        self._sweep_work_dirs(ids)
        for action in self.store.actions():
            self.timers.arm(action.topology_id, action.due_at)
        jobs = []
        for topology_id in ids:
            try:
                rec = self.store.topology(topology_id)
            except ValueError as exc:       # a row this daemon cannot decode
                log.error("topology_unreadable", topology=topology_id, error=str(exc))
                continue
            if rec is None or not self._work_dir(rec.id).is_dir():
                continue
            log.info("topology_recovered", topology=rec.id, status=rec.status)
            jobs.append(self._in_background(rec.id, "launch", self._launch_now, rec.id))
        # Quick launchers (adopting what runs) are done before the daemon serves; a
        # slow one carries on in the background.
        deadline = time.monotonic() + self.config.launcher_reply_wait_secs
        for job in jobs:
            job.wait(max(0.0, deadline - time.monotonic()))

    def _sweep_work_dirs(self, ids: list[str]) -> None:
        """A work directory without a row is a leftover of a removal or a submit cut
        short: deleted. A row without its work directory (a crash between deleting the
        directory and the row, or a directory deleted by hand) is removed the normal
        way: its launcher is told to stop, then the row goes."""
        known = set(ids)
        for entry in sorted(self.topologies_dir.iterdir()):
            if entry.name not in known:
                log.warning("work_dir_orphan_removed", topology=entry.name,
                            path=str(entry))
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
        now = self.clock()
        for topology_id in ids:
            if self._work_dir(topology_id).is_dir():
                continue
            log.warning("topology_without_work_dir", topology=topology_id,
                        action="removed now")
            with self.store.transaction():
                self.store.set_status(topology_id, Status.KILLED.value, None)
                self.store.set_action(Action(topology_id, "remove", now, {}))

    def start(self, address: tuple[str, int]) -> None:
        """Start timers; ``address`` is where clients reach this nimbus."""
        host, port = address
        if host in ("", "0.0.0.0", "::"):
            host = socket.getfqdn()
        self.address = (host, port)
        self.timers.start()
        self._figure_sampler.start()

    def close(self) -> None:
        self._figure_sampler.stop()
        self.timers.stop()
        self.background.close(CLOSE_WAIT_SECS)

    def _sweep(self) -> None:
        # Under the name table's lock: a submit that found its upload complete checks it
        # again under this lock before its row references it, so the retention sweep
        # cannot delete it in between.
        with self._names_lock:
            self.transfers.sweep()
            self.blobs.sweep()

    # --- submit ---------------------------------------------------------------------
    @_client_errors
    def submitTopology(self, name: str, uploadedJarLocation: str, jsonConf: str,
                       topology: Any) -> None:
        with self._gate("submitTopology", topology=name) as call:
            self._submit(call, name, uploadedJarLocation, jsonConf, topology, None)

    @_client_errors
    def submitTopologyWithOpts(self, name: str, uploadedJarLocation: str, jsonConf: str,
                               topology: Any, options: Any) -> None:
        with self._gate("submitTopologyWithOpts", topology=name) as call:
            self._submit(call, name, uploadedJarLocation, jsonConf, topology, options)

    def _submit(self, call: Call, name: str, uploadedJarLocation: str, jsonConf: str,
                topology: Any, options: Any) -> None:
        self.authz.check(call)
        check_name(name)
        if topology is None:
            raise InvalidTopology("no topology was sent")
        conf = parse_conf(jsonConf, "the topology configuration")
        problem = acl_conf_problem(conf)
        if problem is not None:
            raise InvalidTopology(problem)
        self._check_topology_blobs(call, conf)
        initial = getattr(options, "initial_status", None)
        if initial is None:
            initial = self.idl.TopologyInitialStatus.ACTIVE
        if initial not in (self.idl.TopologyInitialStatus.ACTIVE,
                           self.idl.TopologyInitialStatus.INACTIVE):
            raise InvalidTopology(f"initial_status {initial} is neither ACTIVE (1) "
                                  "nor INACTIVE (2)")
        status = Status.ACTIVE if initial == self.idl.TopologyInitialStatus.ACTIVE \
            else Status.INACTIVE
        self._check_components(topology)
        try:
            memory = self.launcher.memory_request(conf)
        except ValueError as exc:
            raise InvalidTopology(str(exc)) from None
        self._check_name_free(name)          # early, before the costly code check
        upload = self._upload_at(uploadedJarLocation)
        self.authz.check_upload(call, uploadedJarLocation,
                                self.transfers.began_by(upload.id))
        # The owner is who submitted, never what the conf claims: Storm's Nimbus too
        # overwrites topology.submitter.* with the authenticated submitter.
        owner = call.principal if call.principal is not None else self.daemon_principal
        if self.config.run_as_user:
            try:
                os_user_of(owner, dict(self.config.principal_users))
            except RunAsRefused as exc:
                raise Unauthorized(owner, call.operation, "", "topologies run as their "
                                   f"owner's OS user (run_as_user), and {exc}") from None
        plan = self._check_code(topology, conf, upload.id)
        with ExitStack() as held:
            with self._names_lock:
                self._check_name_free(name)
                if self._upload_at(uploadedJarLocation).id != upload.id:
                    raise InvalidTopology("the uploaded code changed during the submit")
                # Under the name table's lock: two submits cannot both take the last room.
                check_admission(memory, self._kept_confs(), self.launcher.memory_request,
                                max_topologies=self.config.max_topologies,
                                budget=self._memory_budget)
                with self.store.transaction():
                    now = self.clock()
                    topology_id = f"{name}-{self.store.next_counter()}-{int(now)}"
                    # The new topology's lock, from before its row is visible until its
                    # launch is queued: a kill that comes at once queues its launcher
                    # calls after the launch, never before it (the launcher would start
                    # a job for a topology already stopped). Nobody else can hold an id
                    # not yet committed, so taking it here cannot wait.
                    held.enter_context(self._locks.hold(topology_id))
                    full_conf = {**plan.conf,
                                 "topology.name": name,
                                 "topology.submitter.principal": owner,
                                 "topology.submitter.user": owner,
                                 "storm.id": topology_id,
                                 "nimbus-thrift.code.location": upload.location,
                                 "nimbus-thrift.code.sha256": upload.sha256}
                    rec = TopologyRecord(
                        id=topology_id, name=name, status=status.value, prev_status=None,
                        owner=owner,
                        submitted_at=now, num_workers=plan.num_workers,
                        executors=plan.executors, tasks=plan.tasks, conf=full_conf,
                        topology=serialize(topology, self._protocol),
                        code_upload=upload.id, code_sha256=upload.sha256 or "",
                        code_bytes=upload.bytes)
                    # The directory first: a row always has one (a crash before the
                    # commit leaves only a directory, which the next start sweeps).
                    work_dir = self._make_work_dir(topology_id)
                    try:
                        self.store.insert_topology(rec)
                    except BaseException:
                        shutil.rmtree(work_dir, ignore_errors=True)
                        raise
            call.subject["topology_id"] = topology_id
            log.info("topology_submitted", topology=topology_id, status=status.value,
                     components=len(plan.components), executors=sum(plan.executors.values()),
                     code_sha256=upload.sha256)
            # The plan of the record: its conf is the one stored (the submitted one with
            # the name, id and code location), as when it is made from the record.
            spec = self._spec(rec, dataclasses.replace(plan, conf=full_conf))
            job = self._in_background(topology_id, "launch", self._launch_submitted,
                                      topology_id, spec)
        job.wait(self.config.launcher_reply_wait_secs)

    def _kept_confs(self) -> Iterator[dict[str, Any]]:
        for topology_id in self.store.topology_ids():
            rec = self.store.topology(topology_id)
            yield rec.conf if rec is not None else {}

    def _check_components(self, topology: Any) -> None:
        count = sum(len(getattr(topology, part, None) or {})
                    for part in ("spouts", "bolts", "state_spouts"))
        if count > self.config.max_components:
            raise InvalidTopology(f"the topology has {count} components; the limit is "
                                  f"{self.config.max_components} (max_components)")

    def _upload_at(self, location: Any) -> Any:
        upload = self.transfers.completed(location) if isinstance(location, str) else None
        if upload is None:
            raise InvalidTopology(
                f"uploaded code location {upload_name(location)!r} is unknown, unfinished "
                "or expired: upload the code with beginFileUpload, uploadChunk and "
                "finishFileUpload, then submit with the location beginFileUpload returned")
        return upload

    def _check_code(self, topology: Any, conf: dict[str, Any], upload_id: str
                    ) -> TopologyPlan:
        """Validate the topology against its code: no lock held, a bounded number at
        once, each module parsed at most once."""
        with self._code_waiters_lock:
            if self._code_waiters >= CODE_CHECK_WAITERS:
                raise InvalidTopology(
                    f"{CODE_CHECK_SLOTS} submits are checking their code and "
                    f"{self._code_waiters} more are waiting (at most {CODE_CHECK_WAITERS} "
                    "wait); submit again later")
            self._code_waiters += 1
        try:
            acquired = self._code_checks.acquire(timeout=CODE_CHECK_WAIT_SECS)
        finally:
            with self._code_waiters_lock:
                self._code_waiters -= 1
        if not acquired:
            raise InvalidTopology(
                f"{CODE_CHECK_SLOTS} other submits have been checking their code for over "
                f"{CODE_CHECK_WAIT_SECS:.0f} s (at most {CODE_CHECK_SLOTS} are checked at "
                "once); submit again later")
        try:
            try:
                code = CodeArchive.open(
                    self.transfers.code_path(upload_id),
                    max_parse_bytes=self.config.max_code_parse_bytes,
                    max_parse_total=self.config.max_code_parse_total_bytes,
                    parser=parse_in_child)
            except CodeError as exc:
                raise InvalidTopology(str(exc)) from None
            with code:
                return check_topology(topology, conf, code)
        finally:
            self._code_checks.release()

    def _make_work_dir(self, topology_id: str) -> Path:
        path = self._work_dir(topology_id)
        try:
            path.mkdir()
        except OSError as exc:
            log.warning("work_dir_failed", topology=topology_id, path=str(path),
                        error=str(exc))
            size = len(topology_id.encode("utf-8", "surrogatepass"))
            raise InvalidTopology(
                f"the topology's work directory cannot be created for id "
                f"{topology_id!r} ({size} bytes): {exc.strerror or type(exc).__name__}; "
                "a shorter name may fit") from None
        return path

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
    @contextmanager
    def _locked(self, call: Call, name: Any) -> Iterator[TopologyRecord]:
        """If ``call`` may control the topology named ``name`` (checked before the lock
        is taken: its owner and conf never change), hold its lock; yield its record
        as of now."""
        rec = self._alive(name)
        call.subject["topology_id"] = rec.id
        self.authz.check(call, self._acl(rec))
        with self._locks.hold(rec.id):
            current = self.store.topology(rec.id)
            if current is None:         # removed while this call waited for the lock
                raise self.idl.NotAliveException(msg=f"no topology named {name!r}")
            yield current

    @_client_errors
    def killTopology(self, name: str) -> None:
        with self._gate("killTopology", topology=name) as call:
            self._kill(call, name, None)

    @_client_errors
    def killTopologyWithOpts(self, name: str, options: Any) -> None:
        with self._gate("killTopologyWithOpts", topology=name) as call:
            self._kill(call, name, options)

    def _kill(self, call: Call, name: str, options: Any) -> None:
        with self._locked(call, name) as rec:
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
            job = None
            if rec.status != Status.KILLED.value:
                # Spouts stop while in-flight tuples drain, as Storm does during the wait.
                job = self._queue_call(rec.id, self.launcher.pause, rec.id)
            self.timers.arm(rec.id, due)         # after the pause: the stop queues behind
        log.info("topology_killed", topology=rec.id, wait_secs=wait, previous=rec.status)
        self._reply_after(rec.id, job)

    @_client_errors
    def activate(self, name: str) -> None:
        with self._gate("activate", topology=name) as call:
            self._toggle(call, name, Event.ACTIVATE)

    @_client_errors
    def deactivate(self, name: str) -> None:
        with self._gate("deactivate", topology=name) as call:
            self._toggle(call, name, Event.DEACTIVATE)

    def _toggle(self, call: Call, name: str, event: Event) -> None:
        with self._locked(call, name) as rec:
            target = next_status(name, Status(rec.status), event)
            assert isinstance(target, Status)
            if target.value == rec.status:
                return
            self.store.set_status(rec.id, target.value, None)
            job = self._queue_call(rec.id, self.launcher.resume if event is Event.ACTIVATE
                                   else self.launcher.pause, rec.id)
        log.info("topology_" + event.value + "d", topology=rec.id)
        self._reply_after(rec.id, job)

    @_client_errors
    def rebalance(self, name: str, options: Any) -> None:
        with self._gate("rebalance", topology=name) as call:
            self._rebalance(call, name, options)

    def _rebalance(self, call: Call, name: str, options: Any) -> None:
        with self._locked(call, name) as rec:
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
            if workers is not None:
                check_count("num_workers", workers, MAX_WORKERS, "workers")
            # The same bounds as at submit: what a rebalance asks for ends in i32 fields
            # and in loops over executors too.
            after = {**rec.executors, **executors}
            check_count("the executors after the rebalance", sum(after.values()),
                        MAX_EXECUTORS_PER_TOPOLOGY, "executors per topology")
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
            job = self._queue_call(rec.id, self.launcher.pause, rec.id)
            self.timers.arm(rec.id, due)
        log.info("topology_rebalancing", topology=rec.id, wait_secs=wait,
                 num_workers=workers, num_executors=dict(executors))
        self._reply_after(rec.id, job)

    def run_action(self, topology_id: str) -> None:
        """Run the topology's pending action if it is due (called by the timers). The
        state change is committed here; the launcher's part runs in the background."""
        with self._locks.hold(topology_id):
            action = self.store.action(topology_id)
            rec = self.store.topology(topology_id)
            if action is None or rec is None or action.due_at > self.clock():
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
                self.store.clear_action(topology_id)
                return
        self._in_background(topology_id, "stop", self._remove, topology_id)

    def _remove(self, topology_id: str) -> None:
        """Stop the topology's processes, then delete its work directory, then its row
        (a crash in between leaves a row without a directory: swept at start)."""
        try:
            stopped = self._launcher_call(topology_id, self.launcher.stop, topology_id,
                                          self.config.stop_grace_secs)
            with self._locks.hold(topology_id):
                if self.store.topology(topology_id) is None:
                    return
                if not stopped:
                    due = self.clock() + REMOVE_RETRY_SECS
                    self.store.set_action(Action(topology_id, "remove", due, {}))
                    self.timers.arm(topology_id, due)
                    return
                shutil.rmtree(self._work_dir(topology_id), ignore_errors=True)
                self.store.delete_topology(topology_id)
                self._structs.pop(topology_id, None)
                self._counts.forget(topology_id)
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
        with self.store.transaction():
            self.store.set_parallelism(rec.id, workers, executors)
            self.store.set_status(rec.id, restored, None)
            self.store.clear_action(rec.id)
        log.info("topology_rebalanced", topology=rec.id, num_workers=workers,
                 executors=executors, status=restored)
        self._in_background(rec.id, "rebalance", self._rebalance_now, rec.id)

    def _rebalance_now(self, topology_id: str) -> None:
        rec = self.store.topology(topology_id)
        if rec is not None:             # its spec as of now: later changes are queued
            self._launcher_call(rec.id, self.launcher.rebalance, self._spec(rec))

    def _launch_submitted(self, topology_id: str, spec: LaunchSpec) -> None:
        self._materialise_blobs(topology_id, spec.conf)
        self._launcher_call(topology_id, self.launcher.launch, spec)

    def _launch_now(self, topology_id: str) -> None:
        rec = self.store.topology(topology_id)
        if rec is not None:
            self._materialise_blobs(rec.id, rec.conf)
            self._launcher_call(rec.id, self.launcher.launch, self._spec(rec))

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
            active=rec.status == Status.ACTIVE.value, plan=plan, invalid=invalid,
            run_as=run_as_name(self.config, rec.owner))

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
            with self._failures_lock:
                self.launcher_failures[name] = self.launcher_failures.get(name, 0) + 1
            message = f"launcher {name} failed: {type(exc).__name__}: {exc}"
            log.error("launcher_failed", topology=topology_id, method=name,
                      error=str(exc), exc_info=exc)
            if self.store.topology(topology_id) is not None:
                self.store.add_error(topology_id, NIMBUS_COMPONENT, message,
                                     int(self.clock()))
            return False

    def _in_background(self, topology_id: str, what: str,
                       func: Callable[P, object], *args: P.args, **kwargs: P.kwargs
                       ) -> Any:
        """Queue ``func`` on the topology's launcher queue (after its earlier calls)."""
        return self.background.submit(topology_id, lambda: func(*args, **kwargs), what)

    def _queue_call(self, topology_id: str, method: Callable[P, object],
                    *args: P.args, **kwargs: P.kwargs) -> Job:
        """Queue a launcher call behind the topology's earlier ones. Called under the
        topology's lock, so the launcher sees its calls in the order their state
        changes committed (a kill's pause before the removal's stop; two toggles in
        the order they were stored)."""
        return self.background.submit(
            topology_id, lambda: self._launcher_call(topology_id, method, *args, **kwargs),
            method.__name__)

    def _reply_after(self, topology_id: str, job: Job | None) -> None:
        """Wait a moment for a queued launcher call (outside every lock), so a quick
        launcher's outcome is in the reply; a slow one goes on after the reply."""
        if job is not None and not job.wait(self.config.launcher_reply_wait_secs):
            log.info("launcher_call_continues", topology=topology_id, method=job.what,
                     waited_secs=self.config.launcher_reply_wait_secs)
