"""The ``spark`` launcher: one topology is one Spark application, started with
spark-submit as a child of the daemon in a session of its own.

This is the only daemon-side module that knows about Spark, and it never imports
PySpark: it finds PySpark's directory with :func:`importlib.util.find_spec` and runs
its ``bin/spark-submit``. Processes of one topology::

    nimbus daemon
      └─ spark-submit, which execs the JVM   pid P = process group P = session P
           └─ python runner/spark_main.py    the driver: writes status.json, reads control
                └─ pyspark.daemon            its own process group, still session P
                     └─ python workers

The daemon and the driver talk only through the work directory
(:mod:`nimbus_thrift.runner.rundir`): the launcher writes ``spec.json``, ``code/``,
``code.zip`` and ``control``; the driver writes ``status.json``; the daemon writes
``settings.json`` (log levels, tuple sampling: :mod:`..service.logs`), which the driver
and the Python workers follow by themselves; ``launch.json`` is the launcher's own
record (pid and its start time, UI port, command, restarts), so that a restarted
daemon adopts the processes it finds alive instead of starting them twice.

Theory of operation. The launcher does not keep a state machine of its own: the state
of a topology is read, each time it is asked, from two facts, whether the JVM is alive
(its pid with the start time recorded at launch, so a reused pid is not mistaken for
it) and the last ``status.json`` (the table of states and details is in :mod:`.status`).

The detail always starts with the state word and a colon: ``submit --wait`` reads it.

Start-up: the driver JVM maps a class data sharing archive of Spark's classes, made
after the first launch on this Java and Spark installation
(:class:`.archive.ClassArchive`), and the application's SPARK_HOME is a mirror of
PySpark's without its zipped Python code (:func:`.install.mirror_spark_home`), so that
its Python processes import PySpark's compiled modules. Both live in a cache directory
of the user (:func:`.install.default_cache_dir`).

Standby drivers (:mod:`.standby`, :mod:`.standby_app`): with ``standbys`` (the
daemon's launcher; ``standby_drivers`` of the configuration), the launcher keeps idle
applications warmed up, and the first launch of a topology whose Spark settings
match theirs takes one instead of starting spark-submit: from then on it is that
topology's application, stopped, adopted and relaunched as any other (a relaunch
starts cold). Its ``launch.json`` says ``warm``, and so does its detail.

HA mode (:func:`.submit.fenced`): each driver takes the fence of
:mod:`nimbus_thrift.runner.claim` (``--fence``), so that when a new leader starts a
topology whose old driver still runs on the old leader's host (its daemon killed, the
host alive), that one stops once the new one holds ``driver.claim``. A ``launch.json``
another host wrote is :attr:`.records.Run.foreign`: no pid of it is looked at or
signalled here, its status comes from ``status.json`` alone (alive while written in
the last :data:`FRESH_STATUS_SECS`), and launching it starts this host's driver
("takeover"). Only runs this launcher launched (``managed``) are watched and
relaunched by its monitor; a follower only reads records, again whenever they change.
No standby drivers in HA mode (:data:`.standby_drivers.NO_STANDBYS_IN_HA`).

A failed topology is relaunched from its checkpoint by a monitor thread when the
configuration says so (``restart_failed``, at most ``max_restarts`` times in a row,
with growing waits); stopping is ``control=stop``, then SIGTERM, then SIGKILL to every
process of the session, until none is left.

The modules beside this one each own one part of it: :mod:`.processes` (``/proc``
and signals), :mod:`.install` (Spark, Java and the cache), :mod:`.app_home` (the
applications' SPARK_HOME), :mod:`.archive` (the class archive) and
:mod:`.archive_choice` (which one a launch maps), :mod:`.records` (``launch.json``),
:mod:`.status` (the detail sentences), :mod:`.submit` (the command line and
environment), :mod:`.spawn` (starting a process), :mod:`.standby_drivers` (taking
and starting standbys), :mod:`.recovery` (deaths and relaunches),
:mod:`.termination` (stopping a session), :mod:`.master` (where a master runs
applications). This one holds the table of runs and the Launcher calls.
"""

from __future__ import annotations

import os
import shlex
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import structlog

