"""One topology's work directory: the files the daemon and the driver share.

::

    <work_dir>/
      spec.json        RunSpec, written by the launcher
      code/            the uploaded zip, extracted (on the driver's PYTHONPATH)
      control          "active" | "paused" | "stop": written by the launcher, polled
                       by the driver (spouts stop advancing while paused)
      status.json      written by the driver about twice a second (RunState below)
      checkpoint/      Spark's offsets, commits and keyed state
      logs/            spark-submit stdout and stderr
      launch.json      the launcher's record of the process (pid, start time, ui port)
      settings.json    run-time settings (RunSettings below: logger levels, tuple
                       sampling), written by the daemon, read by the driver at each
                       poll and by the Python workers at each task; a change applies
                       without a restart, and a relaunched application reads them again

A standby driver (a Spark application started ahead of any topology, warmed up and
waiting: ``nimbus/spark/standby.py``) has a directory of the same layout, whose
``spec.json`` is its warm-up topology's, plus::

      standby.json     the launcher's record of the standby (pid, start time, key)
      current          a symbolic link to the work directory of the topology it was
                       handed (its environment names this path, so that its Python
                       workers see the topology's code and blobs once it is made)
      handoff          the control channel: written once, by rename, by the launcher:
                       {"work_dir": ...}; the standby polls for it, then runs that
                       work directory's topology as a cold driver would

and ``status.json`` says ``warming``, then ``ready`` while it waits.

Both sides write by rename so a reader never sees half a file. No PySpark here.
"""

from __future__ import annotations

import errno
import json
import os
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

CONTROL_STATES = ("active", "paused", "stop")
#: status.json states of a standby driver: warming up, then waiting for a hand-off.
STANDBY_WARMING = "warming"
STANDBY_READY = "ready"
#: Level names a logger setting may name (Storm's, which are log4j's, and Python's
#: WARNING and CRITICAL), upper case.
LEVEL_NAMES = ("ALL", "TRACE", "DEBUG", "INFO", "WARN", "WARNING", "ERROR", "FATAL",
               "CRITICAL", "OFF")
#: The logger name of the root logger in settings (Storm's; any case).
ROOT_LOGGER = "ROOT"
#: The sampling key of every component of the topology (a component's own key wins).
ALL_COMPONENTS = ""


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so that a reader sees the old or the new file, never
    part of one, and the new one survives a power cut once this returns.

    The file is fsynced before the rename (else the rename can reach the disk before
    the data, leaving an empty file after a crash: ext4 with delalloc, xfs) and the
    directory after it (else the rename itself can be lost). The new file's mode is
    what the process's umask leaves of 0666, as for any new file.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    data = text.encode("utf-8")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    """Make the entries of directory ``path`` (a rename, a new file) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    except OSError as exc:
        # A few file systems cannot fsync a directory (EINVAL); there the rename is as
        # durable as they make it.
        if exc.errno != errno.EINVAL:
            raise
    finally:
        os.close(fd)


@dataclass
class ComponentFigures:
    """Counts since the application started, and recent rates."""

    emitted: int = 0
    processed: int = 0
    rate: float = 0.0              # tuples processed per second over the last batches
    latency_ms: float = 0.0        # mean micro-batch duration over the last batches
    busy_ms: float = 0.0           # a bolt's tasks' time on its tuples, summed

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> "ComponentFigures":
        """From JSON; keys of a newer runner are left out, missing ones default."""
        return cls(**{k: v for k, v in raw.items() if k in cls.__dataclass_fields__})


@dataclass
class RunState:
    """What the driver says about itself in ``status.json``.

    ``state``: ``starting`` (session up, no batch yet), ``running``, ``paused``,
    ``stopping``, ``stopped`` (clean exit), ``finished`` (a bounded run completed),
    ``failed`` (``error`` says why).
    """

    state: str
    pid: int
    updated_at: float
    started_at: float
    app_id: str = ""
    ui_url: str = ""
    batch_id: int = -1
    batch_ms: float = 0.0
    components: dict[str, ComponentFigures] = field(default_factory=dict)
    error: str = ""
    error_component: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "RunState":
        raw: dict[str, Any] = json.loads(text)
        comps = {k: ComponentFigures.from_dict(v)
                 for k, v in raw.pop("components", {}).items()}
        known = {k: v for k, v in raw.items() if k in cls.__dataclass_fields__}
        return cls(components=comps, **known)


