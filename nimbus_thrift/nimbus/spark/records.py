"""What the launcher knows of one topology's application: :class:`Run`, kept in the
work directory as ``launch.json`` so that a restarted daemon adopts the processes it
finds alive instead of starting them twice, and read together with the driver's
``status.json`` (:mod:`nimbus_thrift.runner.rundir`).

In HA mode the work directory is in ``shared_dir`` and ``launch.json`` may have been
written by a daemon on another host (:attr:`Run.host`): its pid means nothing here, so
such a record is never signalled, waited for or taken for alive
(:attr:`Run.foreign`); its driver's ``status.json`` is all there is to read.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from ...runner.rundir import RunDir, RunState, write_atomic
from ..config import NimbusConfig
from ..security.runas import as_owner_of
from .proctree import proc_info

log = structlog.get_logger(__name__)

#: Driver states after which the process exits by itself and should not be relaunched.
FINAL_STATES = frozenset({"stopped", "finished"})


def this_host() -> str:
    """The name launch records give this host (``socket.gethostname()``)."""
    return socket.gethostname()


class StatusFile:
    """The driver's ``status.json`` read again only when the file changed: what both
    deploy modes' launch records (this :class:`Run` and the cluster's) read on every
    status call, declared here and kept in their fields."""

    dir: RunDir
    status_key: tuple[int, int, int] | None
    status_cache: RunState | None

    def status_file(self) -> RunState | None:
        """The driver's last ``status.json`` (None: none yet, or unreadable)."""
        try:
            st = os.stat(self.dir.status)
        except OSError:
            self.status_key = None
            self.status_cache = None
            return None
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
        if key != self.status_key:
            self.status_cache = self.dir.read_status()
            self.status_key = key
        return self.status_cache


