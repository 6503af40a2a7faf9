"""Ending an application's processes: its session gets a grace period to exit by
itself (after ``control=stop``), then SIGTERM, then SIGKILL, until no process of it
is left (:func:`terminate`).

Every process of the session, not only the JVM: ``pyspark.daemon`` and its Python
workers live in the JVM's session (:mod:`.processes`) and would outlive it.

Never a :attr:`.records.Run.foreign` record's (HA mode: its pid is another host's, and
here it would name some unrelated process): its driver stops by ``control`` or by the
fence of the next driver (:mod:`nimbus_thrift.runner.claim`).
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from typing import Callable

import structlog

from ..launcher import LauncherError
from .proctree import KILL_WAIT_SECS, session_members, signal_session
from .records import Run

log = structlog.get_logger(__name__)

#: After SIGTERM to the session, this long before SIGKILL. The JVM exits within a
#: second of SIGTERM (measured 0.97 s); the rest is margin for a loaded machine.
TERM_GRACE_SECS = 5.0


def terminate(run: Run, grace: float, term_grace: float,
              gone: Callable[[Run], None]) -> None:
    """Wait up to ``grace`` for the session to exit, then SIGTERM, then (after
    ``term_grace``) SIGKILL. ``gone`` is called once no process is left (the launcher
    records the death).

    Nothing for a :attr:`~.records.Run.foreign` record.

    Raises:
        LauncherError: processes survived SIGKILL.
    """
    if not run.pid:
        return
    if run.foreign:
        log.info("spark_app_elsewhere", topology=run.topology_id, host=run.host,
                 pid=run.pid, action="no signal from this host")
        return
    if wait_gone(run, grace, gone):
        return
    log.info("spark_app_terminating", topology=run.topology_id, pid=run.pid,
             signal="SIGTERM")
    signal_session(run.pid, run.start_ticks, signal.SIGTERM)
    if wait_gone(run, term_grace, gone):
        return
    log.warning("spark_app_killing", topology=run.topology_id, pid=run.pid,
                signal="SIGKILL")
    signal_session(run.pid, run.start_ticks, signal.SIGKILL)
    if not wait_gone(run, KILL_WAIT_SECS, gone):
        left = [p.pid for p in session_members(run.pid, run.start_ticks)]
        raise LauncherError(f"processes {left} of topology {run.topology_id} "
                            "survived SIGKILL")


def wait_gone(run: Run, timeout: float, gone: Callable[[Run], None]) -> bool:
    """Poll until no process of the session lives (reaping our child), then call
    ``gone``; False if some still live after ``timeout`` seconds."""
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
            gone(run)
            return True
        if time.monotonic() >= deadline:
            return False
        pause.wait(0.05)
