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
      supervision.json cluster mode (``--cluster``): the daemon's relaunch policy
      attempts.json    ... the drivers' record of their attempts (:mod:`.attempts`)
      driver.claim     ... the one driver that may run now (:mod:`.claim`)
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

Everything in a work directory may have been written by the topology's code (under
``run_as_user`` it is that user's directory), so the daemon reads it as untrusted input
(:func:`read_untrusted`, :func:`read_untrusted_tail`): never through a symbolic link, a
FIFO or a device, never more than a named limit per kind of file, and a file of the
wrong shape is "nothing there" with a rate-limited log line (:func:`report_malformed`),
never an exception in the daemon's monitor.
"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import stat
import threading
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

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
#: status.json states (:class:`RunState`, and a standby's); any other is not a status.
RUN_STATES = ("starting", "running", "paused", "stopping", "stopped", "finished",
              "failed", STANDBY_WARMING, STANDBY_READY)

# What the daemon reads back of a work directory, at most (more is not the file the
# driver or the daemon wrote: the reader refuses it, :class:`UntrustedFile`).
#: ``control``: the longest state word is 6 bytes and a newline.
MAX_CONTROL_BYTES = 64
#: ``status.json``: ~150 bytes of figures per component plus its id, for
#: max_components (1000) components whose ids came in one submit frame (1 MiB), plus
#: an error of at most :data:`MAX_STATUS_ERROR_CHARS`: under 2 MiB; twice that.
MAX_STATUS_BYTES = 4 << 20
#: ``status.json``'s error: the driver writes at most runner/failures.py's
#: MAX_ERROR_TEXT (4000) characters of message and frames; this is twice that.
MAX_STATUS_ERROR_CHARS = 8000
#: ``settings.json``: the daemon writes at most service/logs.py's MAX_LOGGERS (1000) loggers
#: with names of up to 1000 characters (~1.1 MB) and a sampling entry per component
#: (~50 bytes plus its id); 4 MiB holds both with room.
MAX_SETTINGS_BYTES = 4 << 20
#: ``handoff``: one path (PATH_MAX is 4096 bytes, escaped in JSON at most 6 per byte).
MAX_HANDOFF_BYTES = 32 << 10
#: One log line per malformed file per this many seconds: the monitor reads a status
#: every 2 s and a query reads settings at each call; a line a minute locates it.
MALFORMED_LOG_SECS = 60.0
#: Files remembered for that (a few per topology); the oldest is forgotten past it.
MAX_MALFORMED_FILES = 1024

log = logging.getLogger(__name__)


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


# --- reading what a topology wrote ------------------------------------------------------

class UntrustedFile(ValueError):
    """A file of a work directory the daemon will not read: a symbolic link, not a
    regular file, a name with other hard links, or over its limit. ``path`` is the file,
    ``reason`` says which, ``limit`` the byte limit when that was the reason."""

    def __init__(self, path: Path | str, reason: str, limit: int | None = None):
        self.path = Path(path)
        self.reason = reason
        self.limit = limit
        super().__init__(f"{path} {reason}")


