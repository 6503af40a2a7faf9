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
``settings.json`` (log levels, tuple sampling: :mod:`..log_calls`), which the driver
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

A failed topology is relaunched from its checkpoint by a monitor thread when the
configuration says so (``restart_failed``, at most ``max_restarts`` times in a row,
with growing waits); stopping is ``control=stop``, then SIGTERM, then SIGKILL to every
process of the session, until none is left.

The modules beside this one each own one part of it: :mod:`.processes` (``/proc``
and signals), :mod:`.install` (Spark, Java and the cache), :mod:`.archive` (the class
archive), :mod:`.records` (``launch.json``), :mod:`.status` (the detail sentences),
:mod:`.submit` (the command line and environment), :mod:`.master` (where a master runs
applications).
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import structlog

from ...runner.rundir import RunDir
from ...runner.spec import RunSpec, from_plan
from ...topology.validate import InvalidTopology
from ..admission import default_budget
from ..config import NimbusConfig
from ..launcher import LauncherError, LaunchSpec, RunStatus, WorkerNode
from .archive import JVM_CRASH, ClassArchive, archive_layout, unlink
from .install import (CLASS_ARCHIVE_DIR, MIRROR_DIR, default_submit, find_spark_home,
                      java_binary, mirror_spark_home, resolve_cache_dir, spark_version,
                      tidy_mirrors)
from .master import cluster_nodes, local_node, local_threads, master_ui_url
from .memory import memory_request
from .processes import exit_text, proc_cmdline, proc_info, session_members, signal_session
from .records import FINAL_STATES, Run
from .standby import REPLACE_DELAY_SECS, StandbyPool
from .standby_app import (MAX_WARM_TASKS, STANDBY_DIR, StandbyApp, tidy_standbys,
                          warmup_spec)
from .status import (BANNER, MAX_ERRORS, SPARK_COMPONENT, failure_text, launch_stderr,
                     run_status)
from .submit import (SPARK_MAIN, environment, extract_code, free_port, log_file,
                     standby_key, submit_command, user_confs)

log = structlog.get_logger(__name__)

#: After SIGTERM to the session, this long before SIGKILL. The JVM exits within a
#: second of SIGTERM (measured 0.97 s); the rest is margin for a loaded machine.
TERM_GRACE_SECS = 5.0
#: After SIGKILL the processes are gone within a fraction of a second (0.12 s).
KILL_WAIT_SECS = 5.0
#: How often the monitor thread looks for dead applications to relaunch.
MONITOR_SECS = 2.0
#: The first relaunch waits this long after the failure; each next one 4 times longer.
RESTART_BACKOFF_SECS = 5.0
#: ... but never longer than this.
RESTART_BACKOFF_MAX_SECS = 300.0
#: An application relaunched after a failure that then runs this long has recovered:
#: its next failure starts the count of restarts again.
RESTART_RESET_SECS = 600.0
#: A cluster's workers are read again after this long (getClusterInfo may be frequent).
NODES_CACHE_SECS = 5.0


def standby_count(config: NimbusConfig) -> int:
    """Standby drivers to keep: ``standby_drivers``, whose default (-1) is 1 on a local
    master with PySpark's own spark-submit (a configured one may not run our driver)
    and 0 otherwise (on a cluster a standby would hold cores)."""
    if config.standby_drivers >= 0:
        return config.standby_drivers
    return 1 if local_threads(config.spark_master) is not None and \
        not config.spark_submit else 0


def _memory_of(conf: Mapping[str, Any]) -> int:
    try:
        return memory_request(conf)
    except ValueError:              # refused at submit; an old record's: takes none
        return 0


