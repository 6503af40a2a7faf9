"""The launcher's side of standby drivers (:class:`StandbyDrivers`): how many to keep
(:func:`standby_count`), starting one (the pool's ``spawn``), handing one to a
topology's first launch, and the memory they may take beside the topologies'.

:mod:`.standby` is the pool and its rules, without processes; :mod:`.standby_app` is
one standby's process, directory and hand-off steps. What is here needs the
launcher's own facts: its spark-submit, its runs (their memory) and its budget.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from datetime import datetime, timezone
from typing import Callable

import structlog

from ...runner.rundir import RunDir
from ...runner.spec import RunSpec
from ..admission import default_budget
from ..config import NimbusConfig
from ..launcher import LauncherError
from ..security.runas import (TRAVERSE_MODE, OsUser, as_owner_of, os_user_owning, own_work_dir,
                     process_options)
from .archive_choice import ArchiveChoice
from .master import local_threads
from .proctree import proc_info
from .records import Run
from .spawn import Spawner, memory_of, started
from .standby import StandbyPool
from .standby_app import (MAX_WARM_TASKS, STANDBY_DIR, StandbyApp, record_file,
                          warmup_spec)
from .status import BANNER
from .submit import fenced, log_file, standby_key, ui_port_for

log = structlog.get_logger(__name__)


#: Why there are none in HA mode (said in the log when standby_drivers asks for some).
NO_STANDBYS_IN_HA = ("HA mode: every nimbus would hold them (1.7 GB each) while only the "
                     "leader launches, and a hand-off would start a driver without the "
                     "fence (driver.claim) that keeps one driver per topology")


def standby_count(config: NimbusConfig) -> int:
    """Standby drivers to keep: ``standby_drivers``, whose default (-1) is 1 on a local
    master with PySpark's own spark-submit (a configured one may not run our driver)
    and 0 otherwise (on a cluster a standby would hold cores); none in HA mode
    (:data:`NO_STANDBYS_IN_HA`)."""
    if fenced(config):
        return 0
    if config.standby_drivers >= 0:
        return config.standby_drivers
    return 1 if local_threads(config.spark_master) is not None and \
        not config.spark_submit else 0


class StandbyDrivers:
    """Keeps ``wanted`` standby drivers in :attr:`pool` for a launcher.

    Args:
        config: the daemon configuration (``spark_master``, ``data_dir``,
            ``standby_memory``, ``spark_memory_budget``).
        clock: wall-clock seconds, for names, launch times and banners.
        spawner: the launcher's (its spark-submit and environment).
        archives: the class archive options of each launch.
        runs: the launcher's runs now (their memory).
        wanted, backoff, replace_delay: of the :class:`.standby.StandbyPool`.
    """

    def __init__(self, config: NimbusConfig, clock: Callable[[], float], spawner: Spawner,
                 archives: ArchiveChoice, runs: Callable[[], list[Run]], *, wanted: int,
                 backoff: float, replace_delay: float):
        self.config = config
        self.clock = clock
        self.spawner = spawner
        self.archives = archives
        self.runs = runs
        self.budget = config.spark_memory_budget or default_budget()
        self._seq = 0
        self.wanted = wanted
        #: Under run_as_user, the OS user standbys are kept for: the last one whose
        #: topology launched (None until one has; then the pool keeps none).
        self.user: OsUser | None = None
        if config.run_as_user:
            # Each standby's user enters its own directory in it by its name.
            root = config.data_dir / STANDBY_DIR
            root.mkdir(parents=True, exist_ok=True)
            os.chmod(root, TRAVERSE_MODE)
        self.pool: StandbyPool[StandbyApp] = StandbyPool(
            0 if config.run_as_user else wanted, self.key(None),
            self.spawn, room=self.room, clock=time.monotonic,
            backoff=backoff, replace_delay=replace_delay)

    def key(self, user: OsUser | None, run_spec: RunSpec | None = None,
            num_workers: int = 1) -> tuple[tuple[str, str], ...]:
        """What a standby must share with a launch to be taken by it: its Spark
        settings (:func:`.submit.standby_key`) and, under run_as_user, its OS user
        (one user's warm JVM is never handed to another)."""
        key = standby_key(self.config.spark_master, run_spec or self.spec("-"),
                          num_workers)
        return key if user is None else (*key, ("user", user.name))

    def keep_for(self, user: OsUser | None) -> None:
        """Under run_as_user, keep standbys for ``user`` from now on (whose topology
        just launched, warm or cold): any of another user's are stopped."""
        if not self.config.run_as_user or user is None or (
                self.user is not None and self.user.uid == user.uid):
            return
        self.user = user
        self.pool.retarget(self.key(user), self.spawn, self.wanted)

    def take(self, run: Run, run_spec: RunSpec) -> bool:
        """Hand ``run``'s topology to a standby of the same Spark settings, ready or
        still warming (:mod:`.standby` says why; :mod:`.standby_app` the steps);
        False when there is none, and the launch starts cold."""
        try:
            user = os_user_owning(run.dir.root) if self.config.run_as_user else None
        except OSError:
            return False
        taken = self.pool.take(self.key(user, run_spec, run.num_workers))
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
        self.archives.done(run)
        with run.fields_lock:
            started(run, run_spec, app.popen, app.start_ticks, app.ui_port,
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

    def spawn(self) -> StandbyApp:
        """Start one standby driver (:class:`.standby.StandbyPool`'s ``spawn``).

        Raises:
            LauncherError: spark-submit could not be run.
        """
        self._seq += 1
        sid = f"standby-{int(self.clock())}-{os.getpid()}-{self._seq}"
        rd = RunDir(self.config.data_dir / STANDBY_DIR / sid)
        spec = self.spec(sid)
        user = self.user
        if self.config.run_as_user and user is None:
            raise LauncherError("no user to keep a standby for yet")
        if user is not None:
            own_work_dir(rd.root, user)
        # In its directory as its owner (runas.py), as in a topology's.
        with as_owner_of(rd.root):
            rd.logs.mkdir(parents=True)
            spec.write(rd.spec)
            rd.set_control("active")
        me = proc_info(os.getpid())
        parent = f"{os.getpid()}:{me.start_ticks if me is not None else 0}"
        ui_port = ui_port_for(spec)                 # 0: no Spark UI
        archive_options, archive, class_list = self.archives.options(None, spec)
        command = self.spawner.command(spec, rd.root, ui_port, 1,
                                       archive=archive_options, standby=parent)
        with as_owner_of(rd.root):
            out = log_file(rd.logs / "stdout")
            err = log_file(rd.logs / "stderr")
        env, as_user = process_options(user, self.spawner.environment(rd.current))
        now = self.clock()
        try:
            popen = subprocess.Popen(
                command, env=env, cwd=rd.root,
                stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True,
                close_fds=True, **as_user)  # type: ignore[call-overload]
        except OSError as exc:
            shutil.rmtree(rd.root, ignore_errors=True)
            raise LauncherError(f"cannot run {command[0]}: {exc.strerror or exc}") \
                from None
        finally:
            out.close()
            err.close()
        info = proc_info(popen.pid)
        app = StandbyApp(sid=sid, dir=rd, key=self.key(user),
                         pid=popen.pid, start_ticks=info.start_ticks if info else 0,
                         popen=popen, ui_port=ui_port, command=command, launched_at=now,
                         memory=memory_of(spec.conf), class_archive=str(archive or ""),
                         class_list=str(class_list or ""),
                         record_file=record_file(rd.root.parent, sid)
                         if user is not None else None)
        app.save()
        log.info("spark_standby_launched", sid=sid, pid=popen.pid,
                 master=self.config.spark_master)
        return app

    def spec(self, sid: str) -> RunSpec:
        """The warm-up topology a standby named ``sid`` runs."""
        # As many tasks as the master runs at once: that many Python workers warm.
        return warmup_spec(sid, min(MAX_WARM_TASKS,
                                    local_threads(self.config.spark_master) or 2))

    def topologies_memory(self) -> int:
        """Bytes the applications of running topologies take (:mod:`.memory`), and
        of one being launched."""
        runs = self.runs()
        return sum(run.memory for run in runs if not run.stopped and (
            run.alive() if run.pid else not run.launch_error))

    def room(self, held: int) -> bool:
        """Whether one standby more than ``held`` fits: within ``standby_memory``,
        and within the memory budget beside the running topologies."""
        one = memory_of({})
        cap = self.config.standby_memory or one * standby_count(self.config)
        if (held + 1) * one > cap:
            return False
        return not self.budget or \
            self.topologies_memory() + (held + 1) * one <= self.budget

    def make_room(self) -> None:
        """Before a cold start (whose memory :meth:`topologies_memory` counts
        already): stop standbys while they and the topologies pass the budget
        (standbys only take what topologies leave)."""
        if not self.budget:
            return
        one = memory_of({})
        while self.topologies_memory() + self.pool.held() * one > self.budget \
                and self.pool.shed():
            log.info("spark_standby_shed", reason="memory for a cold start")