@dataclass(frozen=True)
class LoggerSetting:
    """One named logger's level, as the daemon was asked (Storm's ``LogLevel``).

    ``level`` is one of :data:`LEVEL_NAMES`; from ``reset_at`` (epoch seconds) on, the
    logger goes back to ``reset_level``, or when that is empty to the level it had
    before (None: kept until changed). ``timeout_secs`` is what was asked, for
    ``getLogConfig``.
    """

    level: str
    reset_at: float | None = None
    reset_level: str = ""
    timeout_secs: int = 0

    def expired(self, now: float) -> bool:
        return self.reset_at is not None and self.reset_at <= now


@dataclass(frozen=True)
class Sampling:
    """Tuple sampling of a component (Storm's ``debug``): ``percent`` of the tuples it
    emits are logged while ``enable``."""

    enable: bool = False
    percent: float = 0.0


@dataclass(frozen=True)
class RunSettings:
    """``settings.json``: logger levels by name (``ROOT`` for the root logger) and
    sampling by component id (:data:`ALL_COMPONENTS` for all of them)."""

    loggers: dict[str, LoggerSetting] = field(default_factory=dict)
    sampling: dict[str, Sampling] = field(default_factory=dict)

    def sample_percent(self, component: str) -> float:
        """The percentage of ``component``'s tuples to log: its own setting if it has
        one, else the topology's."""
        own = self.sampling.get(component) or self.sampling.get(ALL_COMPONENTS)
        return own.percent if own is not None and own.enable else 0.0

    def to_json(self) -> str:
        return json.dumps({"loggers": {k: asdict(v) for k, v in self.loggers.items()},
                           "sampling": {k: asdict(v) for k, v in self.sampling.items()}},
                          sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "RunSettings":
        """Raises ValueError (or TypeError) for a file that is not settings."""
        raw = json.loads(text)
        if not isinstance(raw, dict):
            raise ValueError("settings are not a JSON object")
        return cls(loggers={str(k): LoggerSetting(**v)
                            for k, v in (raw.get("loggers") or {}).items()},
                   sampling={str(k): Sampling(**v)
                             for k, v in (raw.get("sampling") or {}).items()})


class RunDir:
    """Paths and file formats of one work directory."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.spec = self.root / "spec.json"
        self.code = self.root / "code"
        self.control = self.root / "control"
        self.status = self.root / "status.json"
        self.checkpoint = self.root / "checkpoint"
        self.logs = self.root / "logs"
        self.launch = self.root / "launch.json"
        self.settings = self.root / "settings.json"
        self.handoff = self.root / "handoff"
        self.current = self.root / "current"
        self.standby = self.root / "standby.json"

    def set_control(self, state: str) -> None:
        if state not in CONTROL_STATES:
            raise ValueError(f"control state {state!r} is not one of {CONTROL_STATES}")
        write_atomic(self.control, state + "\n")

    def control_state(self) -> str:
        """The wanted state; ``active`` when the file is missing or unreadable."""
        try:
            text = self.control.read_text().strip()
        except OSError:
            return "active"
        return text if text in CONTROL_STATES else "active"

    def write_status(self, state: RunState) -> None:
        write_atomic(self.status, state.to_json())

    def read_status(self) -> RunState | None:
        try:
            return RunState.from_json(self.status.read_text())
        except (OSError, ValueError, TypeError):
            return None

    def write_handoff(self, work_dir: Path) -> None:
        """Hand a standby driver the topology whose work directory is ``work_dir``."""
        write_atomic(self.handoff, json.dumps({"work_dir": str(work_dir)}))

    def read_handoff(self) -> Path | None:
        """The work directory a standby driver was handed, or None (not yet, or a file
        that is not a hand-off)."""
        try:
            raw = json.loads(self.handoff.read_text())
        except (OSError, ValueError):
            return None
        work = raw.get("work_dir") if isinstance(raw, dict) else None
        return Path(work) if isinstance(work, str) and work else None

    def write_settings(self, settings: RunSettings) -> None:
        write_atomic(self.settings, settings.to_json())

    def read_settings(self) -> RunSettings:
        """The settings; empty ones when the file is missing.

        Raises:
            OSError: it cannot be read. ValueError, TypeError: it is not settings.
        """
        try:
            text = self.settings.read_text()
        except FileNotFoundError:
            return RunSettings()
        return RunSettings.from_json(text)
