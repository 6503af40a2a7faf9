"""What the launcher does when an application's JVM is gone (:class:`Recovery`): it
records the death once, with the failure unless the launcher asked for the exit,
and relaunches a failed topology from its checkpoint when the configuration says so
(``restart_failed``, at most ``max_restarts`` times in a row), after waits that grow
4 times per failure in a row.

The launcher's monitor thread calls :meth:`Recovery.check_run` for each run it holds
the lock of; ``status()`` and the end of a stop record deaths through
:meth:`Recovery.note_death` as well, whichever notices first. A record another host
wrote (HA mode: :attr:`.records.Run.foreign`) is neither: this host cannot see its
process, and its launch is the leader's to make (``launch``, a takeover).
"""

from __future__ import annotations

import shutil
from typing import Callable

import structlog

from ...rpc.backoff import Backoff
from ...runner.rundir import read_untrusted
from ...runner.spec import RunSpec
from ..config import NimbusConfig
from .archive_choice import ArchiveChoice
from .proctree import exit_text
from .records import FINAL_STATES, Run
from .spawn import Spawner
from .status import MAX_ERRORS, SPARK_COMPONENT, failure_text

log = structlog.get_logger(__name__)

#: spec.json read back for a relaunch: the plan of at most 1,000 components and a conf
#: that came in a 1 MiB frame are far below this.
MAX_SPEC_BYTES = 8 << 20

#: The first relaunch waits this long after the failure; each next one 4 times longer.
RESTART_BACKOFF_SECS = 5.0
RESTART_BACKOFF_FACTOR = 4.0
#: ... but never longer than this.
RESTART_BACKOFF_MAX_SECS = 300.0
#: An application relaunched after a failure that then runs this long has recovered:
#: its next failure starts the count of restarts again.
RESTART_RESET_SECS = 600.0


def relaunch_backoff(first: float = RESTART_BACKOFF_SECS) -> Backoff:
    """How long a failed Spark application (a topology's, or a standby dead before it was
    taken) waits to be started again, ``first`` seconds the first time."""
    return Backoff(first, RESTART_BACKOFF_FACTOR, RESTART_BACKOFF_MAX_SECS)


class Recovery:
    """Notices dead applications and relaunches failed ones.

    Args:
        config: the daemon configuration (``restart_failed``, ``max_restarts``).
        clock: wall-clock seconds, for deaths and restart waits.
        spawner: starts the relaunched applications.
        archives: what a dead launch's class list or archive becomes.
        restart_backoff: see :data:`RESTART_BACKOFF_SECS`.
    """

    def __init__(self, config: NimbusConfig, clock: Callable[[], float], spawner: Spawner,
                 archives: ArchiveChoice, restart_backoff: float = RESTART_BACKOFF_SECS):
        self.config = config
        self.clock = clock
        self.spawner = spawner
        self.archives = archives
        self.schedule = relaunch_backoff(restart_backoff)

    def check_run(self, run: Run) -> None:
        """One pass of the monitor over ``run`` (whose lock the caller holds): dump the
        class archive once it has run a batch, reset the count of restarts of one that
        recovered, note a death and relaunch when it is time."""
        if not run.pid or run.stopped or run.pending_relaunch or run.foreign:
            return
        now = self.clock()
        if run.alive():
            self.archives.dump(run)
            if run.restarts and now - run.launched_at > RESTART_RESET_SECS:
                last = run.status_file()
                if last is not None and last.state == "running":
                    run.restarts = 0
                    run.save()
            return
        self.note_death(run)
        last = run.status_file()
        if not run.restartable(last, self.config):
            return
        if run.next_restart_at is None:
            run.next_restart_at = (run.died_at or now) + self.schedule.delay(run.restarts)
        if now >= run.next_restart_at:
            with run.fields_lock:           # status() sees the count and the new process
                run.last_failure = failure_text(run, last)
                run.restarts += 1
                self.respawn(run, reason="restart")

    def note_death(self, run: Run) -> None:
        """Record, once, that the JVM is gone, and the failure if it was one (an exit
        the launcher asked for is not)."""
        with run.fields_lock:
            if run.died_at is not None or not run.pid or run.foreign:
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
            self.archives.done(run)
            if run.standby_dir:             # the standby's directory, its cwd until now
                shutil.rmtree(run.standby_dir, ignore_errors=True)
                run.standby_dir = ""
        log.info("spark_app_exited", topology=run.topology_id, pid=run.pid,
                 exit=exit_text(run.exit_code), state=last.state if last else None)
        try:
            run.save()
        except OSError:
            pass

    def respawn(self, run: Run, reason: str) -> None:
        """Start the application again from the files already in the work directory."""
        try:
            # The topology can write its work directory (under run_as_user, as another
            # user): a link, a FIFO or a huge file there is refused, not followed,
            # blocked on or read whole by the monitor.
            run_spec = RunSpec.from_json(read_untrusted(
                run.dir.spec, MAX_SPEC_BYTES, below=run.dir.root).decode("utf-8"))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            run.launch_error = f"cannot read {run.dir.spec}: {exc}"
            run.save()
            log.error("spark_relaunch_failed", topology=run.topology_id,
                      error=run.launch_error)
            return
        self.spawner.spawn(run, run_spec, reason)