@dataclass
class Run(StatusFile):
    """What the launcher knows of one topology's application (``launch.json``)."""

    topology_id: str
    dir: RunDir
    #: Held by launch, stop, rebalance, resume and the monitor, for as long as they
    #: take (a stop waits for the processes).
    lock: threading.RLock = field(default_factory=threading.RLock)
    #: Held briefly while fields change together, so that status() (which never
    #: takes ``lock``) reads them consistently.
    fields_lock: threading.RLock = field(default_factory=threading.RLock)
    pid: int = 0                       # the JVM (spark-submit execs); 0: never started
    start_ticks: int = 0
    popen: subprocess.Popen[bytes] | None = None    # None when adopted
    ui_port: int = 0                   # its Spark UI's; 0: the UI is off (the default)
    command: list[str] = field(default_factory=list)
    launched_at: float = 0.0
    num_workers: int = 1
    cores: int = 1                     # cores it may use (nodes' used slots)
    spouts: tuple[str, ...] = ()
    exit_code: int | None = None
    died_at: float | None = None       # when the launcher noticed the JVM was gone
    restarts: int = 0                  # relaunches after failures, in a row
    next_restart_at: float | None = None
    last_failure: str = ""             # what the last relaunch recovered from
    stopped: bool = False              # stop() finished: never relaunched
    pending_relaunch: bool = False     # a rebalance stopped it and has not relaunched
    launch_error: str = ""
    errors: list[tuple[str, str, int]] = field(default_factory=list)
    class_archive: str = ""            # the class archive this launch maps
    class_list: str = ""               # the list of classes this launch writes
    warm: str = ""                     # this launch took a standby driver: its phase
    standby_dir: str = ""              # ... whose directory goes when the process does
    memory: int = 0                    # bytes of this machine it takes (spark/memory.py)
    #: The host whose daemon started the process (``this_host()`` there); "" in a
    #: record written before hosts were recorded: this one's.
    host: str = ""
    #: This launcher launched, adopted or relaunched it (a leader's run); False for a
    #: record only read for its status (a follower's view in HA mode), which is read
    #: again whenever launch.json changes and never relaunched from here.
    managed: bool = False
    record_key: tuple[int, int, int] | None = None
    status_key: tuple[int, int, int] | None = None
    status_cache: RunState | None = None
    #: Where this record is kept: None, in the work directory (``launch.json``); under
    #: run_as_user, a file of the daemon's outside it (the topology's user owns the
    #: work directory, and a pid or directory it could rewrite would be the daemon's
    #: to signal or remove).
    record_file: Path | None = None

    @property
    def record_path(self) -> Path:
        return self.record_file if self.record_file is not None else self.dir.launch

    def record(self) -> dict[str, Any]:
        return {"pid": self.pid, "pgid": self.pid, "sid": self.pid,
                "start_ticks": self.start_ticks, "ui_port": self.ui_port,
                "command": self.command, "launched_at": self.launched_at,
                "num_workers": self.num_workers, "cores": self.cores,
                "spouts": list(self.spouts), "exit_code": self.exit_code,
                "died_at": self.died_at, "restarts": self.restarts,
                "last_failure": self.last_failure, "stopped": self.stopped,
                "pending_relaunch": self.pending_relaunch,
                "errors": [list(e) for e in self.errors],
                "class_archive": self.class_archive,
                "class_list": self.class_list, "warm": self.warm,
                "standby_dir": self.standby_dir, "memory": self.memory,
                "host": self.host}

    def load(self, raw: dict[str, Any]) -> None:
        self.pid = int(raw.get("pid") or 0)
        self.start_ticks = int(raw.get("start_ticks") or 0)
        self.ui_port = int(raw.get("ui_port") or 0)
        self.command = [str(c) for c in raw.get("command") or []]
        self.launched_at = float(raw.get("launched_at") or 0.0)
        self.num_workers = int(raw.get("num_workers") or 1)
        self.cores = int(raw.get("cores") or 1)
        self.spouts = tuple(raw.get("spouts") or ())
        self.exit_code = raw.get("exit_code")
        self.died_at = raw.get("died_at")
        self.restarts = int(raw.get("restarts") or 0)
        self.last_failure = str(raw.get("last_failure") or "")
        self.stopped = bool(raw.get("stopped"))
        self.pending_relaunch = bool(raw.get("pending_relaunch"))
        self.errors = [(str(c), str(m), int(w)) for c, m, w in raw.get("errors") or []]
        self.class_archive = str(raw.get("class_archive") or "")
        self.class_list = str(raw.get("class_list") or "")
        warm = raw.get("warm") or ""
        self.warm = warm if isinstance(warm, str) else "ready"
        self.standby_dir = str(raw.get("standby_dir") or "")
        self.memory = int(raw.get("memory") or 0)
        self.host = str(raw.get("host") or "")

    @property
    def foreign(self) -> bool:
        """Whether the record names a process of another host (HA mode: written by a
        daemon there): its pid is not one of this host's to look at or signal."""
        return bool(self.pid) and bool(self.host) and self.host != this_host()

    @classmethod
    def read(cls, topology_id: str, root: Path, record_file: Path | None = None) -> "Run":
        """The record in ``record_file``, by default ``root/launch.json`` (an empty one
        if there is none)."""
        run = cls(topology_id, RunDir(root), record_file=record_file)
        run.refresh()
        return run

    def refresh(self) -> None:
        """Load the record again if the file changed since it was last read (or
        written here): a follower follows the leader's relaunches this way."""
        try:
            st = os.stat(self.record_path)
        except OSError:
            return
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
        if key == self.record_key:
            return
        self.record_key = key
        try:
            self.load(json.loads(self.record_path.read_text()))
        except FileNotFoundError:
            pass
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            log.warning("spark_launch_record_unreadable", topology=self.topology_id,
                        error=str(exc))

    def launched_elsewhere(self) -> bool:
        """Whether launch.json now records another launch than this one (another
        host, or another process): a new leader launched the topology since this
        daemon did, and the record, ``control`` and ``status.json`` are its now."""
        if not self.pid:
            return False
        try:
            raw = json.loads(self.record_path.read_text())
            other = (str(raw.get("host") or ""), int(raw.get("pid") or 0),
                     int(raw.get("start_ticks") or 0))
        except (OSError, ValueError, TypeError, AttributeError):
            return False
        return other != (self.host, self.pid, self.start_ticks)

    def set_control(self, state: str) -> None:
        """Write ``control`` as the work directory's owner (:mod:`..runas`)."""
        with as_owner_of(self.dir.root):
            self.dir.set_control(state)

    def save(self) -> None:
        if self.dir.root.is_dir():
            if self.record_file is not None:
                self.record_file.parent.mkdir(mode=0o700, exist_ok=True)
            write_atomic(self.record_path, json.dumps(self.record(), indent=1))
            try:
                st = os.stat(self.record_path)
                self.record_key = (st.st_mtime_ns, st.st_size, st.st_ino)
            except OSError:
                pass

    def alive(self) -> bool:
        """True while the JVM (the recorded pid with the recorded start time) lives;
        always False for a :attr:`foreign` record (this host cannot see it: its
        ``status.json`` says, :mod:`.status`)."""
        if not self.pid or self.foreign:
            return False
        if self.popen is not None:
            code = self.popen.poll()
            if code is not None:
                self.exit_code = code
                return False
            return True
        info = proc_info(self.pid)
        return info is not None and info.live and info.start_ticks == self.start_ticks

    def restartable(self, last: RunState | None, config: NimbusConfig) -> bool:
        """Whether the monitor relaunches this application, gone with ``last`` its
        final status (``restart_failed`` and ``max_restarts`` of ``config``)."""
        return (config.restart_failed and not self.stopped
                and self.restarts < config.max_restarts
                and (last is None or last.state not in FINAL_STATES)
                and self.dir.control_state() != "stop")
