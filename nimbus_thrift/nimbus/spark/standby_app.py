"""One standby driver as a process and a directory (:class:`StandbyApp`), the
:class:`.standby.StandbyProcess` of the Spark launcher; and the hand-off.

A standby lives in ``<data_dir>/standby/<sid>/`` (the files are described in
:mod:`nimbus_thrift.runner.rundir`); its driver side is
:mod:`nimbus_thrift.runner.standby`. The hand-off, in this order, so that a daemon
that dies half-way leaves either an idle standby or a topology's application, never
a process nobody owns::

    1. its logs/stdout and logs/stderr move into the topology's logs/ (the process
       keeps writing to them: a rename on one file system), a banner appended
    2. ``current`` -> the topology's work directory (its environment names that
       path for the topology's code and blobs)
    3. the launcher writes the topology's launch.json with the standby's pid
    4. ``handoff`` written: the driver runs the topology

No Spark setting travels at the hand-off, on a command line or otherwise: a standby
is taken only by a topology whose Spark settings are the standby's own
(:func:`.submit.standby_key`), which it was started with from the properties file in
its directory (:mod:`.properties`, with its own authentication secret); ``handoff``
names a work directory and nothing else.

Its directory is deleted once its process is gone (:func:`tidy_standbys` after a
daemon restart; the launcher when the topology's application ends).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Hashable

import structlog

from ...runner.rundir import STANDBY_READY, RunDir, write_atomic
from ...runner.spec import RunSpec, from_plan
from ...topology.validate import InvalidTopology, check_topology
from ..launcher import LauncherError
from ..security.runas import as_owner_of
from .proctree import KILL_WAIT_SECS, proc_info, session_members, signal_session
from .standby import Phase

log = structlog.get_logger(__name__)

#: Where standbys live, under the data directory.
STANDBY_DIR = "standby"
#: The warm-up topology's configuration in a standby (no spark.* settings: a standby
#: has the default ones).
STANDBY_CONF = {"topology.name": "nimbus-standby"}
#: Most tasks a standby's warm-up runs at once (each is a Python worker it keeps).
MAX_WARM_TASKS = 8
#: The logs a standby writes and hands over.
LOG_NAMES = ("stdout", "stderr")


def warmup_spec(sid: str, parallelism: int = 1) -> RunSpec:
    """The run spec of the warm-up topology a standby runs (:mod:`.warmup_topology`),
    each component with ``parallelism`` tasks: as many Python workers as tasks run at
    once are started and warmed (each imports PySpark, pyarrow, pandas and the runner:
    0.6-0.7 s of a batch on 2 vCPUs when a first batch has to start one)."""
    from .warmup_topology import WarmUp       # the topology DSL: only when needed
    try:
        plan = check_topology(WarmUp.to_thrift(), dict(STANDBY_CONF), None)
    except InvalidTopology as exc:              # a bug of ours, said plainly
        raise LauncherError(f"the warm-up topology is invalid: {exc}") from None
    return from_plan(sid, STANDBY_CONF["topology.name"], plan,
                     {cid: max(1, parallelism) for cid in plan.executors})


@dataclass
class StandbyApp:
    """One standby driver (see the module docstring)."""

    sid: str
    dir: RunDir
    key: Hashable
    pid: int
    start_ticks: int
    popen: subprocess.Popen[bytes] | None
    ui_port: int                       # 0: no Spark UI (a standby never has one)
    command: list[str]
    launched_at: float
    memory: int = 0                    # bytes it holds (spark/memory.py)
    class_archive: str = ""            # the class archive it maps
    class_list: str = ""               # the class list it writes
    #: Where its record is: None, ``standby.json`` in its directory; under
    #: run_as_user, :func:`record_file` (its directory is its user's to rewrite).
    record_file: Path | None = None

    @property
    def record_path(self) -> Path:
        return self.record_file if self.record_file is not None else self.dir.standby

    def record(self) -> dict[str, Any]:
        return {"sid": self.sid, "pid": self.pid, "start_ticks": self.start_ticks,
                "ui_port": self.ui_port, "command": self.command,
                "launched_at": self.launched_at, "key": [list(k) for k in self.key]
                if isinstance(self.key, tuple) else self.key}

    def save(self) -> None:
        write_atomic(self.record_path, json.dumps(self.record(), indent=1))

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        info = proc_info(self.pid)
        return info is not None and info.live and info.start_ticks == self.start_ticks

    def probe(self) -> Phase:
        if not self.alive():
            return Phase.GONE
        last = self.dir.read_status()
        return Phase.READY if last is not None and last.state == STANDBY_READY \
            else Phase.WARMING

    def stop(self) -> None:
        """SIGKILL to its session, wait for it to be gone, delete its directory."""
        kill_session(self.pid, self.start_ticks, self.popen)
        shutil.rmtree(self.dir.root, ignore_errors=True)
        if self.record_file is not None:
            self.record_file.unlink(missing_ok=True)
        if self.class_list:                 # listed by a driver that ran no topology
            Path(self.class_list).unlink(missing_ok=True)
        log.info("standby_stopped", sid=self.sid, pid=self.pid)

    def prepare_handoff(self, run_dir: RunDir, banner: str) -> None:
        """Steps 1 and 2 of the hand-off (module docstring) to the topology of
        ``run_dir``.

        Both directories are one user's (under run_as_user, the standby is taken
        only by a topology of its own user): the steps run as the topology's
        directory's owner (:mod:`..runas`).

        Raises:
            OSError: the files could not be moved or linked.
        """
        with as_owner_of(run_dir.root):
            self._prepare_handoff(run_dir, banner)

    def _prepare_handoff(self, run_dir: RunDir, banner: str) -> None:
        run_dir.logs.mkdir(parents=True, exist_ok=True)
        for name in LOG_NAMES:
            source, target = self.dir.logs / name, run_dir.logs / name
            if target.exists():
                os.replace(target, target.with_name(name + ".1"))
            os.replace(source, target)
        with open(run_dir.logs / "stderr", "ab") as err:
            err.write(banner.encode())
        tmp = self.dir.root / ".current.tmp"
        tmp.unlink(missing_ok=True)
        os.symlink(run_dir.root, tmp)
        os.replace(tmp, self.dir.current)

    def hand_off(self, run_dir: RunDir) -> None:
        """Step 4: the standby runs the topology of ``run_dir`` from now on."""
        with as_owner_of(self.dir.root):
            self.dir.write_handoff(run_dir.root)


def kill_session(pid: int, start_ticks: int,
                 popen: subprocess.Popen[bytes] | None) -> None:
    """SIGKILL to every process of the session ``pid`` started; wait until none is
    left (reaping ``popen``).

    Raises:
        LauncherError: processes survived SIGKILL.
    """
    if not pid:
        return
    signal_session(pid, start_ticks, signal.SIGKILL)
    deadline = time.monotonic() + KILL_WAIT_SECS
    pause = threading.Event()
    while session_members(pid, start_ticks):
        if time.monotonic() > deadline:
            raise LauncherError(f"processes of standby pid {pid} survived SIGKILL")
        pause.wait(0.02)
    if popen is not None:
        try:
            popen.wait(KILL_WAIT_SECS)
        except subprocess.TimeoutExpired:
            pass


def tidy_standbys(root: Path) -> list[str]:
    """After a daemon restart: stop the idle standbys an earlier daemon left in
    ``root`` (``<data_dir>/standby``; they exit by themselves within a second of
    their daemon's death, so this is for the one that has not yet) and delete their
    directories; keep those handed to a topology while their process lives (the
    topology's launch.json owns it). Returns the ids of those stopped."""
    stopped = []
    try:
        entries = sorted(root.iterdir())
    except FileNotFoundError:
        return []
    for path in entries:
        if not path.is_dir():
            continue
        rd = RunDir(path)
        record = record_file(root, path.name)
        try:
            # Under run_as_user the daemon's own record, never one in the directory
            # (its user could name any pid there).
            source = record if record.exists() else rd.standby \
                if os.lstat(path).st_uid == os.geteuid() else None
            raw = json.loads(source.read_text()) if source is not None else {}
            pid, ticks = int(raw["pid"]), int(raw["start_ticks"])
        except (OSError, ValueError, KeyError, TypeError):
            pid, ticks = 0, 0
        info = proc_info(pid) if pid else None
        alive = info is not None and info.live and info.start_ticks == ticks
        if rd.handoff.exists() and alive:
            continue
        if alive:
            try:
                kill_session(pid, ticks, None)
            except LauncherError as exc:
                log.error("standby_not_stopped", sid=path.name, error=str(exc))
                continue
            stopped.append(path.name)
            log.info("standby_left_over_stopped", sid=path.name, pid=pid)
        shutil.rmtree(path, ignore_errors=True)
        record.unlink(missing_ok=True)
    for record in root.glob(".*.json"):        # records whose directory is gone
        if not (root / record.name[1:-len(".json")]).is_dir():
            record.unlink(missing_ok=True)
    return stopped


def record_file(root: Path, sid: str) -> Path:
    """Under run_as_user, where the record of standby ``sid`` is kept: beside its
    directory in ``root`` (``<data_dir>/standby``, the daemon's), not in it."""
    return root / f".{sid}.json"
