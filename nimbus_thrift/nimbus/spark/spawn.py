"""Starting a topology's application cold (:class:`Spawner`): spark-submit with the
topology's command line and environment, in a session of its own, its logs opened
and a banner written; and what a :class:`.records.Run` records of a process now
running its topology (:func:`started`, which a standby's hand-off uses too).

The work directory is ready before this (``spec.json``, ``code/``, ``control``: the
launcher writes it); the class archive options come from :mod:`.archive_choice`.
"""

from __future__ import annotations

import shlex
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import structlog

from ...runner.spec import RunSpec
from ..config import NimbusConfig
from ..launcher import LauncherError
from ..security.runas import as_owner_of, os_user_owning, process_options
from .app_home import AppSparkHome
from .archive_choice import ArchiveChoice
from .memory import memory_request
from .proctree import proc_info
from .records import Run, this_host
from .status import BANNER
from .properties import spark_defaults, write_properties
from .submit import (SPARK_MAIN, environment, fenced, log_file, spark_confs,
                     submit_command, ui_port_for)

log = structlog.get_logger(__name__)


def memory_of(conf: Mapping[str, Any]) -> int:
    """The memory an application with ``conf`` takes (:func:`.memory.memory_request`),
    as the launcher counts it against the budget."""
    try:
        return memory_request(conf)
    except ValueError:              # refused at submit; an old record's: takes none
        return 0


def started(run: Run, run_spec: RunSpec, popen: subprocess.Popen[bytes] | None,
            start_ticks: int, ui_port: int, command: list[str], now: float, *,
            warm: str = "", standby_dir: Path | None = None) -> None:
    """Record in ``run`` that its application is now process ``popen``: a new one,
    or a standby taken in phase ``warm`` (``ready``, ``warming``) whose directory
    is ``standby_dir``."""
    run.popen = popen
    run.pid = popen.pid if popen is not None else 0
    run.host = this_host()
    run.managed = True
    run.start_ticks = start_ticks
    run.ui_port = ui_port
    run.command = command
    run.launched_at = now
    run.cores = max([c.parallelism for c in run_spec.components.values()] or [1])
    run.spouts = tuple(cid for cid, c in run_spec.components.items()
                       if c.kind == "spout")
    run.memory = memory_of(run_spec.conf)
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


class Spawner:
    """Starts applications with a launcher's spark-submit and master.

    Args:
        config: the daemon configuration (``spark_master``, ``spark_submit``).
        submit: the spark-submit command to run.
        app_home: the applications' SPARK_HOME.
        archives: the class archive options of each launch.
        clock: wall-clock seconds, for the launch time and banner.
    """

    def __init__(self, config: NimbusConfig, submit: list[str], app_home: AppSparkHome,
                 archives: ArchiveChoice, clock: Callable[[], float]):
        self.config = config
        self.submit = submit
        self.app_home = app_home
        self.archives = archives
        self.clock = clock

    def command(self, run_spec: RunSpec, work_dir: Path, ui_port: int,
                num_workers: int, *, archive: Sequence[str] = (),
                standby: str = "") -> list[str]:
        """Write the Spark settings of one application (:func:`.submit.spark_confs`)
        to the properties file in ``work_dir`` (:func:`.properties.write_properties`,
        as the directory's owner), and return the spark-submit command line that
        names it (:func:`.submit.submit_command`), with this launcher's spark-submit
        and master.

        Raises:
            LauncherError: the file could not be written.
        """
        master = self.config.spark_master
        confs = spark_confs(master, run_spec, work_dir, ui_port, num_workers,
                            archive=archive, standby=standby,
                            defaults=spark_defaults(self.environment(work_dir)))
        try:
            with as_owner_of(work_dir):
                properties = write_properties(work_dir, confs)
        except OSError as exc:
            raise LauncherError(f"cannot write the Spark settings in {work_dir}: "
                                f"{exc.strerror or exc}") from None
        return submit_command(self.submit, master, run_spec, work_dir, properties,
                              standby=standby, fence=fenced(self.config) and not standby)

    def environment(self, work_dir: Path) -> dict[str, str]:
        """The application's environment (:func:`.submit.environment`), with the
        application's SPARK_HOME (:class:`.app_home.AppSparkHome`)."""
        return environment(work_dir, self.app_home.path())

    def spawn(self, run: Run, run_spec: RunSpec, reason: str) -> None:
        """Start ``run``'s application from its work directory (``reason``: launch,
        relaunch, restart, resume, rebalance; said in the banner and the log).

        Raises:
            LauncherError: the runner is missing, or spark-submit could not be run
                (``run.launch_error`` says which).
        """
        rd = run.dir
        if not self.config.spark_submit and not SPARK_MAIN.is_file():
            run.launch_error = f"the runner {SPARK_MAIN} is missing"
            raise LauncherError(f"the runner {SPARK_MAIN} is missing from this installation")
        ui_port = ui_port_for(run_spec)           # 0: the Spark UI is off
        self.archives.done(run)                     # what the last launch recorded
        archive_options, archive, class_list = self.archives.options(run, run_spec)
        command = self.command(run_spec, rd.root, ui_port, run.num_workers,
                               archive=archive_options)
        try:
            user = os_user_owning(rd.root)
        except OSError as exc:
            run.launch_error = f"cannot start in {rd.root.name}: {exc}"
            raise LauncherError(run.launch_error) from None
        env, as_user = process_options(user, self.environment(rd.root))
        # In the work directory as its owner (runas.py): what the topology planted
        # there is followed, if at all, with its own rights.
        try:
            with as_owner_of(rd.root):
                rd.logs.mkdir(parents=True, exist_ok=True)
                # A new status.json comes from the new driver; an old one would be
                # read as its.
                try:
                    rd.status.unlink()
                except FileNotFoundError:
                    pass
                out = log_file(rd.logs / "stdout")
                try:
                    err = log_file(rd.logs / "stderr")
                except BaseException:
                    out.close()
                    raise
        except OSError as exc:
            run.launch_error = f"cannot open its logs: {exc.strerror or exc}"
            raise LauncherError(run.launch_error) from None
        try:
            now = self.clock()
            banner = (f"{BANNER}{reason} at "
                      f"{datetime.fromtimestamp(now, timezone.utc).isoformat()}: "
                      f"{shlex.join(command)}\n").encode()
            err.write(banner)
            err.flush()
            popen = subprocess.Popen(
                command, env=env, cwd=rd.root,
                stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True,
                close_fds=True, **as_user)  # type: ignore[call-overload]
        except OSError as exc:
            run.launch_error = f"cannot run {command[0]}: {exc.strerror or exc}"
            raise LauncherError(run.launch_error) from None
        finally:
            out.close()
            err.close()
        info = proc_info(popen.pid)
        with run.fields_lock:
            started(run, run_spec, popen, info.start_ticks if info is not None
                    else 0, ui_port, command, now)
            run.class_archive = str(archive or "")
            run.class_list = str(class_list or "")
        run.save()
        log.info("spark_app_launched", topology=run.topology_id, pid=popen.pid,
                 reason=reason, ui_port=ui_port, master=self.config.spark_master)