from ...runner.spec import RunSpec
from ..config import NimbusConfig
from ..launcher import LauncherError, LaunchSpec, RunStatus, WorkerNode
from ..security.runas import ROOT_UID, OsUser, RunAsRefused, os_user_of, unreachable_parts
from .app_home import AppSparkHome
from .archive import ClassArchive
from .archive_choice import ArchiveChoice
from .cluster.status import FRESH_STATUS_SECS
from .install import (CLASS_ARCHIVE_DIR, MIRROR_DIR, default_submit, find_spark_home,
                      java_binary, resolve_cache_dir, spark_version, tidy_mirrors)
from .master import cluster_nodes, local_node, local_threads, master_ui_url
from .memory import memory_request
from .records import FINAL_STATES, Run
from .runtable import RunTable
from .recovery import RESTART_BACKOFF_SECS, Recovery
from .spawn import Spawner, memory_of
from .submit import PACKAGE_ROOT
from .standby import REPLACE_DELAY_SECS, StandbyPool
from .standby_app import STANDBY_DIR, StandbyApp, tidy_standbys
from .standby_drivers import NO_STANDBYS_IN_HA, StandbyDrivers, standby_count
from .status import elsewhere_status, failure_text, run_status
from .submit import fenced
from .preparation import prepare_work_dir
from .termination import TERM_GRACE_SECS, terminate

log = structlog.get_logger(__name__)

#: Under run_as_user, the launch records (:class:`.records.Run`), in the data directory.
RECORDS_DIR = "launches"

#: How often the monitor thread looks for dead applications to relaunch.
MONITOR_SECS = 2.0
#: A cluster's workers are read again after this long (getClusterInfo may be frequent).
NODES_CACHE_SECS = 5.0


