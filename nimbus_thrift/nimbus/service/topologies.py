"""The state-changing calls of ``service Nimbus``: submitTopology(WithOpts),
killTopology(WithOpts), activate, deactivate, rebalance.

Every one checks, commits to SQLite, and only then tells the launcher (through
:mod:`.launching`); so what the client was told is what survives a crash, and a
launcher failure shows up in ``getTopologyInfo`` instead of losing the request.

Locking (no cheap request holds shared state for long):

- validation and the code check (parsing the uploaded modules) run before any lock,
  at most :data:`CODE_CHECK_SLOTS` at a time;
- the name table (a name is taken by one topology) has a short lock, held only to
  check a name and commit the new row (and by the upload sweep, so a submit's upload
  cannot be swept between its check and its row);
- state changes of a topology (kill, activate, deactivate, rebalance, the timers'
  actions) hold that topology's lock (:mod:`..state.locks`) only to read and commit;
- launcher calls run after the commit, outside every lock, on the topology's
  background queue (:mod:`..state.background`); a call waits at most
  ``launcher_reply_wait_secs`` for its outcome, then answers;
- read-only calls take no lock at all (the store gives them their own connection).

Authorization (:mod:`..security.authz`): every call checks its caller by its rule in
:data:`..security.authz.METHODS` first, before it validates, locks, writes or queues
anything; a refusal is the IDL's AuthorizationException and an audit event, as is
every state-changing call whatever its outcome.

Errors the IDL declares go back as themselves (NotAliveException, ...). Errors Storm
reports as a bare RuntimeException (an unknown upload location, activating a KILLED
topology) go back as a TApplicationException INTERNAL_ERROR whose message is one
sentence saying what happened, without a traceback in the log
(:func:`.wire_errors.client_errors`): they are the client's mistake, not ours.
"""

from __future__ import annotations

import dataclasses
import shutil
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import structlog
from thriftpy2.protocol import TBinaryProtocolFactory
from thriftpy2.utils import serialize

from ...topology.code import CodeArchive, CodeError
from ...topology.validate import (MAX_EXECUTORS_PER_TOPOLOGY, MAX_WORKERS,
                                  TOPOLOGY_DEFAULTS, InvalidTopology, TopologyPlan,
                                  check_count, check_name, check_topology, parse_conf)
from ..admission import AdmissionLedger, check_room, default_budget
from ..blobs.calls import TopologyBlobs
from ..config import NimbusConfig
from ..launcher import Launcher
from ..security.authz import Authorizer, Call, Unauthorized, acl_conf_problem, upload_name
from ..security.runas import RunAsRefused, os_user_of
from ..state.lifecycle import Event, Status, next_status
from ..state.locks import KeyedLocks
from ..state.store import Action, Store, TopologyRecord
from ..state.timers import Timers
from ..transfers.uploads import Transfers
from .access import Access
from .codecheck import CodeChecker
from .infos import Infos
from .launching import Launching
from .wire_errors import client_errors as _client_errors

log = structlog.get_logger(__name__)

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