_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
#: O_NOFOLLOW: a planted link to /etc/shadow or the daemon's TLS key is refused, not
#: read; O_NONBLOCK: opening a FIFO returns at once instead of waiting for a writer
#: (fstat then refuses it); O_NOCTTY: a terminal never becomes the daemon's.
_OPEN_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def open_untrusted(path: Path | str, *, below: Path | str | None = None
                   ) -> tuple[int, os.stat_result]:
    """Open ``path`` to read it as untrusted input; return the descriptor (the caller
    closes it) and its ``fstat``.

    The last component is never followed if it is a symbolic link; with ``below`` (a
    directory the daemon trusts, such as the work directory itself), no component of
    ``path`` under it is either, so a ``logs`` directory replaced by a link to ``/etc``
    is refused too.

    Raises:
        FileNotFoundError: there is no such file (the usual "nothing yet").
        UntrustedFile: a symbolic link on the way, not a regular file (a FIFO, a
            device, a directory), or a name with other hard links (one made to a file
            the topology may not read, where the kernel allows it).
        OSError: it cannot be opened (permissions).
    """
    path = Path(path)
    parts: tuple[str, ...]
    if below is None:
        parent, parts = path.parent, (path.name,)
    else:
        parent, parts = Path(below), path.relative_to(below).parts
    if not parts:
        raise UntrustedFile(path, "is not a file name")
    dir_fd = os.open(parent, _OPEN_DIR)
    try:
        for part in parts[:-1]:
            try:
                inner = os.open(part, _OPEN_DIR | os.O_NOFOLLOW, dir_fd=dir_fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise UntrustedFile(path, f"is under {part!r}, which is not a "
                                        "directory (a symbolic link?)") from None
                raise
            os.close(dir_fd)
            dir_fd = inner
        try:
            fd = os.open(parts[-1], _OPEN_FILE, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UntrustedFile(path, "is a symbolic link") from None
            raise
    finally:
        os.close(dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UntrustedFile(path, "is not a regular file (a FIFO, a device or a "
                                "directory)")
        if st.st_nlink != 1:
            raise UntrustedFile(path, f"has {st.st_nlink} names (hard links): it may "
                                "be another file's")
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_untrusted(path: Path | str, limit: int, *, below: Path | str | None = None
                   ) -> bytes:
    """The whole of ``path``, a file a topology may have written, if it is a regular
    file of at most ``limit`` bytes (see :func:`open_untrusted` for ``below``). At most
    ``limit + 1`` bytes are ever read, whatever the file's size says.

    Raises:
        FileNotFoundError: no such file.
        UntrustedFile: refused (:func:`open_untrusted`), or over ``limit`` bytes.
        OSError: it cannot be read.
    """
    fd, st = open_untrusted(path, below=below)
    try:
        if st.st_size > limit:
            raise UntrustedFile(path, f"is {st.st_size} bytes, over the limit of {limit}",
                                limit)
        chunks: list[bytes] = []
        left = limit + 1                # one more: a file growing past the limit shows
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:
        raise UntrustedFile(path, f"grew over the limit of {limit} bytes", limit)
    return data


def read_untrusted_tail(path: Path | str, limit: int, *,
                        below: Path | str | None = None) -> bytes:
    """The last ``limit`` bytes of ``path`` (a log: a longer file is normal, only its
    end is read), refused as :func:`read_untrusted` refuses a file.

    Raises:
        FileNotFoundError, UntrustedFile, OSError: as :func:`read_untrusted`.
    """
    fd, st = open_untrusted(path, below=below)
    try:
        return pread_up_to(fd, max(0, st.st_size - limit), limit)
    finally:
        os.close(fd)


def pread_up_to(fd: int, offset: int, length: int) -> bytes:
    """At most ``length`` bytes of ``fd`` from ``offset`` (fewer at its end), read in
    blocks of at most 1 MiB."""
    chunks: list[bytes] = []
    while length > 0:
        chunk = os.pread(fd, min(length, 1 << 20), offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
        length -= len(chunk)
    return b"".join(chunks)


class _MalformedLog:
    """One warning per file per :data:`MALFORMED_LOG_SECS`; thread-safe, bounded."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: OrderedDict[str, float] = OrderedDict()

    def warn(self, path: Path, error: object) -> bool:
        now = time.monotonic()
        key = str(path)
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < MALFORMED_LOG_SECS:
                return False
            self._last[key] = now
            self._last.move_to_end(key)
            while len(self._last) > MAX_MALFORMED_FILES:
                self._last.popitem(last=False)
        log.warning("ignored %s, which is not what the daemon or the driver writes "
                    "there: %s", path, error)
        return True


_malformed = _MalformedLog()


def report_malformed(path: Path | str, error: object) -> bool:
    """Log that ``path`` was ignored because of ``error`` (a file a topology wrote
    that is not the file it should be), at most once per :data:`MALFORMED_LOG_SECS`
    per file; True if a line was written."""
    return _malformed.warn(Path(path), error)


def _field(raw: dict[str, Any], name: str, kinds: tuple[type, ...],
           default: Any = ...) -> Any:
    """``raw[name]`` if it is one of ``kinds`` (a bool is never a number; numbers are
    finite), ``default`` when it is missing.

    Raises:
        ValueError: missing without a default, or of the wrong type.
    """
    if name not in raw:
        if default is ...:
            raise ValueError(f"{name} is missing")
        return default
    value = raw[name]
    if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
        raise ValueError(f"{name} is {type(value).__name__}, not "
                         f"{' or '.join(k.__name__ for k in kinds)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{name} is {value}, not a finite number")
    return value


_NUMBER = (int, float)


def _object(raw: Any, what: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ValueError(f"{what} is {type(raw).__name__}, not a JSON object")
    return raw


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number a writer of this file makes")


def _json(data: str | bytes) -> Any:
    """JSON without NaN and Infinity (Python's json accepts them; our writers never
    write them)."""
    return json.loads(data, parse_constant=_no_constant)


@dataclass
class ReportedStats:
    """A component's stats as the driver reports them in ``status.json``: counts since
    the application started, and recent rates (the daemon reads them into its own
    ``ComponentStats``)."""

    emitted: int = 0
    processed: int = 0
    rate: float = 0.0              # tuples processed per second over the last batches
    latency_ms: float = 0.0        # mean micro-batch duration over the last batches
    busy_ms: float = 0.0           # a bolt's tasks' time on its tuples, summed

    @classmethod
    def from_dict(cls, raw: Any) -> "ReportedStats":
        """From JSON; keys of a newer runner are left out, missing ones default.

        Raises:
            ValueError: not an object, or a figure that is not a finite number.
        """
        raw = _object(raw, "a component's figures")
        return cls(emitted=int(_field(raw, "emitted", (int,), 0)),
                   processed=int(_field(raw, "processed", (int,), 0)),
                   rate=float(_field(raw, "rate", _NUMBER, 0.0)),
                   latency_ms=float(_field(raw, "latency_ms", _NUMBER, 0.0)),
                   busy_ms=float(_field(raw, "busy_ms", _NUMBER, 0.0)))


@dataclass
class RunState:
    """What the driver says about itself in ``status.json``.

    ``state``: ``starting`` (session up, no batch yet), ``running``, ``paused``,
    ``stopping``, ``stopped`` (clean exit), ``finished`` (a bounded run completed),
    ``failed`` (``error`` says why). ``in_flight``, while ``paused`` only: a batch
    planned before the pause may still be running (its tuples still reach the bolts);
    false once none can be, and then nothing changes until the topology is activated.

    A cluster-mode driver (:mod:`.cluster_driver`) also says ``restarts``: the failures
    in a row before its attempt; ``relaunch_at`` (epoch seconds), while ``starting``:
    when its back-off ends and it starts Spark (0: no wait); ``relaunch``, on
    ``failed``: this driver exits for the master to relaunch it (restarts remain),
    false when the failure is final. Client mode leaves them 0 and false.
    """

    state: str
    pid: int
    updated_at: float
    started_at: float
    app_id: str = ""
    ui_url: str = ""
    batch_id: int = -1
    batch_ms: float = 0.0
    components: dict[str, ReportedStats] = field(default_factory=dict)
    error: str = ""
    error_component: str = ""
    in_flight: bool = False
    restarts: int = 0
    relaunch_at: float = 0.0
    relaunch: bool = False

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> "RunState":
        """Parse a status file, checking every field's type (keys of a newer runner are
        left out): what the daemon then does with it cannot raise.

        Raises:
            ValueError: not JSON, not an object, a state not in :data:`RUN_STATES`, a
                field of the wrong type, a number that is not finite, an error over
                :data:`MAX_STATUS_ERROR_CHARS` or a Spark UI address that is not an
                http(s) URL (the web page links to it).
        """
        raw = _object(_json(text), "the status")
        state = _field(raw, "state", (str,))
        if state not in RUN_STATES:
            raise ValueError(f"state {state[:40]!r} is not one of {RUN_STATES}")
        components = _object(_field(raw, "components", (dict,), {}), "components")
        error = _field(raw, "error", (str,), "")
        if len(error) > MAX_STATUS_ERROR_CHARS:
            raise ValueError(f"the error is {len(error)} characters long, over "
                             f"{MAX_STATUS_ERROR_CHARS}")
        ui_url = _field(raw, "ui_url", (str,), "")
        if ui_url and not _web_address(ui_url):
            raise ValueError(f"ui_url {ui_url[:80]!r} is not an http(s) address")
        return cls(state=state, pid=_field(raw, "pid", (int,)),
                   updated_at=float(_field(raw, "updated_at", _NUMBER)),
                   started_at=float(_field(raw, "started_at", _NUMBER)),
                   app_id=_field(raw, "app_id", (str,), ""), ui_url=ui_url,
                   batch_id=_field(raw, "batch_id", (int,), -1),
                   batch_ms=float(_field(raw, "batch_ms", _NUMBER, 0.0)),
                   components={str(k): ReportedStats.from_dict(v)
                               for k, v in components.items()},
                   error=error, error_component=_field(raw, "error_component", (str,), ""),
                   in_flight=_field(raw, "in_flight", (bool,), False),
                   restarts=_field(raw, "restarts", (int,), 0),
                   relaunch_at=float(_field(raw, "relaunch_at", _NUMBER, 0.0)),
                   relaunch=_field(raw, "relaunch", (bool,), False))


#: Longest Spark UI address taken from a status (a host name and a port are far less).
MAX_UI_URL_CHARS = 2048


def _web_address(url: str) -> bool:
    """Whether ``url`` is a plain http(s) address with a host: never ``javascript:``
    or ``data:``, which a link on the daemon's page would run in its origin."""
    if len(url) > MAX_UI_URL_CHARS or any(c.isspace() or ord(c) < 32 for c in url):
        return False
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.netloc)


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
    def from_json(cls, text: str | bytes) -> "RunSettings":
        """Parse a settings file, checking every field's type.

        Raises:
            ValueError: a file that is not settings.
        """
        raw = _object(_json(text), "the settings")
        loggers = _object(_field(raw, "loggers", (dict,), {}), "loggers")
        sampling = _object(_field(raw, "sampling", (dict,), {}), "sampling")
        return cls(loggers={str(k): _logger_setting(v) for k, v in loggers.items()},
                   sampling={str(k): _sampling(v) for k, v in sampling.items()})


def _known_keys(raw: dict[str, Any], cls: Any, what: str) -> None:
    """The daemon writes settings and reads them back: a key it does not write means
    the file is not its own."""
    unknown = sorted(set(raw) - set(cls.__dataclass_fields__))
    if unknown:
        raise ValueError(f"{what} has unknown keys {unknown[:5]}")


def _logger_setting(raw: Any) -> LoggerSetting:
    raw = _object(raw, "a logger's setting")
    _known_keys(raw, LoggerSetting, "a logger's setting")
    reset_at = _field(raw, "reset_at", _NUMBER + (type(None),), None)
    return LoggerSetting(level=_field(raw, "level", (str,)),
                         reset_at=float(reset_at) if reset_at is not None else None,
                         reset_level=_field(raw, "reset_level", (str,), ""),
                         timeout_secs=_field(raw, "timeout_secs", (int,), 0))


def _sampling(raw: Any) -> Sampling:
    raw = _object(raw, "a component's sampling")
    _known_keys(raw, Sampling, "a component's sampling")
    return Sampling(enable=_field(raw, "enable", (bool,), False),
                    percent=float(_field(raw, "percent", _NUMBER, 0.0)))


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
        self.supervision = self.root / "supervision.json"   # cluster mode: .attempts
        self.attempts = self.root / "attempts.json"
        self.claim = self.root / "driver.claim"             # cluster mode: .claim

    def set_control(self, state: str) -> None:
        if state not in CONTROL_STATES:
            raise ValueError(f"control state {state!r} is not one of {CONTROL_STATES}")
        write_atomic(self.control, state + "\n")

    def control_state(self) -> str:
        """The wanted state; ``active`` when the file is missing, unreadable or not a
        control file."""
        try:
            data = read_untrusted(self.control, MAX_CONTROL_BYTES)
        except FileNotFoundError:
            return "active"
        except (OSError, ValueError) as exc:
            report_malformed(self.control, exc)
            return "active"
        text = data.decode("ascii", "replace").strip()
        if text not in CONTROL_STATES:
            report_malformed(self.control, f"{text[:20]!r} is not one of {CONTROL_STATES}")
            return "active"
        return text

    def write_status(self, state: RunState) -> None:
        write_atomic(self.status, state.to_json())

    def read_status(self) -> RunState | None:
        """The driver's last status; None when there is none yet, or what is there is
        not a status (:data:`MAX_STATUS_BYTES`, :meth:`RunState.from_json`: logged, at
        most once a minute per file)."""
        try:
            return RunState.from_json(read_untrusted(self.status, MAX_STATUS_BYTES))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            report_malformed(self.status, exc)
            return None

    def write_handoff(self, work_dir: Path) -> None:
        """Hand a standby driver the topology whose work directory is ``work_dir``."""
        write_atomic(self.handoff, json.dumps({"work_dir": str(work_dir)}))

    def read_handoff(self) -> Path | None:
        """The work directory a standby driver was handed, or None (not yet, or a file
        that is not a hand-off)."""
        try:
            raw = _json(read_untrusted(self.handoff, MAX_HANDOFF_BYTES))
        except (OSError, ValueError):
            return None
        work = raw.get("work_dir") if isinstance(raw, dict) else None
        return Path(work) if isinstance(work, str) and work else None

    def write_settings(self, settings: RunSettings) -> None:
        write_atomic(self.settings, settings.to_json())

    def read_settings(self) -> RunSettings:
        """The settings; empty ones when the file is missing.

        Raises:
            OSError: it cannot be read. ValueError: it is not settings (among them
                :class:`UntrustedFile`: a link, not a regular file, over
                :data:`MAX_SETTINGS_BYTES`).
        """
        try:
            data = read_untrusted(self.settings, MAX_SETTINGS_BYTES)
        except FileNotFoundError:
            return RunSettings()
        return RunSettings.from_json(data)