class SparkLauncher:
    """Runs each topology as a Spark application (see the module docstring).

    Args:
        config: the daemon configuration (``spark_master``, ``spark_submit``,
            ``spark_master_ui``, ``restart_failed``, ``max_restarts``,
            ``stop_grace_secs``, ``data_dir``); defaults when None.
        clock: wall-clock seconds, for restart waits and reported times.
        term_grace, monitor_secs, restart_backoff: see :data:`.termination.TERM_GRACE_SECS`,
            :data:`MONITOR_SECS`, :data:`.recovery.RESTART_BACKOFF_SECS` (tests
            shorten them).
        standbys: keep the configuration's ``standby_drivers`` standby drivers (the
            daemon's launcher does; a launcher made for one job does not), after
            stopping those an earlier daemon left.
        standby_replace_delay: see :data:`.standby.REPLACE_DELAY_SECS`.
        cache_dir: where the mirror of Spark home (:class:`.app_home.AppSparkHome`) and
            the driver JVM's class archives (:class:`ClassArchive`) are kept: a
            directory, False for neither, or True (the default) for the configuration's
            ``spark_cache_dir``, whose empty default is
            :func:`.install.default_cache_dir` when spark-submit is PySpark's own (a
            configured one may run another installation) and none otherwise.

    Raises:
        LauncherError: no spark-submit to run (PySpark or Java missing).
    """

    name = "spark"

    def __init__(self, config: NimbusConfig | None = None, *,
                 clock: Callable[[], float] = time.time,
                 term_grace: float = TERM_GRACE_SECS, monitor_secs: float = MONITOR_SECS,
                 restart_backoff: float = RESTART_BACKOFF_SECS,
                 cache_dir: bool | Path = True, standbys: bool = False,
                 standby_replace_delay: float = REPLACE_DELAY_SECS):
        self.config = config if config is not None else NimbusConfig()
        self.clock = clock
        self.term_grace = term_grace
        self.monitor_secs = monitor_secs
        self.started_at = clock()
        self.spark_home = find_spark_home()
        self.version = spark_version(self.spark_home)
        if self.config.spark_submit:
            self.submit = shlex.split(self.config.spark_submit)
            if not self.submit:
                raise LauncherError("spark_submit is blank")
        else:
            self.submit = [str(default_submit(self.spark_home))]
        self.cache_dir = resolve_cache_dir(self.config, cache_dir)
        if self.spark_home is None:
            self.cache_dir = None
        if self.config.run_as_user:
            self._check_run_as()
        #: The SPARK_HOME of applications: the mirror, made at the first launch.
        self.app_home = AppSparkHome(self.spark_home, self.cache_dir)
        class_archive: ClassArchive | None = None
        java = java_binary()
        if self.cache_dir is not None and self.spark_home is not None and java is not None:
            class_archive = ClassArchive(self.cache_dir / CLASS_ARCHIVE_DIR,
                                         self.spark_home, java)
            # What other installations left: ~200 MB per archive of a deleted venv.
            class_archive.tidy()
            tidy_mirrors(self.cache_dir / MIRROR_DIR)
        self._runs: RunTable[Run] = RunTable(self.config.files_dir / "topologies",
                                             self._read_record)
        self._closed = threading.Event()
        self._monitor: threading.Thread | None = None
        self._nodes_cache: tuple[float, list[WorkerNode]] | None = None
        # The jobs beside the table of runs, each in its module (the module docstring).
        self.archives = ArchiveChoice(class_archive, self.app_home.path, self._all_runs,
                                      record=not self.config.run_as_user)
        self.spawner = Spawner(self.config, self.submit, self.app_home, self.archives,
                               clock)
        self.recovery = Recovery(self.config, clock, self.spawner, self.archives,
                                 restart_backoff)
        self.standbys: StandbyPool[StandbyApp] | None = None
        self._standby_drivers: StandbyDrivers | None = None
        # Under run_as_user a standby is one user's process, kept for the user who
        # launched last and taken only by that user's topologies (standby_drivers.py).
        if standbys:
            tidy_standbys(self.config.data_dir / STANDBY_DIR)
            wanted = standby_count(self.config)
            if fenced(self.config) and self.config.standby_drivers:
                log.info("spark_standbys_off", reason=NO_STANDBYS_IN_HA)
            if wanted:
                self._standby_drivers = StandbyDrivers(
                    self.config, clock, self.spawner, self.archives, self._all_runs,
                    wanted=wanted, backoff=restart_backoff,
                    replace_delay=standby_replace_delay)
                self.standbys = self._standby_drivers.pool
                self.standbys.check()       # now: the first submit may come at once
                self._ensure_monitor()

    def _check_run_as(self) -> None:
        """What run_as_user needs of the daemon: root (to start processes as other
        users and act as them on their files), and every file a topology's processes
        run reachable by other users: this Python, the package, Spark and the cache
        (its SPARK_HOME mirror and class archive), and the topologies' directory.

        Raises:
            LauncherError: saying what is missing, and how to mend it.
        """
        if os.geteuid() != ROOT_UID:
            raise LauncherError("run_as_user needs a daemon running as root (it starts "
                                "each topology as its owner's OS user); the daemon runs "
                                f"as uid {os.geteuid()}")
        needed = [(Path(sys.executable), "the Python topologies run with"),
                  (PACKAGE_ROOT / "nimbus_thrift", "the nimbus_thrift package"),
                  (self.config.files_dir, "the directory of the topologies' work "
                                          "directories (data_dir, or shared_dir)")]
        if self.spark_home is not None:
            needed.append((self.spark_home, "Spark (PySpark's directory)"))
        if self.cache_dir is not None:
            needed.append((self.cache_dir, "spark_cache_dir (the applications' "
                                           "SPARK_HOME and class archive)"))
        for path, what in needed:
            problems = unreachable_parts(path, read=path != self.config.files_dir)
            if problems:
                raise LauncherError(
                    f"run_as_user: other OS users cannot reach {what} at {path}: "
                    f"{'; '.join(problems)}. Topologies run as their owners' users and "
                    "need it: install it (and set data_dir, spark_cache_dir) where every "
                    "user may enter and read, e.g. /opt and /var/lib/nimbus-thrift")

    @property
    def class_archive(self) -> ClassArchive | None:
        """The driver JVM's class archives (:class:`ClassArchive`); None without a
        cache directory or Java."""
        return self.archives.archive

    @class_archive.setter
    def class_archive(self, archive: ClassArchive | None) -> None:
        # Tests put in archives of a fake Java.
        self.archives.archive = archive

    # --- the Launcher protocol ------------------------------------------------------
    def launch(self, spec: LaunchSpec) -> None:
        """Start the topology's application, or adopt it if it still runs.

        Returns without waiting for Spark to start (that takes 10-60 s).

        Raises:
            LauncherError: the plan, code or process could not be set up.
        """
        run = self._run_at(spec.topology_id, spec.work_dir)
        with run.lock:
            if run.alive():                     # never a foreign record's
                run.set_control("active" if spec.active else "paused")
                log.info("spark_app_adopted", topology=spec.topology_id, pid=run.pid)
                self._ensure_monitor()
                return
            last = run.dir.read_status() if run.pid else None
            ended = run.stopped or (last is not None and last.state in FINAL_STATES)
            # In HA mode a stopped record is a former leader's step-down (a kill's
            # stop is followed by the topology's removal): this leader runs it again.
            # A bounded run that finished stays finished.
            takeover = bool(run.pid) and (run.foreign or (ended and fenced(self.config)))
            if run.pid and not run.pending_relaunch and ended and (
                    not takeover or (last is not None and last.state == "finished")):
                log.info("spark_app_not_relaunched", topology=spec.topology_id,
                         state=last.state if last else "stopped")
                return
            failure = ""
            now = self.clock()
            fresh = last is not None and now - last.updated_at < FRESH_STATUS_SECS
            if takeover:
                # A driver still writing on another host stops once the new one
                # takes driver.claim; its pid is never signalled from here.
                log.info("spark_app_taken_over", topology=spec.topology_id,
                         host=run.host, pid=run.pid, state=last.state if last else None,
                         status_age=round(now - last.updated_at, 1) if last else None)
                if run.foreign and not ended and not run.pending_relaunch and (
                        not fresh or (last is not None and last.state == "failed")):
                    failure = failure_text(run, last, now)
            elif run.pid and not run.pending_relaunch:
                failure = failure_text(run, last)     # before the files are reset
            self._start(run, spec, reason="takeover" if takeover else
                        "relaunch" if run.pid else "launch")
            if failure:
                run.last_failure = failure
                run.save()
        self._ensure_monitor()

    def stop(self, topology_id: str, grace: float) -> None:
        """Stop the application: ``control=stop``, up to ``grace`` seconds to exit, then
        SIGTERM and SIGKILL to every process of its session. Works for adopted ones.

        Raises:
            LauncherError: processes survived SIGKILL.
        """
        run = self._known(topology_id)
        if run is None:
            return
        with run.lock:
            run.stopped = True
            run.next_restart_at = None
            if run.launched_elsewhere():
                # A new leader launched it since this daemon did (HA mode: a step-down
                # that came late): control, status.json and launch.json are its
                # driver's now. Only this host's process of the old launch goes.
                log.info("spark_app_launched_elsewhere", topology=topology_id,
                         pid=run.pid, action="this host's process stopped only")
                terminate(run, 0.0, self.term_grace, lambda _run: None)
            else:
                if run.dir.root.is_dir():
                    run.set_control("stop")
                terminate(run, grace, self.term_grace, self.recovery.note_death)
                if not run.launched_elsewhere():    # ... while it waited
                    run.save()
        log.info("spark_app_stopped", topology=topology_id, pid=run.pid)
        self._runs.forget(topology_id)

    def pause(self, topology_id: str) -> None:
        self._control(topology_id, "paused")

    def resume(self, topology_id: str) -> None:
        """Resume the spouts; an application left failed (restarts used up) is started
        again from its checkpoint, with a fresh count of restarts."""
        run = self._control(topology_id, "active")
        with run.lock:
            if run.pid and not run.alive() and not run.stopped:
                last = run.status_file()
                if last is None or last.state not in FINAL_STATES:
                    with run.fields_lock:
                        run.last_failure = failure_text(run, last)
                        run.restarts = 0
                        self.recovery.respawn(run, reason="resume")

    def rebalance(self, spec: LaunchSpec) -> None:
        """Stop the application gracefully, rewrite its spec with the new parallelism
        and start it again from the same checkpoint.

        Raises:
            LauncherError: as :meth:`launch` and :meth:`stop`.
        """
        run = self._run_at(spec.topology_id, spec.work_dir)
        with run.lock:
            run.pending_relaunch = True
            run.next_restart_at = None
            run.save()
            run.set_control("stop")
            terminate(run, self.config.stop_grace_secs, self.term_grace,
                      self.recovery.note_death)
            run.restarts = 0
            run.last_failure = ""
            self._start(run, spec, reason="rebalance")
        self._ensure_monitor()

    def status(self, topology_id: str) -> RunStatus:
        """The topology's state, read from ``status.json`` (cached by its mtime) and
        whether the JVM lives. Cheap: no locks held by stop or rebalance are taken."""
        run = self._known(topology_id)
        if run is None:
            return RunStatus(state="unscheduled",
                             detail="unscheduled: the spark launcher has not launched "
                                    "this topology")
        with run.fields_lock:
            if not run.managed:
                run.refresh()           # a follower: the leader may have relaunched it
            return self._status(run)

    def _status(self, run: Run) -> RunStatus:
        if not run.pid:
            if run.launch_error:
                return RunStatus(state="failed", errors=tuple(run.errors),
                                 detail=f"failed: could not launch: {run.launch_error}")
            return RunStatus(state="unscheduled",
                             detail="unscheduled: the application has not been started")
        last = run.status_file()
        if run.foreign:
            return elsewhere_status(run, last, self.config, self.clock, FRESH_STATUS_SECS)
        alive = run.alive()
        if not alive and run.managed:
            # A follower's record is the leader's to write.
            self.recovery.note_death(run)
        return run_status(run, alive, last, self.config, self.clock)

    def memory_request(self, conf: Mapping[str, Any]) -> int:
        """The driver's heap and its process overhead (:mod:`.memory`)."""
        return memory_request(conf)

    def command(self, run_spec: RunSpec, work_dir: Path, ui_port: int,
                num_workers: int, *, archive: Sequence[str] = ()) -> list[str]:
        """The spark-submit command line of one topology
        (:meth:`.spawn.Spawner.command`)."""
        return self.spawner.command(run_spec, work_dir, ui_port, num_workers,
                                    archive=archive)

    def environment(self, work_dir: Path) -> dict[str, str]:
        """The application's environment (:meth:`.spawn.Spawner.environment`)."""
        return self.spawner.environment(work_dir)

    def class_archive_for(self, conf: Mapping[str, Any]) -> Path | None:
        """The class archive (made or yet to be made) a topology with configuration
        ``conf`` would map, or None when it would get none
        (:meth:`.archive_choice.ArchiveChoice.archive_for`)."""
        return self.archives.archive_for(conf)

    def nodes(self) -> list[WorkerNode]:
        """Where topologies run: this machine for a local master, the alive workers of
        a standalone master (read from its web UI's JSON, cached), else nothing."""
        master = self.config.spark_master
        threads = local_threads(master)
        if threads is not None:
            runs = self._all_runs()
            alive = [run for run in runs
                     if run.managed and run.pid and not run.stopped and run.alive()]
            return [local_node(threads, [run.cores for run in alive], self.started_at,
                               self.version, tuple(run.topology_id for run in alive))]
        url = master_ui_url(master, self.config.spark_master_ui)
        if url is None:
            return []
        now = time.monotonic()
        if self._nodes_cache is not None and now - self._nodes_cache[0] < NODES_CACHE_SECS:
            return list(self._nodes_cache[1])
        nodes = cluster_nodes(url, self.version, self.clock)
        self._nodes_cache = (now, nodes)
        return list(nodes)

    def close(self) -> None:
        """Stop the monitor thread. Applications keep running: a restarted daemon adopts
        them."""
        self._closed.set()
        monitor = self._monitor
        if monitor is not None and monitor is not threading.current_thread():
            monitor.join(10)
        if self.standbys is not None:
            # Idle standbys hold ~1.7 GB and nothing of value: a stopped daemon leaves
            # none (a restarted one starts its own).
            self.standbys.close()
        if self.class_archive is not None:
            self.class_archive.close()

    # --- monitoring -----------------------------------------------------------------
    def check(self) -> None:
        """One pass of the monitor: notice dead applications and relaunch failed ones
        when it is time (the monitor thread calls this every ``monitor_secs``)."""
        if self.class_archive is not None:
            self.class_archive.poll()
        if self.standbys is not None:
            try:
                self.standbys.check()
            except Exception as exc:  # noqa: BLE001 - the monitor must keep going
                log.error("spark_standby_check_failed", error=str(exc), exc_info=exc)
        runs = self._all_runs()
        for run in runs:
            if not run.managed:
                continue            # a follower's view of the leader's run
            if not run.lock.acquire(blocking=False):
                continue            # being stopped, rebalanced or launched right now
            try:
                self.recovery.check_run(run)
            except Exception as exc:  # noqa: BLE001 - the monitor must keep going
                log.error("spark_monitor_failed", topology=run.topology_id,
                          error=str(exc), exc_info=exc)
            finally:
                run.lock.release()

    def _ensure_monitor(self) -> None:
        if self._monitor is not None or self._closed.is_set():
            return
        self._monitor = threading.Thread(target=self._monitor_loop, daemon=True,
                                         name="spark-launcher-monitor")
        self._monitor.start()

    def _monitor_loop(self) -> None:
        while not self._closed.wait(self.monitor_secs):
            self.check()

    # --- the table of runs ----------------------------------------------------------
    def _run_at(self, topology_id: str, work_dir: Path) -> Run:
        """The record of a topology whose work directory is ``work_dir``."""
        run = self._record(topology_id, Path(work_dir))
        assert run is not None
        with run.fields_lock:
            if not run.managed:
                run.refresh()
                run.managed = True
        return run

    def _known(self, topology_id: str) -> Run | None:
        """The record of a topology launched by this launcher or, after a daemon
        restart, by an earlier one (its ``launch.json`` in the daemon's
        ``topologies/<id>``); None if there is none."""
        return self._record(topology_id, None)

    def _record(self, topology_id: str, work_dir: Path | None) -> Run | None:
        return self._runs.record(topology_id, work_dir)

    def _read_record(self, topology_id: str, root: Path, launching: bool) -> Run | None:
        """The record in ``root`` (or, under run_as_user, the daemon's own file), for
        the table; None when there is none to look at."""
        record = self._record_file(topology_id)
        if not launching and not (record or root / "launch.json").exists():
            return None
        if not launching and record is not None and not root.is_dir():
            record.unlink(missing_ok=True)      # its topology is gone
            return None
        return Run.read(topology_id, root, record)

    def _record_file(self, topology_id: str) -> Path | None:
        """Where a topology's launch record is kept: under run_as_user, in the
        daemon's own ``launches/`` (:attr:`.records.Run.record_file` says why)."""
        if not self.config.run_as_user:
            return None
        return self.config.data_dir / RECORDS_DIR / f"{topology_id}.json"

    def _all_runs(self) -> list[Run]:
        """The runs now (the helpers' view of the table)."""
        return self._runs.all()

    def _start(self, run: Run, spec: LaunchSpec, reason: str) -> None:
        """Write the work directory for ``spec`` and start the application."""
        try:
            user = self._os_user(spec)
            run_spec = prepare_work_dir(spec, run.dir, user)
        except LauncherError as exc:
            run.launch_error = str(exc)
            raise
        run.num_workers = spec.num_workers
        drivers = self._standby_drivers
        if reason == "launch" and drivers is not None and drivers.take(run, run_spec):
            drivers.keep_for(user)
            return
        # Counted from now on, so that no standby starts in the room it needs.
        run.memory = memory_of(run_spec.conf)
        if drivers is not None:
            drivers.keep_for(user)
            drivers.make_room()
        self.spawner.spawn(run, run_spec, reason)

    def _os_user(self, spec: LaunchSpec) -> OsUser | None:
        """The OS user ``spec``'s topology runs as: None (the daemon's) unless
        run_as_user, when it is the account the handler named (checked again: it may
        have been removed, or the daemon started as another user, since the submit).

        Raises:
            LauncherError: run_as_user, and no account to run as.
        """
        if not self.config.run_as_user:
            return None
        try:
            # The name the handler mapped, checked again by the same rules.
            return os_user_of(spec.run_as, {})
        except RunAsRefused as exc:
            raise LauncherError(f"cannot run topology {spec.topology_id} as its owner's "
                                f"OS user: {exc}") from None

    def _control(self, topology_id: str, state: str) -> Run:
        run = self._known(topology_id)
        if run is None:
            raise LauncherError(f"topology {topology_id} was never launched here")
        run.set_control(state)
        return run
