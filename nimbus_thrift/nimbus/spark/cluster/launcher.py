"""The cluster-mode launcher: each topology's driver runs on a worker of a standalone
master, submitted through the master's REST server (:mod:`.rest`) and supervised by
it, and nothing of the topology runs on the daemon's host.

Theory of operation. The work directory (in ``shared_dir``, which every worker sees
at the same path) is the only channel between the daemon and the driver, as in client
mode: the launcher writes ``spec.json``, ``code/``, ``code.zip``, ``control``, the
Spark settings and ``supervision.json`` (how many relaunches in a row, and their
waits); the driver writes ``status.json``, its logs and ``attempts.json`` (one record
per start: the master relaunches a supervised driver that fails or loses its worker,
with the same driver id, and the driver counts and spaces its own relaunches and
gives up after ``max_restarts`` by exiting 0). The launcher's own record,
``launch.json`` (:mod:`.records`), holds the driver id: a launch finds it and adopts
the driver the master still lists as SUBMITTED, RUNNING or RELAUNCHING, so that a
restarted daemon, or another nimbus that took over, never submits a second one. The
driver itself holds a claim (``driver.claim``) that a second copy would take from it,
and stops when it sees it gone: one driver at any time even when the master runs a
copy beside a partitioned one.

The state of a topology is read each time it is asked (:mod:`.status`): the master's
view of every driver comes from one read of its JSON every 2 s (:mod:`.masterview`),
not a REST request per topology. Stopping is ``control=stop`` (the driver ends its
batch, writes ``stopped`` and exits 0), then the REST kill after the grace; a
rebalance stops the driver the same way and submits a new one.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import structlog

from ....runner.attempts import (AttemptBook, Supervision, read_attempts,
                                 write_supervision)
from ....runner.spec import RunSpec
from ....topology.blobs import WORK_DIR_ENV
from ...config import NimbusConfig
from ...launcher import LauncherError, LaunchSpec, RunStatus, WorkerNode
from ...security.runas import as_owner_of
from ..install import find_spark_home, spark_version
from ..master import master_ui_url, worker_started
from ..preparation import prepare_work_dir
from ..properties import spark_defaults, write_properties
from ..recovery import (RESTART_BACKOFF_FACTOR, RESTART_BACKOFF_MAX_SECS,
                        RESTART_BACKOFF_SECS, RESTART_RESET_SECS)
from ..submit import (PACKAGE_ROOT, SPARK_MAIN, cluster_cores, environment, spark_confs,
                      user_confs)
from .masterview import MasterView, MasterWatch
from .needs import needs_of, shortfall
from ..runtable import RunTable
from .records import ClusterRun
from .rest import UNKNOWN, RestClient, RestError, create_request, rest_url
from .status import cluster_status, where

log = structlog.get_logger(__name__)

#: How often a stop or rebalance asks the master whether the driver is gone.
POLL_SECS = 0.5
#: After the REST kill, how long the master has to say the driver is gone.
KILL_WAIT_SECS = 20.0
#: How often the monitor retries adoptions the master could not answer.
MONITOR_SECS = 2.0
#: What the driver's settings must not pin to this host: the driver runs on a worker.
DAEMON_HOST_CONFS = ("spark.driver.host", "spark.driver.bindAddress")


class ClusterLauncher:
    """Runs each topology's driver on the cluster (see the module docstring).

    Args:
        config: the daemon configuration (``spark_master``, ``spark_master_rest``,
            ``spark_master_ui``, ``restart_failed``, ``max_restarts``,
            ``stop_grace_secs``, ``files_dir``).
        rest, watch: the REST client and the master's view (tests pass fakes).
        clock: wall-clock seconds.
    """

    name = "spark"
    #: The drivers are on the cluster: a nimbus losing its leadership leaves them to
    #: the next leader, which adopts them (the Launcher protocol's docstring).
    runs_elsewhere = True

    def __init__(self, config: NimbusConfig, *, rest: RestClient | None = None,
                 watch: MasterWatch | None = None, clock: Callable[[], float] = time.time,
                 poll_secs: float = POLL_SECS, kill_wait: float = KILL_WAIT_SECS,
                 monitor_secs: float = MONITOR_SECS):
        self.config = config
        self.clock = clock
        self.poll_secs = poll_secs
        self.kill_wait = kill_wait
        self.monitor_secs = monitor_secs
        self.spark_home = find_spark_home()
        self.version = spark_version(self.spark_home)
        master = config.spark_master.strip()
        self.master = master
        self.rest = rest if rest is not None else RestClient(
            rest_url(master, config.spark_master_rest))
        ui = master_ui_url(master, config.spark_master_ui)
        if watch is None:
            if ui is None:
                raise LauncherError(f"no web UI to read for the master {master!r}")
            watch = MasterWatch(ui)
        self.watch = watch
        self._runs: RunTable[ClusterRun] = RunTable(config.files_dir / "topologies",
                                                    self._read_record)
        #: Launches waiting for the master to say whether their driver still runs.
        self._undecided: dict[str, LaunchSpec] = {}
        self._closed = threading.Event()
        self._monitor: threading.Thread | None = None
        log.info("cluster_launcher_ready", master=master, rest=self.rest.url,
                 files_dir=str(config.files_dir), shared=config.shared_dir is not None)

    # --- the Launcher protocol ------------------------------------------------------
    def launch(self, spec: LaunchSpec) -> None:
        """Submit the topology's driver, or adopt it if the master still runs it.

        Raises:
            LauncherError: the work directory could not be made, the REST server
                refused the driver or cannot be reached.
        """
        run = self._run_at(spec.topology_id, spec.work_dir)
        with run.lock:
            self._follow(run)
            if run.driver_id:
                try:
                    status = self.rest.status(run.driver_id)
                except RestError as exc:
                    # Never a second driver on a guess: decided when the master answers.
                    self._undecided[spec.topology_id] = spec
                    self._ensure_monitor()
                    raise LauncherError(f"cannot tell whether driver {run.driver_id} of "
                                        f"{spec.topology_id} still runs, so none is "
                                        f"submitted until the master answers: {exc}"
                                        ) from None
                self._undecided.pop(spec.topology_id, None)
                if status.active:
                    run.dir.set_control("active" if spec.active else "paused")
                    log.info("cluster_driver_adopted", topology=spec.topology_id,
                             driver=run.driver_id, state=status.state,
                             worker=status.worker_host_port)
                    return
                last = run.status_file()
                if not run.pending_relaunch and (
                        run.stopped or (last is not None and
                                        last.state in ("stopped", "finished"))):
                    log.info("cluster_driver_not_relaunched", topology=spec.topology_id,
                             driver=run.driver_id, state=status.state)
                    return
            self._submit(run, spec, reason="relaunch" if run.driver_id else "launch")

    def stop(self, topology_id: str, grace: float) -> None:
        """``control=stop``, up to ``grace`` seconds for the driver to end, then the
        REST kill, until the master says it is gone.

        Raises:
            LauncherError: the master cannot be reached, or still lists the driver.
        """
        run = self._known(topology_id)
        if run is None:
            return
        self._undecided.pop(topology_id, None)
        with run.lock:
            run.stopped = True
            run.save()
            if run.dir.root.is_dir():
                run.dir.set_control("stop")
            self._follow(run)
            if run.driver_id:
                self._end_driver(run, grace)
        log.info("cluster_driver_stopped", topology=topology_id, driver=run.driver_id)
        self._runs.forget(topology_id)

    def pause(self, topology_id: str) -> None:
        self._control(topology_id, "paused")

    def resume(self, topology_id: str) -> None:
        """Resume the spouts; a driver gone failed (given up, killed elsewhere,
        forgotten by the master) is submitted again, with a fresh count of restarts."""
        run = self._control(topology_id, "active")
        with run.lock:
            self._follow(run)
            if not run.driver_id or run.stopped:
                return
            try:
                status = self.rest.status(run.driver_id)
            except RestError as exc:
                raise LauncherError(f"cannot tell whether driver {run.driver_id} runs: "
                                    f"{exc}") from None
            last = run.status_file()
            if status.active or (last is not None and last.state in ("stopped",
                                                                      "finished")):
                return
            self._resubmit(run, reason="resume")

    def rebalance(self, spec: LaunchSpec) -> None:
        """Stop the driver as :meth:`stop` does and submit a new one with the new
        parallelism, from the same checkpoint.

        Raises:
            LauncherError: as :meth:`launch` and :meth:`stop`.
        """
        run = self._run_at(spec.topology_id, spec.work_dir)
        with run.lock:
            run.pending_relaunch = True
            run.save()
            self._follow(run)
            if run.driver_id:
                run.dir.set_control("stop")
                self._end_driver(run, self.config.stop_grace_secs)
            self._submit(run, spec, reason="rebalance")

    def status(self, topology_id: str) -> RunStatus:
        """The topology's state (:mod:`.status`), from the master's view (read at most
        every 2 s for all topologies) and the files the driver writes."""
        run = self._known(topology_id)
        if run is None:
            return RunStatus(state="unscheduled",
                             detail="unscheduled: the cluster launcher has not "
                                    "submitted this topology")
        book = read_attempts(run.dir.attempts)
        if run.lock.acquire(blocking=False):     # else a stop or launch has it
            try:
                # Not written down: a follower in HA mode reads statuses too, and only
                # the leader writes the record (at its next launch, stop or rebalance).
                self._follow(run, save=False, book=book)
            finally:
                run.lock.release()
        view = self.watch.view()
        return cluster_status(run, view, self._driver_state(run, view), book,
                              self.config, self.clock)

    def nodes(self) -> list[WorkerNode]:
        """The master's alive workers, each with the topologies whose driver it runs."""
        view = self.watch.view()
        on: dict[str, list[str]] = {}
        for run in self._all_runs():
            worker_id, _ = where(run, view)
            if worker_id and not run.stopped:
                on.setdefault(worker_id, []).append(run.topology_id)
        now = self.clock()
        return [WorkerNode(node_id=w.worker_id, host=w.host,
                           started_at=worker_started(w.worker_id, now), slots=w.cores,
                           used_slots=w.cores - w.cores_free, version=self.version,
                           topologies=tuple(on.get(w.worker_id, ())))
                for w in view.alive_workers()]

    def memory_request(self, conf: Mapping[str, Any]) -> int:
        """Nothing of this host: the driver and executors run on the workers (their
        settings are checked, and admitted by :meth:`check_capacity`).

        Raises:
            ValueError: a memory or cores setting that is not one.
        """
        needs_of(cluster_cores(user_confs(conf), 1, 1) | user_confs(conf))
        return 0

    def check_capacity(self, conf: Mapping[str, Any], parallelism: int,
                       num_workers: int) -> None:
        """Refuse a topology whose driver and executors the alive workers cannot hold
        now (:mod:`.needs`).

        Raises:
            ValueError: one sentence naming what it needs and what is free.
        """
        user = user_confs(conf)
        needs = needs_of({**cluster_cores(user, parallelism, num_workers), **user})
        view = self.watch.view(fresh=True)
        if view.error:
            raise ValueError(f"cannot admit the topology: {view.error}")
        problem = shortfall(needs, view.alive_workers())
        if problem:
            raise ValueError(f"the cluster cannot run this topology now: {problem}")

    def close(self) -> None:
        """Stop the monitor. The drivers run on: a restarted daemon adopts them."""
        self._closed.set()
        monitor = self._monitor
        if monitor is not None and monitor is not threading.current_thread():
            monitor.join(10)

    # --- submitting and ending drivers -----------------------------------------------
    def _submit(self, run: ClusterRun, spec: LaunchSpec, reason: str) -> None:
        try:
            run_spec = prepare_work_dir(spec, run.dir, None)
        except LauncherError as exc:
            run.launch_error = str(exc)
            run.save()
            raise
        run.num_workers = spec.num_workers
        run.spouts = tuple(cid for cid, c in run_spec.components.items()
                           if c.kind == "spout")
        self._send(run, run_spec, reason)

    def _resubmit(self, run: ClusterRun, reason: str) -> None:
        try:
            run_spec = RunSpec.read(run.dir.spec)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            run.launch_error = f"cannot read {run.dir.spec}: {exc}"
            run.save()
            raise LauncherError(run.launch_error) from None
        self._send(run, run_spec, reason)

    def _send(self, run: ClusterRun, run_spec: RunSpec, reason: str) -> None:
        """Write the driver's settings and policy and submit it (a fresh count of
        attempts: the last driver's are over)."""
        rd = run.dir
        confs = self._confs(run_spec, rd.root, run.num_workers)
        needs = needs_of(confs)
        with as_owner_of(rd.root):
            properties = write_properties(rd.root, confs)
            write_supervision(rd.supervision, self._supervision())
            # A new Supervision is a new submission: a fresh count of attempts (the
            # master's relaunches keep it: runner/attempts.py); an old status would be
            # read as the new driver's.
            rd.status.unlink(missing_ok=True)
            rd.logs.mkdir(parents=True, exist_ok=True)
        request = create_request(
            master=self.master, app_name=f"topology-{run_spec.name}",
            submit_args=["--name", f"topology-{run_spec.name}",
                         "--properties-file", str(properties),
                         "--py-files", str(rd.root / "code.zip"), str(SPARK_MAIN),
                         "--workdir", str(rd.root), "--cluster"],
            driver_cores=needs.driver_cores,
            driver_memory=f"{needs.driver_memory_mb}m",
            supervise=self.config.restart_failed,
            environment=self._environment(rd.root, run_spec),
            spark_version=self.version)
        try:
            driver_id = self.rest.create(request)
        except RestError as exc:
            run.launch_error = str(exc)
            run.save()
            raise LauncherError(f"cannot submit the driver of {run.topology_id}: "
                                f"{exc}") from None
        run.driver_id = driver_id
        run.submitted_at = self.clock()
        run.submissions += 1
        run.stopped = False
        run.pending_relaunch = False
        run.launch_error = ""
        run.noted_attempt = 0
        run.save()
        log.info("cluster_driver_submitted", topology=run.topology_id, driver=driver_id,
                 reason=reason, cores=needs.driver_cores,
                 memory_mb=needs.driver_memory_mb)

    def _confs(self, run_spec: RunSpec, work_dir: Path, num_workers: int
               ) -> dict[str, str]:
        """The application's Spark settings as client mode's, without what pins the
        driver to this host (it binds to its worker's address)."""
        env = environment(work_dir, None)
        confs = spark_confs(self.master, run_spec, work_dir, 0, num_workers,
                            defaults=spark_defaults(env))
        user = user_confs(run_spec)
        for key in DAEMON_HOST_CONFS:
            if key not in user:
                confs.pop(key, None)
        return confs

    def _environment(self, work_dir: Path, run_spec: RunSpec) -> dict[str, str]:
        """What the driver's process gets beside the worker's own environment: the
        Python to run (the topology's ``spark.pyspark.python``, else this daemon's: a
        worker has nimbus-thrift installed at the same path), the code and package on
        its path, its work directory."""
        user = user_confs(run_spec)
        python = user.get("spark.pyspark.python") or sys.executable
        return {"PYSPARK_PYTHON": python,
                "PYSPARK_DRIVER_PYTHON": user.get("spark.pyspark.driver.python") or python,
                "PYTHONPATH": f"{work_dir / 'code'}:{PACKAGE_ROOT}",
                WORK_DIR_ENV: str(work_dir)}

    def _supervision(self) -> Supervision:
        return Supervision(restart_failed=self.config.restart_failed,
                           max_restarts=self.config.max_restarts,
                           backoff_secs=RESTART_BACKOFF_SECS,
                           backoff_factor=RESTART_BACKOFF_FACTOR,
                           backoff_max_secs=RESTART_BACKOFF_MAX_SECS,
                           reset_secs=RESTART_RESET_SECS)

    def _end_driver(self, run: ClusterRun, grace: float) -> None:
        """Wait up to ``grace`` for the driver to end by itself (``control=stop`` was
        written), then kill it through the REST server and wait for the master to say
        it is gone.

        Raises:
            LauncherError: the master cannot be reached, or still lists it active.
        """
        try:
            if self._wait_gone(run, grace):
                return
            log.info("cluster_driver_kill", topology=run.topology_id,
                     driver=run.driver_id, grace=grace)
            self.rest.kill(run.driver_id)
            if self._wait_gone(run, self.kill_wait):
                return
        except RestError as exc:
            raise LauncherError(f"cannot stop driver {run.driver_id} of "
                                f"{run.topology_id} through the master: {exc}; it was "
                                "asked to stop through its control file") from None
        raise LauncherError(f"the master still lists driver {run.driver_id} of "
                            f"{run.topology_id} as running {self.kill_wait:g} s after "
                            "the kill")

    def _wait_gone(self, run: ClusterRun, timeout: float) -> bool:
        """Wait up to ``timeout`` for the master to say ``run``'s driver is gone,
        following it when the master relaunches it under a new id (the relaunched
        one reads ``control`` as it starts, so a stop holds it too)."""
        deadline = time.monotonic() + timeout
        while True:
            self._follow(run)
            if not self.rest.status(run.driver_id).active:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(self.poll_secs)

    def _follow(self, run: ClusterRun, save: bool = True,
                book: AttemptBook | None = None) -> None:
        """Take as ``run``'s driver the one its attempts name when that is a later
        one: a supervising master relaunches a driver under a new id (SPARK-19900:
        the old one may still run beside a partition), which only the driver knows
        and writes in its attempts. Until it has, the old id says RELAUNCHING,
        which counts as running: no second driver is submitted meanwhile."""
        if not run.driver_id:
            return
        last = (book if book is not None else read_attempts(run.dir.attempts)).last()
        if last is None or not last.driver_id or last.driver_id <= run.driver_id:
            return
        log.info("cluster_driver_relaunched", topology=run.topology_id,
                 before=run.driver_id, driver=last.driver_id, attempt=last.attempt)
        run.driver_id = last.driver_id
        if save:
            run.save()

    def _driver_state(self, run: ClusterRun, view: MasterView) -> str:
        """The driver's state in the master's view; "" when the master cannot be read,
        and the REST server's word for a driver the view no longer lists."""
        if view.error:
            return ""
        driver = view.drivers.get(run.driver_id)
        if driver is not None:
            return driver.state
        try:
            return self.rest.status(run.driver_id).state
        except RestError:
            return UNKNOWN

    # --- the monitor: adoptions the master could not answer ---------------------------
    def _ensure_monitor(self) -> None:
        if self._monitor is not None or self._closed.is_set():
            return
        self._monitor = threading.Thread(target=self._monitor_loop, daemon=True,
                                         name="cluster-launcher-monitor")
        self._monitor.start()

    def _monitor_loop(self) -> None:
        while not self._closed.wait(self.monitor_secs):
            for topology_id, spec in list(self._undecided.items()):
                try:
                    self.launch(spec)
                except LauncherError as exc:
                    log.warning("cluster_adoption_waits", topology=topology_id,
                                error=str(exc))

    # --- the table of runs ------------------------------------------------------------
    def _run_at(self, topology_id: str, work_dir: Path) -> ClusterRun:
        run = self._record(topology_id, Path(work_dir))
        assert run is not None
        return run

    def _known(self, topology_id: str) -> ClusterRun | None:
        return self._record(topology_id, None)

    def _record(self, topology_id: str, work_dir: Path | None) -> ClusterRun | None:
        return self._runs.record(topology_id, work_dir)

    def _read_record(self, topology_id: str, root: Path, launching: bool
                     ) -> ClusterRun | None:
        if not launching and not (root / "launch.json").exists():
            return None
        run, client_pid = ClusterRun.read(topology_id, root)
        if client_pid:
            raise LauncherError(
                f"topology {topology_id} runs in client mode here (pid "
                f"{client_pid}), started before deploy_mode became cluster: "
                "rebalance or kill it, or stop the daemon and that process first")
        return run

    def _all_runs(self) -> list[ClusterRun]:
        return self._runs.all()

    def _control(self, topology_id: str, state: str) -> ClusterRun:
        run = self._known(topology_id)
        if run is None:
            raise LauncherError(f"topology {topology_id} was never launched here")
        run.dir.set_control(state)
        return run
