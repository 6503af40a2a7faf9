"""A topology's run-time settings as one process of it sees them: ``settings.json`` of
its work directory (:class:`~.rundir.RunSettings`, written by the daemon), re-read when
it changes, its logger levels applied (:class:`~.loglevels.LogLevels`).

Who reads it: the driver at each poll (about twice a second), and each Python worker
process when a task starts (:func:`task_settings`): a ``stat`` per task, the file read
only when it changed. A worker that runs no task has no user code running that could
log, so its levels (and their resets) catch up when its next task starts.

On a cluster the executors see the file only if the work directory is on storage they
share with the driver, as the checkpoint must be; elsewhere they keep their levels.

Logging is configured here once per process (:func:`configure_logging`): a stderr
handler on the root logger if it has none, so that what a raised level lets through
reaches the topology's log (the driver's stderr, and the Python workers' stderr,
which Spark copies to its executor's stderr: ``logs/stderr`` with a local master).

No PySpark here.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from .loglevels import LogLevels
from .rundir import RunDir, RunSettings

log = logging.getLogger(__name__)

#: The format of the handler :func:`configure_logging` installs.
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s [pid %(process)d]: %(message)s"


def configure_logging() -> None:
    """Give the root logger a stderr handler if it has none (once per process; user
    code that configured logging first keeps its own)."""
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root.addHandler(handler)


class SettingsWatcher:
    """``settings.json`` of one work directory, re-read when its stat changes, its
    logger levels applied to this process.

    Args:
        run_dir: the work directory.
        levels: applies the logger settings (its clock and root hook).
    """

    def __init__(self, run_dir: RunDir, levels: LogLevels | None = None):
        self.run_dir = run_dir
        self.levels = levels if levels is not None else LogLevels()
        self.settings = RunSettings()
        self._key: tuple[int, int, int] | None = None
        self._lock = threading.Lock()

    def refresh(self) -> RunSettings:
        """The settings as of now (read again if the file changed), with the logger
        levels applied and those whose time is up reset."""
        with self._lock:
            try:
                st = os.stat(self.run_dir.settings)
                key: tuple[int, int, int] | None = (st.st_mtime_ns, st.st_size, st.st_ino)
            except OSError:
                key = None
            if key != self._key:
                self._key = key
                try:
                    settings = self.run_dir.read_settings() if key is not None \
                        else RunSettings()
                except (OSError, ValueError, TypeError) as exc:
                    # Half a file cannot be seen (it is renamed into place); a bad one
                    # keeps what was applied, and says so once.
                    log.warning("cannot read %s: %s", self.run_dir.settings, exc)
                else:
                    self._apply(settings)
            self.levels.tick()
            return self.settings

    def _apply(self, settings: RunSettings) -> None:
        try:
            self.levels.apply(settings.loggers)
        except ValueError as exc:            # a level name the daemon would refuse
            log.warning("log levels of %s not applied: %s", self.run_dir.settings, exc)
        self.settings = settings


_watchers: dict[str, SettingsWatcher] = {}
_watchers_lock = threading.Lock()


def follow_logs(logs: Path) -> None:
    """Point this process's stdout and stderr (file descriptors 1 and 2, so what its
    children and any library write too) at ``logs/stdout`` and ``logs/stderr``, appended
    to. For the processes of a cluster-mode driver (:mod:`.cluster_driver`), whose own
    output a standalone worker keeps in its directory.

    Raises:
        OSError: a file cannot be opened (the descriptors opened before stay).
    """
    sys.stdout.flush()
    sys.stderr.flush()
    for name, fd in (("stdout", 1), ("stderr", 2)):
        new = os.open(logs / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC,
                      0o666)
        try:
            os.dup2(new, fd)            # inheritable, as 1 and 2 always are
        finally:
            os.close(new)


def task_settings(work_dir: str | Path, clock: Callable[[], float] = time.time
                  ) -> RunSettings:
    """The settings of the topology at ``work_dir`` in this process (one watcher per
    work directory and process, made at the first task, which also configures
    logging), refreshed."""
    key = str(work_dir)
    with _watchers_lock:
        watcher = _watchers.get(key)
        if watcher is None:
            configure_logging()
            watcher = _watchers[key] = SettingsWatcher(RunDir(Path(key)),
                                                       LogLevels(clock))
    return watcher.refresh()