class TopologyCalls:
    """The calls that submit topologies and change their state.

    Args:
        idl: the loaded IDL module.
        config: the daemon's configuration (limits, run-as users, memory budget).
        access: the gate and the topology lookups.
        authz: who may call what.
        store: the daemon's state.
        launcher: asked what memory a topology takes; paused and resumed.
        launching: runs launcher calls in each topology's order, makes launch specs.
        timers: armed when a removal or rebalance is stored.
        locks: the topologies' locks.
        names_lock: the name table's lock (the upload sweep holds it too).
        transfers: the uploads a submit names.
        placement: checks a submit's blob map.
        infos: the topologies' decoded structures.
        daemon_principal: who owns what the daemon submits outside a request.
        clock: epoch seconds.
    """

    def __init__(self, idl: ModuleType, config: NimbusConfig, access: Access,
                 authz: Authorizer, store: Store, launcher: Launcher,
                 launching: Launching, timers: Timers, locks: KeyedLocks,
                 names_lock: threading.Lock, transfers: Transfers,
                 placement: TopologyBlobs, infos: Infos, daemon_principal: str,
                 clock: Callable[[], float]):
        self.idl = idl
        self._config = config
        self._access = access
        self._authz = authz
        self._store = store
        self._launcher = launcher
        self._launching = launching
        self._timers = timers
        self._locks = locks
        self._names_lock = names_lock
        self._transfers = transfers
        self._placement = placement
        self._infos = infos
        self._daemon_principal = daemon_principal
        self._clock = clock
        self._code_checks = threading.BoundedSemaphore(CODE_CHECK_SLOTS)
        self._code_waiters = 0                 # submits waiting for a code-check slot
        self._code_waiters_lock = threading.Lock()
        self._memory_budget = config.spark_memory_budget or default_budget()
        #: What the kept topologies take, kept as they come and go (not summed per submit).
        self.admission = AdmissionLedger(launcher.memory_request)
        #: Parses uploaded modules in reused child processes, cached by content.
        self.code_checker = CodeChecker()
        self._protocol = TBinaryProtocolFactory()

    # --- submit ---------------------------------------------------------------------
    @_client_errors
    def submitTopology(self, name: str, uploadedJarLocation: str, jsonConf: str,
                       topology: Any) -> None:
        with self._access.gate("submitTopology", topology=name) as call:
            self._submit(call, name, uploadedJarLocation, jsonConf, topology, None)

    @_client_errors
    def submitTopologyWithOpts(self, name: str, uploadedJarLocation: str, jsonConf: str,
                               topology: Any, options: Any) -> None:
        with self._access.gate("submitTopologyWithOpts", topology=name) as call:
            self._submit(call, name, uploadedJarLocation, jsonConf, topology, options)

    def _submit(self, call: Call, name: str, uploadedJarLocation: str, jsonConf: str,
                topology: Any, options: Any) -> None:
        self._authz.check(call)
        check_name(name)
        if topology is None:
            raise InvalidTopology("no topology was sent")
        conf = parse_conf(jsonConf, "the topology configuration")
        problem = acl_conf_problem(conf)
        if problem is not None:
            raise InvalidTopology(problem)
        self._placement.check_map(call, conf)
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
            memory = self._launcher.memory_request(conf)
        except ValueError as exc:
            raise InvalidTopology(str(exc)) from None
        self._check_name_free(name)          # early, before the costly code check
        upload = self._upload_at(uploadedJarLocation)
        self._authz.check_upload(call, uploadedJarLocation,
                                self._transfers.began_by(upload.id))
        # The owner is who submitted, never what the conf claims: Storm's Nimbus too
        # overwrites topology.submitter.* with the authenticated submitter.
        owner = call.principal if call.principal is not None else self._daemon_principal
        if self._config.run_as_user:
            try:
                os_user_of(owner, dict(self._config.principal_users))
            except RunAsRefused as exc:
                raise Unauthorized(owner, call.operation, "", "topologies run as their "
                                   f"owner's OS user (run_as_user), and {exc}") from None
        plan = self._check_code(topology, conf, upload.id)
        capacity = getattr(self._launcher, "check_capacity", None)
        if capacity is not None:
            # Where drivers run on a cluster, its free room now (cluster mode).
            try:
                capacity(plan.conf, max(plan.executors.values(), default=1),
                         plan.num_workers)
            except ValueError as exc:
                raise InvalidTopology(str(exc)) from None
        with ExitStack() as held:
            with self._names_lock:
                self._check_name_free(name)
                if self._upload_at(uploadedJarLocation).id != upload.id:
                    raise InvalidTopology("the uploaded code changed during the submit")
                # Under the name table's lock: two submits cannot both take the last room.
                kept = self._store.topology_count()
                self.admission.sync(kept, self._store.topology_ids, self._conf_of)
                check_room(memory, kept, self.admission.total,
                           max_topologies=self._config.max_topologies,
                           budget=self._memory_budget)
                with self._store.transaction():
                    now = self._clock()
                    topology_id = f"{name}-{self._store.next_counter()}-{int(now)}"
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
                        self._store.insert_topology(rec)
                    except BaseException:
                        shutil.rmtree(work_dir, ignore_errors=True)
                        raise
                # Committed: recorded before the name table's lock is let go.
                self.admission.add(topology_id, full_conf)
            call.subject["topology_id"] = topology_id
            log.info("topology_submitted", topology=topology_id, status=status.value,
                     components=len(plan.components), executors=sum(plan.executors.values()),
                     code_sha256=upload.sha256)
            # The plan of the record: its conf is the one stored (the submitted one with
            # the name, id and code location), as when it is made from the record.
            spec = self._launching.spec(rec, dataclasses.replace(plan, conf=full_conf))
            job = self._launching.in_background(topology_id, "launch", self._launching.launch_submitted,
                                      topology_id, spec)
        job.wait(self._config.launcher_reply_wait_secs)

    def _conf_of(self, topology_id: str) -> dict[str, Any] | None:
        rec = self._store.topology(topology_id)
        return rec.conf if rec is not None else None

    def _check_components(self, topology: Any) -> None:
        count = sum(len(getattr(topology, part, None) or {})
                    for part in ("spouts", "bolts", "state_spouts"))
        if count > self._config.max_components:
            raise InvalidTopology(f"the topology has {count} components; the limit is "
                                  f"{self._config.max_components} (max_components)")

    def _upload_at(self, location: Any) -> Any:
        upload = self._transfers.completed(location) if isinstance(location, str) else None
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
                    self._transfers.code_path(upload_id),
                    max_parse_bytes=self._config.max_code_parse_bytes,
                    max_parse_total=self._config.max_code_parse_total_bytes,
                    parser=self.code_checker.parse)
            except CodeError as exc:
                raise InvalidTopology(str(exc)) from None
            with code:
                return check_topology(topology, conf, code)
        finally:
            self._code_checks.release()

    def _make_work_dir(self, topology_id: str) -> Path:
        path = self._launching.work_dir(topology_id)
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
        rec = self._store.topology_named(name)
        if rec is None:
            return
        detail = ""
        if rec.status == Status.KILLED.value:
            action = self._store.action(rec.id)
            if action is not None:
                detail = f", removed in {max(0, round(action.due_at - self._clock()))} s"
        raise self.idl.AlreadyAliveException(
            msg=f"topology {name!r} already exists ({rec.id}, {rec.status}{detail})")

    # --- state changes -------------------------------------------------------------
    @contextmanager
    def _locked(self, call: Call, name: Any) -> Iterator[TopologyRecord]:
        """If ``call`` may control the topology named ``name`` (checked before the lock
        is taken: its owner and conf never change), hold its lock; yield its record
        as of now."""
        rec = self._access.permitted_named(call, name)
        with self._locks.hold(rec.id):
            current = self._store.topology(rec.id)
            if current is None:         # removed while this call waited for the lock
                raise self.idl.NotAliveException(msg=f"no topology named {name!r}")
            yield current

    @_client_errors
    def killTopology(self, name: str) -> None:
        with self._access.gate("killTopology", topology=name) as call:
            self._kill(call, name, None)

    @_client_errors
    def killTopologyWithOpts(self, name: str, options: Any) -> None:
        with self._access.gate("killTopologyWithOpts", topology=name) as call:
            self._kill(call, name, options)

    def _kill(self, call: Call, name: str, options: Any) -> None:
        with self._locked(call, name) as rec:
            wait = getattr(options, "wait_secs", None)
            if wait is None:
                wait = rec.conf.get("topology.message.timeout.secs",
                                    TOPOLOGY_DEFAULTS["topology.message.timeout.secs"])
            wait = max(0, wait)
            next_status(name, Status(rec.status), Event.KILL)
            due = self._clock() + wait
            with self._store.transaction():
                self._store.set_status(rec.id, Status.KILLED.value, None)
                self._store.set_action(Action(rec.id, "remove", due, {}))
            job = None
            if rec.status != Status.KILLED.value:
                # Spouts stop while in-flight tuples drain, as Storm does during the wait.
                job = self._launching.queue_call(rec.id, self._launcher.pause, rec.id)
            self._timers.arm(rec.id, due)         # after the pause: the stop queues behind
        log.info("topology_killed", topology=rec.id, wait_secs=wait, previous=rec.status)
        self._launching.reply_after(rec.id, job)

    @_client_errors
    def activate(self, name: str) -> None:
        with self._access.gate("activate", topology=name) as call:
            self._toggle(call, name, Event.ACTIVATE)

    @_client_errors
    def deactivate(self, name: str) -> None:
        with self._access.gate("deactivate", topology=name) as call:
            self._toggle(call, name, Event.DEACTIVATE)

    def _toggle(self, call: Call, name: str, event: Event) -> None:
        with self._locked(call, name) as rec:
            target = next_status(name, Status(rec.status), event)
            assert isinstance(target, Status)
            if target.value == rec.status:
                return
            self._store.set_status(rec.id, target.value, None)
            job = self._launching.queue_call(rec.id, self._launcher.resume if event is Event.ACTIVATE
                                   else self._launcher.pause, rec.id)
        log.info("topology_" + event.value + "d", topology=rec.id)
        self._launching.reply_after(rec.id, job)

    @_client_errors
    def rebalance(self, name: str, options: Any) -> None:
        with self._access.gate("rebalance", topology=name) as call:
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
                if count != current and self._infos.stateful(rec, component):
                    raise InvalidTopology(
                        f"component {component!r} is a stateful bolt: its keyed state is "
                        f"partitioned in the checkpoint, which pins it to the {current} "
                        f"executors it started with, so it cannot run on {count}; kill "
                        "and resubmit to change it (its state starts empty)")
            next_status(name, Status(rec.status), Event.REBALANCE)
            due = self._clock() + wait
            with self._store.transaction():
                self._store.set_status(rec.id, Status.REBALANCING.value, rec.status)
                self._store.set_action(Action(rec.id, "rebalance", due, {
                    "num_workers": workers, "num_executors": dict(executors)}))
            job = self._launching.queue_call(rec.id, self._launcher.pause, rec.id)
            self._timers.arm(rec.id, due)
        log.info("topology_rebalancing", topology=rec.id, wait_secs=wait,
                 num_workers=workers, num_executors=dict(executors))
        self._launching.reply_after(rec.id, job)