class SparkLauncher:
    """Runs each topology as a Spark application (see the module docstring).

    Args:
        config: the daemon configuration (``spark_master``, ``spark_submit``,
            ``spark_master_ui``, ``restart_failed``, ``max_restarts``,
            ``stop_grace_secs``, ``data_dir``); defaults when None.
        clock: wall-clock seconds, for restart waits and reported times.
        term_grace, monitor_secs, restart_backoff: see the module constants (tests
            shorten them).
        standbys: keep the configuration's ``standby_drivers`` standby drivers (the
            daemon's launcher does; a launcher made for one job does not), after
            stopping those an earlier daemon left.
        standby_replace_delay: see :data:`.standby.REPLACE_DELAY_SECS`.
        cache_dir: where the mirror of Spark home (:func:`mirror_spark_home`) and
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
        self.restart_backoff = restart_backoff
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
        #: The SPARK_HOME of applications: the mirror, once made.
        self.app_spark_home: Path | None = None
        self._mirror_lock = threading.Lock()
        self.class_archive: ClassArchive | None = None
        java = java_binary()
        if self.cache_dir is not None and self.spark_home is not None and java is not None:
            self.class_archive = ClassArchive(self.cache_dir / CLASS_ARCHIVE_DIR,
                                              self.spark_home, java)
            # What other installations left: ~200 MB per archive of a deleted venv.
            self.class_archive.tidy()
            tidy_mirrors(self.cache_dir / MIRROR_DIR)
        self._runs: dict[str, Run] = {}
        self._runs_lock = threading.Lock()
        self._closed = threading.Event()
        self._monitor: threading.Thread | None = None
        self._nodes_cache: tuple[float, list[WorkerNode]] | None = None
        self._budget = self.config.spark_memory_budget or default_budget()
        self._standby_seq = 0
        self.standbys: StandbyPool[StandbyApp] | None = None
        if standbys:
            tidy_standbys(self.config.data_dir / STANDBY_DIR)
            wanted = standby_count(self.config)
            if wanted:
                self.standbys = StandbyPool(
                    wanted, standby_key(self.config.spark_master, self._standby_spec("-"), 1),
                    self._spawn_standby, room=self._standby_room, clock=time.monotonic,
                    backoff=restart_backoff, replace_delay=standby_replace_delay)
                self.standbys.check()       # now: the first submit may come at once
                self._ensure_monitor()

    # --- the Launcher protocol ------------------------------------------------------
    def launch(self, spec: LaunchSpec) -> None:
        """Start the topology's application, or adopt it if it still runs.

        Returns without waiting for Spark to start (that takes 10-60 s).

        Raises:
            LauncherError: the plan, code or process could not be set up.
        """
        run = self._run_at(spec.topology_id, spec.work_dir)
        with run.lock:
            if run.alive():
                run.dir.set_control("active" if spec.active else "paused")
                log.info("spark_app_adopted", topology=spec.topology_id, pid=run.pid)
                self._ensure_monitor()
                return
            last = run.dir.read_status() if run.pid else None
            if run.pid and not run.pending_relaunch and (
                    run.stopped or (last is not None and last.state in FINAL_STATES)):
                log.info("spark_app_not_relaunched", topology=spec.topology_id,
                         state=last.state if last else "stopped")
                return
            failure = ""
            if run.pid and not run.pending_relaunch:
                failure = failure_text(run, last)     # before the files are reset
            self._start(run, spec, reason="relaunch" if run.pid else "launch")
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
            if run.dir.root.is_dir():
                run.dir.set_control("stop")
            self._terminate(run, grace)
            run.save()
        log.info("spark_app_stopped", topology=topology_id, pid=run.pid)
        with self._runs_lock:
            self._runs.pop(topology_id, None)

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
                        self._respawn(run, reason="resume")

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
            run.dir.set_control("stop")
            self._terminate(run, self.config.stop_grace_secs)
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
            return self._status(run)

    def _status(self, run: Run) -> RunStatus:
        if not run.pid:
            if run.launch_error:
                return RunStatus(state="failed", errors=tuple(run.errors),
                                 detail=f"failed: could not launch: {run.launch_error}")
            return RunStatus(state="unscheduled",
                             detail="unscheduled: the application has not been started")
        alive = run.alive()
        last = run.status_file()
        if not alive:
            self._note_death(run)
        return run_status(run, alive, last, self.config, self.clock)

    def memory_request(self, conf: Mapping[str, Any]) -> int:
        """The driver's heap and its process overhead (:mod:`.memory`)."""
        return memory_request(conf)

    def nodes(self) -> list[WorkerNode]:
        """Where topologies run: this machine for a local master, the alive workers of
        a standalone master (read from its web UI's JSON, cached), else nothing."""
        master = self.config.spark_master
        threads = local_threads(master)
        if threads is not None:
            with self._runs_lock:
                runs = list(self._runs.values())
            alive = [run for run in runs if run.pid and not run.stopped and run.alive()]
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
        with self._runs_lock:
            runs = list(self._runs.values())
        for run in runs:
            if not run.lock.acquire(blocking=False):
                continue            # being stopped, rebalanced or launched right now
            try:
                self._check_run(run)
            except Exception as exc:  # noqa: BLE001 - the monitor must keep going
                log.error("spark_monitor_failed", topology=run.topology_id,
                          error=str(exc), exc_info=exc)
            finally:
                run.lock.release()

    def _check_run(self, run: Run) -> None:
        if not run.pid or run.stopped or run.pending_relaunch:
            return
        now = self.clock()
        if run.alive():
            self._dump_class_archive(run)
            if run.restarts and now - run.launched_at > RESTART_RESET_SECS:
                last = run.status_file()
                if last is not None and last.state == "running":
                    run.restarts = 0
                    run.save()
            return
        self._note_death(run)
        last = run.status_file()
        if not run.restartable(last, self.config):
            return
        if run.next_restart_at is None:
            run.next_restart_at = (run.died_at or now) + self._backoff(run.restarts)
        if now >= run.next_restart_at:
            with run.fields_lock:           # status() sees the count and the new process
                run.last_failure = failure_text(run, last)
                run.restarts += 1
                self._respawn(run, reason="restart")

    def _dump_class_archive(self, run: Run) -> None:
        """Once an application listing its classes has run a batch (so the list holds
        what starting one loads), dump them into the class archive."""
        if not run.class_list or self.class_archive is None:
            return
        last = run.status_file()
        if last is None or last.batch_id < 1 or last.state not in ("running", "paused"):
            return
        classes, run.class_list = Path(run.class_list), ""
        self.class_archive.dump(classes, proc_cmdline(run.pid))
        run.save()

    def _backoff(self, restarts: int) -> float:
        return min(RESTART_BACKOFF_MAX_SECS, self.restart_backoff * 4 ** restarts)

    def _ensure_monitor(self) -> None:
        if self._monitor is not None or self._closed.is_set():
            return
        self._monitor = threading.Thread(target=self._monitor_loop, daemon=True,
                                         name="spark-launcher-monitor")
        self._monitor.start()

    def _monitor_loop(self) -> None:
        while not self._closed.wait(self.monitor_secs):
            self.check()

    # --- processes ------------------------------------------------------------------
    def _run_at(self, topology_id: str, work_dir: Path) -> Run:
        """The record of a topology whose work directory is ``work_dir``."""
        run = self._record(topology_id, Path(work_dir))
        assert run is not None
        return run

    def _known(self, topology_id: str) -> Run | None:
        """The record of a topology launched by this launcher or, after a daemon
        restart, by an earlier one (its ``launch.json`` in the daemon's
        ``topologies/<id>``); None if there is none."""
        return self._record(topology_id, None)

    def _record(self, topology_id: str, work_dir: Path | None) -> Run | None:
        with self._runs_lock:
            run = self._runs.get(topology_id)
            if run is not None:
                if work_dir is not None and work_dir != run.dir.root:
                    run.dir = RunDir(work_dir)
                return run
            root = work_dir if work_dir is not None else \
                self.config.data_dir / "topologies" / topology_id
            if work_dir is None and not (root / "launch.json").exists():
                return None
            run = Run.read(topology_id, root)
            if work_dir is not None or not run.stopped:
                # A stopped one is only being looked at (its directory is removed next).
                self._runs[topology_id] = run
            return run

    def _note_death(self, run: Run) -> None:
        """Record, once, that the JVM is gone, and the failure if it was one (an exit
        the launcher asked for is not)."""
        with run.fields_lock:
            if run.died_at is not None or not run.pid:
                return
            died_at = self.clock()
            last = run.status_file()
            asked = run.stopped or run.pending_relaunch or run.dir.control_state() == "stop"
            if not asked and (last is None or last.state not in FINAL_STATES):
                component = (last.error_component
                             if last is not None and last.error_component
                             else SPARK_COMPONENT)
                message = failure_text(run, last)
                run.errors = [*run.errors, (component, message, int(died_at))][-MAX_ERRORS:]
            run.died_at = died_at
            self._class_archive_done(run)
            if run.standby_dir:             # the standby's directory, its cwd until now
                shutil.rmtree(run.standby_dir, ignore_errors=True)
                run.standby_dir = ""
        log.info("spark_app_exited", topology=run.topology_id, pid=run.pid,
                 exit=exit_text(run.exit_code), state=last.state if last else None)
        try:
            run.save()
        except OSError:
            pass

    def _start(self, run: Run, spec: LaunchSpec, reason: str) -> None:
        """Write the work directory for ``spec`` and start the application."""
        try:
            run_spec = from_plan(spec.topology_id, spec.name, spec.require_plan(),
                                 spec.executors)
            rd = run.dir
            rd.root.mkdir(parents=True, exist_ok=True)
            run_spec.write(rd.spec)
            zip_copy = rd.root / "code.zip"
            if not rd.code.is_dir() or not zip_copy.is_file():
                extract_code(spec.code_path, rd.code)
                tmp = zip_copy.with_name(".code.zip.tmp")
                shutil.copyfile(spec.code_path, tmp)
                os.replace(tmp, zip_copy)
            rd.set_control("active" if spec.active else "paused")
        except (InvalidTopology, OSError, ValueError) as exc:
            run.launch_error = f"{type(exc).__name__}: {exc}"
            raise LauncherError(f"cannot prepare {run.dir.root}: {exc}") from None
        except LauncherError as exc:
            run.launch_error = str(exc)
            raise
        run.num_workers = spec.num_workers
        if reason == "launch" and self._take_standby(run, run_spec):
            return
        # Counted from now on, so that no standby starts in the room it needs.
        run.memory = _memory_of(run_spec.conf)
        self._make_room()
        self._spawn(run, run_spec, reason)

    def _respawn(self, run: Run, reason: str) -> None:
        """Start the application again from the files already in the work directory."""
        try:
            run_spec = RunSpec.read(run.dir.spec)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            run.launch_error = f"cannot read {run.dir.spec}: {exc}"
            run.save()
            log.error("spark_relaunch_failed", topology=run.topology_id,
                      error=run.launch_error)
            return
        self._spawn(run, run_spec, reason)

    def _spawn(self, run: Run, run_spec: RunSpec, reason: str) -> None:
        rd = run.dir
        if not self.config.spark_submit and not SPARK_MAIN.is_file():
            run.launch_error = f"the runner {SPARK_MAIN} is missing"
            raise LauncherError(f"the runner {SPARK_MAIN} is missing from this installation")
        ui_port = free_port()
        self._class_archive_done(run)               # what the last launch recorded
        archive_options, archive, class_list = self._class_archive_options(run, run_spec)
        command = self.command(run_spec, rd.root, ui_port, run.num_workers,
                               archive=archive_options)
        rd.logs.mkdir(parents=True, exist_ok=True)
        # A new status.json comes from the new driver; an old one would be read as its.
        try:
            rd.status.unlink()
        except FileNotFoundError:
            pass
        out = log_file(rd.logs / "stdout")
        err = log_file(rd.logs / "stderr")
        try:
            now = self.clock()
            banner = (f"{BANNER}{reason} at "
                      f"{datetime.fromtimestamp(now, timezone.utc).isoformat()}: "
                      f"{shlex.join(command)}\n").encode()
            err.write(banner)
            err.flush()
            popen = subprocess.Popen(
                command, env=self.environment(rd.root), cwd=rd.root,
                stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True,
                close_fds=True)
        except OSError as exc:
            run.launch_error = f"cannot run {command[0]}: {exc.strerror or exc}"
            raise LauncherError(run.launch_error) from None
        finally:
            out.close()
            err.close()
        info = proc_info(popen.pid)
        with run.fields_lock:
            self._started(run, run_spec, popen, info.start_ticks if info is not None
                          else 0, ui_port, command, now)
            run.class_archive = str(archive or "")
            run.class_list = str(class_list or "")
        run.save()
        log.info("spark_app_launched", topology=run.topology_id, pid=popen.pid,
                 reason=reason, ui_port=ui_port, master=self.config.spark_master)

    def _started(self, run: Run, run_spec: RunSpec, popen: subprocess.Popen[bytes] | None,
                 start_ticks: int, ui_port: int, command: list[str], now: float, *,
                 warm: str = "", standby_dir: Path | None = None) -> None:
        """Record in ``run`` that its application is now process ``popen``: a new one,
        or a standby taken in phase ``warm`` (``ready``, ``warming``) whose directory
        is ``standby_dir``."""
        run.popen = popen
        run.pid = popen.pid if popen is not None else 0
        run.start_ticks = start_ticks
        run.ui_port = ui_port
        run.command = command
        run.launched_at = now
        run.cores = max([c.parallelism for c in run_spec.components.values()] or [1])
        run.spouts = tuple(cid for cid, c in run_spec.components.items()
                           if c.kind == "spout")
        run.memory = _memory_of(run_spec.conf)
        run.warm = warm
        run.standby_dir = str(standby_dir or "")
        run.exit_code = None
        run.died_at = None
        run.next_restart_at = None
        run.stopped = False
        run.pending_relaunch = False
        run.launch_error = ""
        run.status_key = None
        run.status_cache = None

    # --- standby drivers ------------------------------------------------------------
    def _take_standby(self, run: Run, run_spec: RunSpec) -> bool:
        """Hand ``run``'s topology to a standby of the same Spark settings, ready or
        still warming (:mod:`.standby` says why; :mod:`.standby_app` the steps);
        False when there is none, and the launch starts cold."""
        if self.standbys is None:
            return False
        taken = self.standbys.take(standby_key(self.config.spark_master, run_spec,
                                               run.num_workers))
        if taken is None:
            return False
        app, phase = taken
        now = self.clock()
        banner = (f"{BANNER}launch at "
                  f"{datetime.fromtimestamp(now, timezone.utc).isoformat()}, warm: "
                  f"standby driver {app.sid} (pid {app.pid}, {phase.value}) started as: "
                  f"{shlex.join(app.command)}\n")
        try:
            run.dir.status.unlink(missing_ok=True)
            app.prepare_handoff(run.dir, banner)
        except OSError as exc:
            log.warning("spark_standby_handoff_failed", topology=run.topology_id,
                        sid=app.sid, error=str(exc))
            app.stop()
            return False
        self._class_archive_done(run)
        with run.fields_lock:
            self._started(run, run_spec, app.popen, app.start_ticks, app.ui_port,
                          app.command, now, warm=phase.value, standby_dir=app.dir.root)
            if app.popen is None:
                run.pid = app.pid
            run.class_archive = app.class_archive
            run.class_list = app.class_list
        run.save()                      # the topology owns the process from here on
        app.hand_off(run.dir)
        log.info("spark_app_launched", topology=run.topology_id, pid=app.pid,
                 reason="launch", warm=app.sid, standby=phase.value, ui_port=app.ui_port,
                 master=self.config.spark_master)
        return True

    def _spawn_standby(self) -> StandbyApp:
        """Start one standby driver (:class:`.standby.StandbyPool`'s ``spawn``)."""
        self._standby_seq += 1
        sid = f"standby-{int(self.clock())}-{os.getpid()}-{self._standby_seq}"
        rd = RunDir(self.config.data_dir / STANDBY_DIR / sid)
        spec = self._standby_spec(sid)
        rd.logs.mkdir(parents=True)
        spec.write(rd.spec)
        rd.set_control("active")
        me = proc_info(os.getpid())
        parent = f"{os.getpid()}:{me.start_ticks if me is not None else 0}"
        ui_port = free_port()
        archive_options, archive, class_list = self._class_archive_options(None, spec)
        command = submit_command(self.submit, self.config.spark_master, spec, rd.root,
                                 ui_port, 1, archive=archive_options, standby=parent)
        out = log_file(rd.logs / "stdout")
        err = log_file(rd.logs / "stderr")
        now = self.clock()
        try:
            popen = subprocess.Popen(
                command, env=self.environment(rd.current), cwd=rd.root,
                stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True,
                close_fds=True)
        except OSError as exc:
            shutil.rmtree(rd.root, ignore_errors=True)
            raise LauncherError(f"cannot run {command[0]}: {exc.strerror or exc}") \
                from None
        finally:
            out.close()
            err.close()
        info = proc_info(popen.pid)
        app = StandbyApp(sid=sid, dir=rd, key=standby_key(self.config.spark_master, spec, 1),
                         pid=popen.pid, start_ticks=info.start_ticks if info else 0,
                         popen=popen, ui_port=ui_port, command=command, launched_at=now,
                         memory=_memory_of(spec.conf), class_archive=str(archive or ""),
                         class_list=str(class_list or ""))
        app.save()
        log.info("spark_standby_launched", sid=sid, pid=popen.pid,
                 master=self.config.spark_master)
        return app

    def _standby_spec(self, sid: str) -> RunSpec:
        # As many tasks as the master runs at once: that many Python workers warm.
        return warmup_spec(sid, min(MAX_WARM_TASKS,
                                    local_threads(self.config.spark_master) or 2))

    def _topologies_memory(self) -> int:
        """Bytes the applications of running topologies take (:mod:`.memory`), and
        of one being launched."""
        with self._runs_lock:
            runs = list(self._runs.values())
        return sum(run.memory for run in runs if not run.stopped and (
            run.alive() if run.pid else not run.launch_error))

    def _standby_room(self, held: int) -> bool:
        """Whether one standby more than ``held`` fits: within ``standby_memory``,
        and within the memory budget beside the running topologies."""
        one = _memory_of({})
        cap = self.config.standby_memory or one * standby_count(self.config)
        if (held + 1) * one > cap:
            return False
        return not self._budget or \
            self._topologies_memory() + (held + 1) * one <= self._budget

    def _make_room(self) -> None:
        """Before a cold start (whose memory :meth:`_topologies_memory` counts
        already): stop standbys while they and the topologies pass the budget
        (standbys only take what topologies leave)."""
        if self.standbys is None or not self._budget:
            return
        one = _memory_of({})
        while self._topologies_memory() + self.standbys.held() * one > self._budget \
                and self.standbys.shed():
            log.info("spark_standby_shed", reason="memory for a cold start")

    def command(self, run_spec: RunSpec, work_dir: Path, ui_port: int,
                num_workers: int, *, archive: Sequence[str] = ()) -> list[str]:
        """The spark-submit command line of one topology (:func:`.submit.submit_command`
        with this launcher's spark-submit and master)."""
        return submit_command(self.submit, self.config.spark_master, run_spec, work_dir,
                              ui_port, num_workers, archive=archive)

    # --- the class archive and Spark home -------------------------------------------
    def _class_archive_options(self, run: Run | None, run_spec: RunSpec
                               ) -> tuple[list[str], Path | None, Path | None]:
        """``(options, archive mapped, class list written)`` of the next launch of
        ``run``, or of a standby for None (:class:`ClassArchive`): none when the
        topology sets the driver's default options or class data sharing options of
        its own."""
        key = self._archive_key(user_confs(run_spec))
        if self.class_archive is None or key is None:
            return [], None, None
        with self._runs_lock:
            others = [r for r in self._runs.values() if r is not run]
        listing = self.class_archive.dumping or any(r.class_list and r.alive()
                                                    for r in others)
        return self.class_archive.options(key, record=not listing)

    def _archive_key(self, user: Mapping[str, str]) -> str | None:
        """The key of the class archive a launch with the topology's ``spark.*`` confs
        ``user`` maps, or None when it gets none (no cache, or the topology sets the
        driver's default options or class data sharing options of its own)."""
        layout = archive_layout(user)
        if self.class_archive is None or layout is None:
            return None
        return self.class_archive.key(str(self._spark_home()),
                                      user.get("spark.driver.extraClassPath", ""), layout)

    def class_archive_for(self, conf: Mapping[str, Any]) -> Path | None:
        """The class archive (made or yet to be made) a topology with configuration
        ``conf`` would map, or None when it would get none."""
        key = self._archive_key(user_confs(conf))
        return None if self.class_archive is None or key is None \
            else self.class_archive.archive(key)

    def _class_archive_done(self, run: Run) -> None:
        """``run``'s JVM is gone: delete its class list, and the archive it mapped if
        it crashed."""
        if run.class_list:
            unlink(Path(run.class_list))
        elif run.class_archive and run.exit_code != 0 and any(
                JVM_CRASH in line for line in launch_stderr(run.dir.logs / "stderr")):
            ClassArchive.discard(Path(run.class_archive))
        run.class_list = ""
        run.class_archive = ""

    def _spark_home(self) -> Path | None:
        """The application's SPARK_HOME: the mirror of PySpark's directory
        (:func:`mirror_spark_home`) in the cache directory, or without one PySpark's
        directory itself."""
        if self.spark_home is None or self.cache_dir is None:
            return self.spark_home
        with self._mirror_lock:
            if self.app_spark_home is None:
                try:
                    self.app_spark_home = mirror_spark_home(self.spark_home,
                                                            self.cache_dir / MIRROR_DIR)
                except OSError as exc:
                    log.warning("spark_home_mirror_failed", error=str(exc),
                                spark_home=str(self.spark_home))
                    return self.spark_home      # and try again at the next launch
            return self.app_spark_home

    def environment(self, work_dir: Path) -> dict[str, str]:
        """The application's environment (:func:`.submit.environment`), with the
        application's SPARK_HOME (:meth:`_spark_home`)."""
        return environment(work_dir, self._spark_home())

    # --- stopping -------------------------------------------------------------------
    def _terminate(self, run: Run, grace: float) -> None:
        """Wait up to ``grace`` for the session to exit, then SIGTERM, then SIGKILL.

        Raises:
            LauncherError: processes survived SIGKILL.
        """
        if not run.pid:
            return
        if self._wait_gone(run, grace):
            return
        log.info("spark_app_terminating", topology=run.topology_id, pid=run.pid,
                 signal="SIGTERM")
        signal_session(run.pid, run.start_ticks, signal.SIGTERM)
        if self._wait_gone(run, self.term_grace):
            return
        log.warning("spark_app_killing", topology=run.topology_id, pid=run.pid,
                    signal="SIGKILL")
        signal_session(run.pid, run.start_ticks, signal.SIGKILL)
        if not self._wait_gone(run, KILL_WAIT_SECS):
            left = [p.pid for p in session_members(run.pid, run.start_ticks)]
            raise LauncherError(f"processes {left} of topology {run.topology_id} "
                                "survived SIGKILL")

    def _wait_gone(self, run: Run, timeout: float) -> bool:
        """Poll until no process of the session lives (reaping our child)."""
        deadline = time.monotonic() + max(0.0, timeout)
        pause = threading.Event()
        while True:
            run.alive()
            if not session_members(run.pid, run.start_ticks):
                if run.popen is not None and run.popen.returncode is None:
                    try:                        # a zombie now: reap it, for its exit code
                        run.exit_code = run.popen.wait(KILL_WAIT_SECS)
                    except subprocess.TimeoutExpired:
                        pass
                self._note_death(run)
                return True
            if time.monotonic() >= deadline:
                return False
            pause.wait(0.05)

    def _control(self, topology_id: str, state: str) -> Run:
        run = self._known(topology_id)
        if run is None:
            raise LauncherError(f"topology {topology_id} was never launched here")
        run.dir.set_control(state)
        return run
