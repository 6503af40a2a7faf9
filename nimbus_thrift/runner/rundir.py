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
        comps = {k: ComponentFigures(**v) for k, v in raw.pop("components", {}).items()}
        known = {k: v for k, v in raw.items() if k in cls.__dataclass_fields__}
        return cls(components=comps, **known)


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
