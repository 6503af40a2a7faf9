"""The ``spark`` launcher: one topology is one Spark application, started with
spark-submit as a child of the daemon in a session of its own.

This is the only daemon-side module that knows about Spark, and it never imports
PySpark: it finds PySpark's directory with :func:`importlib.util.find_spec` and runs
its ``bin/spark-submit``. Processes of one topology::

    nimbus daemon
      └─ spark-submit, which execs the JVM   pid P = process group P = session P
           └─ python runner/spark_main.py    the driver: writes status.json, reads control
                └─ pyspark.daemon            its own process group, still session P
                     └─ python workers

The daemon and the driver talk only through the work directory
(:mod:`nimbus_thrift.runner.rundir`): the launcher writes ``spec.json``, ``code/``,
``code.zip`` and ``control``; the driver writes ``status.json``; ``launch.json`` is the
launcher's own record (pid and its start time, UI port, command, restarts), so that a
restarted daemon adopts the processes it finds alive instead of starting them twice.

Theory of operation. The launcher does not keep a state machine of its own: the state
of a topology is read, each time it is asked, from two facts, whether the JVM is alive
(its pid with the start time recorded at launch, so a reused pid is not mistaken for
it) and the last ``status.json``::

    JVM    status.json says      -> state     detail (TopologyInfo.sched_status)
    alive  nothing yet              starting  "starting: waiting for the Spark application"
    alive  starting                 starting  "starting: Spark application ... is up, ..."
    alive  running/paused/stopping  the same  "running: batch 12, 3.4k tuples/s, Spark UI"
    alive  failed                   failed    "failed: <the driver's error> (exiting ...)"
    gone   stopped                  stopped   "stopped: ... (exit code 0)"
    gone   finished                 finished  "finished: the bounded run completed ..."
    gone   failed                   failed    "failed: <error> (exit code 1; see <stderr>)"
    gone   anything else, nothing   failed    "failed: ... without a final status: <last
                                               stderr line> (exit code 1; see <stderr>)"

The detail always starts with the state word and a colon: ``submit --wait`` reads it.

Start-up: the driver JVM maps a class data sharing archive of Spark's classes, made
after the first launch on this Java and Spark installation (:class:`ClassArchive`),
and the application's SPARK_HOME is a mirror of PySpark's without its zipped Python
code (:func:`mirror_spark_home`), so that its Python processes import PySpark's
compiled modules. Both live in a cache directory of the user (:func:`default_cache_dir`).

A failed topology is relaunched from its checkpoint by a monitor thread when the
configuration says so (``restart_failed``, at most ``max_restarts`` times in a row,
with growing waits); stopping is ``control=stop``, then SIGTERM, then SIGKILL to every
process of the session, until none is left.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import os
import re
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
import zipfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import IO, Any, Callable, Mapping, Sequence

import structlog

from ...runner.rundir import RunDir, RunState, write_atomic
from ...runner.spec import RunSpec, from_plan
from ..config import NimbusConfig
from ..launcher import ComponentStats, LauncherError, LaunchSpec, RunStatus, WorkerNode
from ...topology.validate import InvalidTopology, check_topology

log = structlog.get_logger(__name__)

#: The driver program spark-submit runs (written by the runner; imports PySpark).
SPARK_MAIN = Path(__file__).resolve().parents[2] / "runner" / "spark_main.py"
#: The directory holding the ``nimbus_thrift`` package: on the driver's PYTHONPATH, so
#: the runner imports the same code as the daemon even from a source checkout.
PACKAGE_ROOT = Path(__file__).resolve().parents[3]
#: Loopback only: the driver, its UI and (in local mode) the executors.
LOCAL_HOST = "127.0.0.1"
#: After SIGTERM to the session, this long before SIGKILL. The JVM exits within a
#: second of SIGTERM (measured 0.97 s); the rest is margin for a loaded machine.
TERM_GRACE_SECS = 5.0
#: After SIGKILL the processes are gone within a fraction of a second (0.12 s).
KILL_WAIT_SECS = 5.0
#: How often the monitor thread looks for dead applications to relaunch.
MONITOR_SECS = 2.0
#: The first relaunch waits this long after the failure; each next one 4 times longer.
RESTART_BACKOFF_SECS = 5.0
#: ... but never longer than this.
RESTART_BACKOFF_MAX_SECS = 300.0
#: An application relaunched after a failure that then runs this long has recovered:
#: its next failure starts the count of restarts again.
RESTART_RESET_SECS = 600.0
#: The standalone master's web UI port when ``spark_master_ui`` is not set.
MASTER_UI_PORT = 8080
#: Timeout of one request to the standalone master's JSON status.
MASTER_TIMEOUT_SECS = 2.0
#: A cluster's workers are read again after this long (getClusterInfo may be frequent).
NODES_CACHE_SECS = 5.0
#: stderr is searched for its last meaningful line in this many bytes of its end.
STDERR_TAIL_BYTES = 64 << 10
#: stdout and stderr are renamed to ``*.1`` at a launch once they grow past this.
LOG_ROTATE_BYTES = 50 << 20
#: Errors kept per topology for getTopologyInfo (Storm keeps 10 per component).
MAX_ERRORS = 10
#: Pseudo-component of errors that belong to the application, not to one component.
SPARK_COMPONENT = "__spark"
#: Confs the launcher must own: it reads the UI port back to report it.
RESERVED_CONFS = frozenset({"spark.ui.port"})
#: Starts the line the launcher writes to stderr before each launch.
BANNER = "--- nimbus-thrift "
#: Driver states after which the process exits by itself and should not be relaunched.
FINAL_STATES = frozenset({"stopped", "finished"})
#: Spark puts this conf's JVM options before ``spark.driver.extraJavaOptions``: the
#: launcher's (the class archive's) go here, so a topology's own extra options add to
#: them. A topology that sets it replaces them.
#:
#: Not among them, measured on 2 vCPUs (scripts/bench/bench_topology.py; the driver JVM runs
#: the tasks in local mode): ``-XX:TieredStopAtLevel=1`` (C1 only) starts the word
#: count 1.5-2 s sooner but costs 25-40% of its throughput; ``-XX:+UseSerialGC``
#: changes neither. A topology may still add them to its extraJavaOptions.
DEFAULT_JAVA_OPTIONS = "spark.driver.defaultJavaOptions"
EXTRA_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
#: Environment variables the ``java`` launcher reads options from, before its own.
JAVA_OPTION_VARIABLES = ("JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS")
#: Options that decide the layout of objects a class archive holds.
_GC_OPTION = re.compile(r"^-XX:[+-]Use\w*GC$")
_CDS_OPTION = re.compile(r"^-Xshare:|^-XX:(?:SharedArchiveFile|ArchiveClassesAtExit|"
                         r"SharedClassListFile|DumpLoadedClassList)=|"
                         r"^-XX:[+-]AutoCreateSharedArchive$")
_POINTERS_OPTION = re.compile(r"^-XX:[+-]UseCompressed(?:Oops|ClassPointers)$")
#: A class archive dump still running after this long is killed (it takes 30-40 s of
#: one core on 2 vCPUs).
CDS_DUMP_TIMEOUT_SECS = 600.0
#: A class list not written to for this long belongs to no running launch that will
#: dump it (lists are dumped after a launch's first batch, seconds after it starts).
STALE_CLASS_LIST_SECS = 86400.0
#: Starts the report of a JVM crash on stderr.
JVM_CRASH = "A fatal error has been detected by the Java Runtime Environment"
#: Under the cache directory: the mirrors of PySpark's Spark home, and class archives.
MIRROR_DIR = "spark-home"
CLASS_ARCHIVE_DIR = "spark-cds"
#: ``$SPARK_HOME/python/lib`` entries a mirror leaves out: Spark puts these zips first
#: on the path of every Python process it starts, and Python compiles what it imports
#: from a zip anew in each process (no bytecode cache): 0.5 s per process for
#: ``pyspark.sql`` and a worker's modules, measured on 2 vCPUs, and a topology's first
#: output waits for half a dozen such processes one after the other (the driver, data
#: source planners, the source runner, the workers): 3.5-5 s in all. Without them,
#: Python imports the same PySpark (the mirror is of its own directory) from its
#: site-packages, compiled once.
ZIPPED_PYTHON = re.compile(r"^(?:pyspark|py4j-.*-src)\.zip$")

_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*"
                             r"(?:Error|Exception|Exit|Interrupt|Failure)\b")
_LOG_NOISE = re.compile(r"^\d\d[/-]\d\d[/-]\d\d.* (?:INFO|DEBUG|TRACE) |"
                        r"^\s*at |^\s*\.\.\. \d+ more|^WARNING: ")
_LOCAL_MASTER = re.compile(r"^local(?:\[(\*|\d+)(?:,\s*\d+)?\])?$")


# --- /proc ---------------------------------------------------------------------------

@dataclass(frozen=True)
class ProcInfo:
    """The fields of ``/proc/<pid>/stat`` the launcher needs."""

    pid: int
    state: str                  # R, S, D, Z (zombie), X (dead), ...
    pgrp: int
    session: int
    start_ticks: int            # clock ticks after boot: with the pid, identifies it

    @property
    def live(self) -> bool:
        return self.state not in ("Z", "X")


def proc_info(pid: int) -> ProcInfo | None:
    """``/proc/<pid>/stat`` parsed, or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("ascii", "replace")
    except (OSError, ValueError):
        return None
    # The command name (field 2) is in parentheses and may hold spaces and ')'.
    fields = raw[raw.rfind(")") + 2:].split()
    try:
        return ProcInfo(pid, fields[0], int(fields[2]), int(fields[3]), int(fields[19]))
    except (IndexError, ValueError):
        return None


def session_members(leader: int, start_ticks: int) -> list[ProcInfo]:
    """Live processes of the session (or process group) ``leader`` started, oldest first.

    While any process of a session or group lives, the kernel does not hand its id to
    a new process; so if ``leader`` now names a different process (another start
    time), the session is gone and nothing is returned.
    """
    head = proc_info(leader)
    if head is not None and head.start_ticks != start_ticks:
        return []
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        info = proc_info(int(entry))
        if info is not None and info.live and leader in (info.session, info.pgrp) \
                and info.start_ticks >= start_ticks:
            members.append(info)
    return sorted(members, key=lambda p: (p.start_ticks, p.pid))


# --- locating Spark ------------------------------------------------------------------

def find_spark_home() -> Path | None:
    """PySpark's directory (which is a SPARK_HOME), found without importing it."""
    try:
        spec = importlib.util.find_spec("pyspark")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def spark_version(home: Path | None) -> str:
    """The version PySpark declares in ``version.py``, or ``""``."""
    if home is None:
        return ""
    try:
        text = (home / "version.py").read_text()
    except OSError:
        return ""
    match = re.search(r"__version__[^=]*=\s*['\"]([^'\"]+)['\"]", text)
    return match.group(1) if match else ""


def local_threads(master: str) -> int | None:
    """Threads of a ``local``, ``local[N]``, ``local[*]`` or ``local[N,F]`` master."""
    match = _LOCAL_MASTER.match(master.strip())
    if match is None:
        return None
    count = match.group(1)
    if count is None:
        return 1
    return os.cpu_count() or 1 if count == "*" else int(count)


def master_ui_url(master: str, override: str) -> str | None:
    """The JSON status URL of a standalone master (``spark://host:port``)."""
    if override:
        base = override.rstrip("/")
        return base if base.endswith("/json") else base + "/json/"
    if not master.startswith("spark://"):
        return None
    first = master[len("spark://"):].split(",")[0]
    host = first.rsplit(":", 1)[0] if ":" in first else first
    return f"http://{host}:{MASTER_UI_PORT}/json/"


def free_port() -> int:
    """A TCP port free on loopback now (Spark tries the next ones if it is taken)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOCAL_HOST, 0))
        return int(s.getsockname()[1])


def extract_code(zip_path: Path, dest: Path) -> None:
    """Extract ``zip_path`` into ``dest`` (replaced whole), refusing escaping members.

    The zip was checked at submit; this checks again, since it is cheap and the work
    directory is where a mistake would write.

    Raises:
        LauncherError: an unreadable zip or a member that would land outside ``dest``.
    """
    tmp = dest.with_name(f".{dest.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    root = tmp.resolve()
    try:
        with zipfile.ZipFile(zip_path) as zf:
            for info in zf.infolist():
                name = info.filename
                parts = PurePosixPath(name).parts
                target = (root / name).resolve()
                if (not name or name.startswith("/") or "\\" in name or "\x00" in name
                        or ".." in parts or bool(parts and ":" in parts[0])
                        or (target != root and root not in target.parents)
                        or stat.S_ISLNK(info.external_attr >> 16)):
                    raise LauncherError(f"zip member {name!r} of {zip_path} would be "
                                        "extracted outside the code directory")
            zf.extractall(root)
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise LauncherError(f"cannot extract the topology code {zip_path}: {exc}") from None
    except LauncherError:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)


def last_stderr_line(path: Path) -> str:
    """The last line of ``path`` worth showing: an exception line if there is one near
    the end, else the last line that is not INFO logging or a stack frame."""
    lines = [line.rstrip() for line in _launch_stderr(path) if line.strip()]
    for line in reversed(lines[-200:]):
        if _EXCEPTION_LINE.match(line.strip()):
            return _shorten(line.strip())
    for line in reversed(lines):
        if not _LOG_NOISE.match(line):
            return _shorten(line.strip())
    return ""


def _launch_stderr(path: Path) -> list[str]:
    """The lines of ``path`` (a topology's stderr) the last launch wrote, as far as
    they are in its last :data:`STDERR_TAIL_BYTES`."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - STDERR_TAIL_BYTES))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return []
    for index in range(len(lines) - 1, -1, -1):
        if lines[index].startswith(BANNER):
            return lines[index + 1:]               # this launch's output only
    return lines


def _shorten(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _rate(value: float) -> str:
    for unit, scale in (("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.1f}{unit}"
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"


def _exit_text(code: int | None) -> str:
    if code is None:
        return "exit code unknown"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _conf_value(value: Any) -> str | None:
    if value is None or isinstance(value, (dict, list)):
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _option_tokens(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:                  # unbalanced quotes: the JVM will say so
        return text.split()


def driver_java_options(user: Sequence[str], archive: Sequence[str] = ()) -> list[str]:
    """The launcher's options for the driver JVM (``spark.driver.defaultJavaOptions``):
    the class archive's (:class:`ClassArchive`), unless ``user`` (the topology's and the
    environment's options) sets class data sharing options of its own."""
    return [] if any(_CDS_OPTION.match(token) for token in user) else list(archive)


def mirror_spark_home(home: Path, parent: Path) -> Path:
    """A directory under ``parent`` that is Spark home ``home`` (every entry a symbolic
    link to ``home``'s) except for the zipped PySpark and py4j in ``python/lib``
    (:data:`ZIPPED_PYTHON`). Made once per Spark home and set of entries, and never
    changed: a new one is made when they change.

    Raises:
        OSError: ``parent`` cannot be written.
    """
    def entries(directory: Path) -> list[str]:
        return sorted(e.name for e in os.scandir(directory))
    top = [n for n in entries(home) if n != "python"]
    python = home / "python"
    inner = [n for n in entries(python) if n != "lib"] if python.is_dir() else []
    lib = [n for n in entries(python / "lib") if not ZIPPED_PYTHON.match(n)] \
        if (python / "lib").is_dir() else []
    key = hashlib.sha256("\0".join([str(home), *top, "/", *inner, "/", *lib])
                         .encode()).hexdigest()[:16]
    mirror = parent / f"{home.name}-{key}"
    if mirror.is_dir():
        return mirror
    parent.mkdir(parents=True, exist_ok=True)
    tmp = parent / f".{mirror.name}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        (tmp / "python" / "lib").mkdir(parents=True)
        for name in top:
            (tmp / name).symlink_to(home / name)
        for name in inner:
            (tmp / "python" / name).symlink_to(python / name)
        for name in lib:
            (tmp / "python" / "lib" / name).symlink_to(python / "lib" / name)
        try:
            tmp.rename(mirror)
        except OSError:
            if not mirror.is_dir():         # else another launcher made it first
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return mirror


def tidy_mirrors(parent: Path) -> list[Path]:
    """Delete the mirrors under ``parent`` whose Spark home no longer exists (their
    links lead nowhere), and return them."""
    gone: list[Path] = []
    try:
        mirrors = [Path(e.path) for e in os.scandir(parent)
                   if e.is_dir(follow_symlinks=False) and not e.name.startswith(".")]
    except OSError:
        return gone
    for mirror in mirrors:
        jars = mirror / "jars"
        if jars.is_symlink() and not jars.exists():
            shutil.rmtree(mirror, ignore_errors=True)       # links only: nothing followed
            gone.append(mirror)
    return gone


def default_cache_dir() -> Path:
    """Where the launcher keeps what it makes once per Java and Spark installation
    (the mirror of Spark home, class archives): the user's cache directory, shared by
    the daemons of the user, since it belongs to no one daemon."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "nimbus-thrift"


def java_binary() -> Path | None:
    """The java spark-submit runs (``$JAVA_HOME/bin/java``, else ``java`` on PATH)."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and os.access(Path(java_home) / "bin" / "java", os.X_OK):
        return Path(java_home) / "bin" / "java"
    found = shutil.which("java")
    return Path(found) if found else None


class ClassArchive:
    """A class data sharing archive of the driver JVM's classes, shared by every launch
    on one Java and Spark installation: the JVM maps it instead of reading, parsing and
    verifying the ~17,000 classes a topology loads from Spark's jars (measured on 2
    vCPUs: the first output 4-6 s sooner).

    Theory of operation. A launch that finds no archive has its JVM list the classes it
    loads (``-XX:DumpLoadedClassList``, which costs nothing measurable). Once that
    application has run a batch, the launcher dumps those classes into an archive in
    the background (:meth:`dump`: ``java -Xshare:dump`` at the lowest CPU priority
    with the application JVM's own class path; 30-40 s of one core on 2 vCPUs, once),
    and every later launch maps it (``-XX:SharedArchiveFile``). One dump at a time;
    a failed one is tried again from the next launch's list. Beside each archive a note
    names the installation it is for; an archive whose installation is gone is deleted
    when a launcher starts (:meth:`tidy`).

    The name hashes what an archive is valid with: the Java runtime, Spark's jars, the
    driver class path and the JVM options. A mismatch the hash misses is the JVM's to
    catch: it then runs without class sharing. An archive a JVM crashed with (a
    damaged file can crash it) is deleted, to be made again.

    Args:
        directory: where archives, class lists and dumps are kept (made when needed).
        spark_home: the Spark installation (its ``jars``).
        java: the java binary spark-submit runs.
    """

    def __init__(self, directory: Path, spark_home: Path, java: Path):
        self.directory = directory
        self.spark_home = spark_home
        self.java = java
        self._lock = threading.Lock()
        #: The dump running: its process, the archive it writes, and its temporary
        #: output, class list and log.
        self._dump: tuple[subprocess.Popen[bytes], Path, Path, Path, Path] | None = None
        self._dump_started = 0.0

    def key(self, app_home: str, class_path: str, options: Sequence[str]) -> str:
        """A hash of what an archive is valid with: this Java and Spark, and a
        launch's SPARK_HOME (its jars' paths), extra class path and JVM options."""
        java = Path(os.path.realpath(self.java))
        parts = [str(java), self._stamp(java),
                 self._stamp(java.parent.parent / "lib" / "modules"),
                 str(self.spark_home), app_home, class_path, *options]
        try:
            with os.scandir(self.spark_home / "jars") as entries:
                jars = sorted((e.name, e.stat()) for e in entries)
        except OSError:
            jars = []
        parts.extend(f"{name}:{st.st_size}:{st.st_mtime_ns}" for name, st in jars)
        return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:20]

    @staticmethod
    def _stamp(path: Path) -> str:
        try:
            st = path.stat()
        except OSError:
            return "-"
        return f"{st.st_size}:{st.st_mtime_ns}"

    def archive(self, key: str) -> Path:
        return self.directory / f"driver-{key}.jsa"

    def options(self, key: str, record: bool) -> tuple[list[str], Path | None, Path | None]:
        """The JVM options of a launch: ``(options, archive it maps, class list it
        writes)``. It maps the archive if there is one, else lists its classes if
        ``record``, else neither."""
        archive = self.archive(key)
        if archive.is_file():
            return [f"-XX:SharedArchiveFile={archive}"], archive, None
        if not record:
            return [], None, None
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            log.warning("spark_class_archive_unavailable", directory=str(self.directory),
                        error=str(exc))
            return [], None, None
        classes = self.directory / f"driver-{key}.{uuid.uuid4().hex[:12]}.classes"
        return [f"-XX:DumpLoadedClassList={classes}"], None, classes

    @property
    def dumping(self) -> bool:
        with self._lock:
            return self._dump is not None

    def dump(self, classes: Path, argv: Sequence[str]) -> bool:
        """Start dumping the classes listed so far in ``classes`` into the archive that
        list is for, in the background, with the java, class path and heap of the JVM
        writing it (its command line ``argv``). The list is deleted. True if a dump
        started.

        The dump renames its output to the archive's name itself when the JVM making
        it succeeds, so a daemon stopping in between leaves no half-made archive
        behind (:meth:`close` stops the dump).
        """
        archive = self.directory / (classes.name.split(".", 1)[0] + ".jsa")
        try:
            text = classes.read_bytes()
        except OSError:
            return False
        finally:
            _unlink(classes)         # the JVM writes on to the unlinked file, unread
        class_path, options = _jvm_launch(argv)
        if not argv or not class_path or not text.strip() or archive.exists():
            return False
        listed, output, log_path = (self.directory / f".{classes.stem}.{suffix}"
                                    for suffix in ("classlist", "jsa-tmp", "log"))
        nice = shutil.which("nice")
        command = [*([nice, "-n", "19"] if nice else []), argv[0], *options,
                   "-Xshare:dump", f"-XX:SharedClassListFile={listed}",
                   f"-XX:SharedArchiveFile={output}", "-cp", class_path]
        with self._lock:
            if self._dump is not None:
                return False
            try:
                listed.write_bytes(text[:text.rfind(b"\n") + 1])   # whole lines only
                self._write_owner(archive)
                with open(log_path, "wb") as out:
                    process = subprocess.Popen(
                        ["sh", "-c", _DUMP_SCRIPT, "sh", *command],
                        env={**os.environ, "CDS_OUTPUT": str(output),
                             "CDS_ARCHIVE": str(archive)},
                        stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                        start_new_session=True, close_fds=True)
            except OSError as exc:
                log.warning("spark_class_archive_dump_failed", error=str(exc))
                _unlink(listed)
                return False
            self._dump = (process, archive, output, listed, log_path)
            self._dump_started = time.monotonic()
        log.info("spark_class_archive_dumping", archive=str(archive), pid=process.pid)
        return True

    def poll(self) -> None:
        """Reap a dump that has ended; kill one running longer than
        :data:`CDS_DUMP_TIMEOUT_SECS`."""
        with self._lock:
            if self._dump is None:
                return
            process, archive, output, listed, log_path = self._dump
            code = process.poll()
            if code is None:
                if time.monotonic() - self._dump_started < CDS_DUMP_TIMEOUT_SECS:
                    return
                _kill_group(process)
                code = process.returncode
            self._dump = None
        for path in (listed, output):
            _unlink(path)
        if code == 0 and archive.is_file():
            _unlink(log_path)
            log.info("spark_class_archive_made", archive=str(archive))
        else:
            _unlink(archive.with_suffix(".json"))
            log.warning("spark_class_archive_dump_failed", exit=_exit_text(code),
                        log=str(log_path))

    def close(self) -> None:
        """Stop a dump in progress (the archive is made again later)."""
        with self._lock:
            dump, self._dump = self._dump, None
        if dump is not None:
            process, archive, output, listed, log_path = dump
            _kill_group(process)
            for path in (output, listed, log_path):
                _unlink(path)
            if not archive.is_file():
                _unlink(archive.with_suffix(".json"))

    def _write_owner(self, archive: Path) -> None:
        """Note beside ``archive`` the installation it is for, so :meth:`tidy` can
        tell when that is gone."""
        note = archive.with_suffix(".json")
        tmp = note.with_name(f".{note.name}.tmp")
        tmp.write_text(json.dumps({"spark_home": str(self.spark_home),
                                   "java": str(self.java)}))
        os.replace(tmp, note)

    def tidy(self, now: float | None = None) -> list[Path]:
        """Delete what no launch can use any more, and return it: archives (with their
        notes) of a Spark home or java that no longer exists (a deleted virtualenv: each
        archive is ~200 MB), and class lists older than :data:`STALE_CLASS_LIST_SECS`
        (a daemon killed while its launch listed classes). Archives of installations
        still there are kept, whatever their age."""
        now = time.time() if now is None else now
        gone: list[Path] = []
        try:
            entries = list(os.scandir(self.directory))
        except OSError:
            return gone
        for entry in entries:
            path = Path(entry.path)
            if entry.name.startswith("driver-") and entry.name.endswith(".json"):
                try:
                    owner = json.loads(path.read_text())
                    paths = [Path(owner["spark_home"]), Path(owner["java"])]
                except (OSError, ValueError, KeyError, TypeError):
                    continue
                if not all(p.exists() for p in paths):
                    for stale in (path.with_suffix(".jsa"), path):
                        if _unlink(stale):
                            gone.append(stale)
            elif entry.name.endswith(".classes"):
                try:
                    old = now - entry.stat().st_mtime > STALE_CLASS_LIST_SECS
                except OSError:
                    continue
                if old and _unlink(path):
                    gone.append(path)
        if gone:
            log.info("spark_class_archives_tidied", removed=[str(p) for p in gone])
        return gone

    @staticmethod
    def discard(archive: Path) -> None:
        """Delete an archive a JVM crashed with."""
        if _unlink(archive):
            log.warning("spark_class_archive_discarded", archive=str(archive),
                        reason="a JVM that mapped it crashed")


#: Runs a class archive dump (its command line in the arguments) and renames what it
#: wrote to the archive's name if it succeeded (a complete archive, or none: a
#: truncated one would crash the JVMs mapping it).
_DUMP_SCRIPT = ('if "$@"; then mv -f -- "$CDS_OUTPUT" "$CDS_ARCHIVE"; '
                'else rm -f -- "$CDS_OUTPUT"; exit 1; fi')


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL to the process group of ``process`` (a session leader), then reap it."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except OSError:
        pass
    process.wait()


def proc_cmdline(pid: int) -> list[str]:
    """The command line of process ``pid`` (empty if it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return []
    return [a.decode("utf-8", "surrogateescape") for a in raw.split(b"\0") if a]


def _jvm_launch(argv: Sequence[str]) -> tuple[str, list[str]]:
    """From a JVM's command line: its class path, and the options a class archive
    dumped for it must share (heap size, collector and compressed pointers, which
    decide the object layout an archive is made for)."""
    class_path, options = "", []
    args = iter(argv[1:])
    for arg in args:
        if arg in ("-cp", "-classpath", "--class-path"):
            class_path = next(args, "")
        elif not arg.startswith("-"):
            break                                       # the main class
        elif arg.startswith("-Xmx") or _GC_OPTION.match(arg) or _POINTERS_OPTION.match(arg):
            options.append(arg)
    return class_path, options


def _unlink(path: Path) -> bool:
    try:
        path.unlink()
    except OSError:
        return False
    return True


# --- per topology --------------------------------------------------------------------

@dataclass
class _Run:
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
    ui_port: int = 0
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
    status_key: tuple[int, int, int] | None = None
    status_cache: RunState | None = None

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
                "class_list": self.class_list}

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


class SparkLauncher:
    """Runs each topology as a Spark application (see the module docstring).

    Args:
        config: the daemon configuration (``spark_master``, ``spark_submit``,
            ``spark_master_ui``, ``restart_failed``, ``max_restarts``,
            ``stop_grace_secs``, ``data_dir``); defaults when None.
        clock: wall-clock seconds, for restart waits and reported times.
        term_grace, monitor_secs, restart_backoff: see the module constants (tests
            shorten them).
        cache_dir: where the mirror of Spark home (:func:`mirror_spark_home`) and
            the driver JVM's class archives (:class:`ClassArchive`) are kept: a
            directory, False for neither, or True (the default) for the configuration's
            ``spark_cache_dir``, whose empty default is :func:`default_cache_dir` when
            spark-submit is PySpark's own (a configured one may run another
            installation) and none otherwise.

    Raises:
        LauncherError: no spark-submit to run (PySpark or Java missing).
    """

    name = "spark"

    def __init__(self, config: NimbusConfig | None = None, *,
                 clock: Callable[[], float] = time.time,
                 term_grace: float = TERM_GRACE_SECS, monitor_secs: float = MONITOR_SECS,
                 restart_backoff: float = RESTART_BACKOFF_SECS,
                 cache_dir: bool | Path = True):
        self.config = config if config is not None else NimbusConfig()
        self.clock = clock
        self.term_grace = term_grace
        self.monitor_secs = monitor_secs
        self.restart_backoff = restart_backoff
        self.started_at = clock()
        self.spark_home = find_spark_home()
        self.version = spark_version(self.spark_home)
        if self.config.spark_submit:
            self.submit = shlex.split(self.config.spark_submit)
            if not self.submit:
                raise LauncherError("spark_submit is blank")
        else:
            self.submit = [str(self._default_submit())]
        self.cache_dir = self._cache_dir(cache_dir)
        if self.spark_home is None:
            self.cache_dir = None
        #: The SPARK_HOME of applications: the mirror, once made.
        self.app_spark_home: Path | None = None
        self._mirror_lock = threading.Lock()
        self.class_archive: ClassArchive | None = None
        java = java_binary()
        if self.cache_dir is not None and self.spark_home is not None and java is not None:
            self.class_archive = ClassArchive(self.cache_dir / CLASS_ARCHIVE_DIR,
                                              self.spark_home, java)
            # What other installations left: ~200 MB per archive of a deleted venv.
            self.class_archive.tidy()
            tidy_mirrors(self.cache_dir / MIRROR_DIR)
        self._runs: dict[str, _Run] = {}
        self._runs_lock = threading.Lock()
        self._closed = threading.Event()
        self._monitor: threading.Thread | None = None
        self._nodes_cache: tuple[float, list[WorkerNode]] | None = None

    def _default_submit(self) -> Path:
        if self.spark_home is None:
            raise LauncherError(
                f"PySpark is not installed for {sys.executable}: install it "
                "(pip install pyspark) or run topologies nowhere with --launcher none")
        submit = self.spark_home / "bin" / "spark-submit"
        if not os.access(submit, os.X_OK):
            raise LauncherError(f"{submit} is missing or not executable; reinstall PySpark "
                                "or set spark_submit to the spark-submit to use")
        java_home = os.environ.get("JAVA_HOME")
        if not (java_home and os.access(Path(java_home) / "bin" / "java", os.X_OK)) \
                and shutil.which("java") is None:
            raise LauncherError("Spark needs Java (17 or later): there is no java on PATH "
                                "and JAVA_HOME is not set")
        return submit

    # --- the Launcher protocol ------------------------------------------------------
    def launch(self, spec: LaunchSpec) -> None:
        """Start the topology's application, or adopt it if it still runs.

        Returns without waiting for Spark to start (that takes 10-60 s).

        Raises:
            LauncherError: the plan, code or process could not be set up.
        """
        run = self._run_at(spec.topology_id, spec.work_dir)
        with run.lock:
            if self._alive(run):
                run.dir.set_control("active" if spec.active else "paused")
                log.info("spark_app_adopted", topology=spec.topology_id, pid=run.pid)
                self._ensure_monitor()
                return
            last = run.dir.read_status() if run.pid else None
            if run.pid and not run.pending_relaunch and (
                    run.stopped or (last is not None and last.state in FINAL_STATES)):
                log.info("spark_app_not_relaunched", topology=spec.topology_id,
                         state=last.state if last else "stopped")
                return
            failure = ""
            if run.pid and not run.pending_relaunch:
                failure = self._failure(run, last)     # before the files are reset
            self._start(run, spec, reason="relaunch" if run.pid else "launch")
            if failure:
                run.last_failure = failure
                self._save(run)
        self._ensure_monitor()

    def stop(self, topology_id: str, grace: float) -> None:
        """Stop the application: ``control=stop``, up to ``grace`` seconds to exit, then
        SIGTERM and SIGKILL to every process of its session. Works for adopted ones.

        Raises:
            LauncherError: processes survived SIGKILL.
        """
        run = self._known(topology_id)
        if run is None:
            return
        with run.lock:
            run.stopped = True
            run.next_restart_at = None
            if run.dir.root.is_dir():
                run.dir.set_control("stop")
            self._terminate(run, grace)
            self._save(run)
        log.info("spark_app_stopped", topology=topology_id, pid=run.pid)
        with self._runs_lock:
            self._runs.pop(topology_id, None)

    def pause(self, topology_id: str) -> None:
        self._control(topology_id, "paused")

    def resume(self, topology_id: str) -> None:
        """Resume the spouts; an application left failed (restarts used up) is started
        again from its checkpoint, with a fresh count of restarts."""
        run = self._control(topology_id, "active")
        with run.lock:
            if run.pid and not self._alive(run) and not run.stopped:
                last = self._status_file(run)
                if last is None or last.state not in FINAL_STATES:
                    with run.fields_lock:
                        run.last_failure = self._failure(run, last)
                        run.restarts = 0
                        self._respawn(run, reason="resume")

    def rebalance(self, spec: LaunchSpec) -> None:
        """Stop the application gracefully, rewrite its spec with the new parallelism
        and start it again from the same checkpoint.

        Raises:
            LauncherError: as :meth:`launch` and :meth:`stop`.
        """
        run = self._run_at(spec.topology_id, spec.work_dir)
        with run.lock:
            run.pending_relaunch = True
            run.next_restart_at = None
            self._save(run)
            run.dir.set_control("stop")
            self._terminate(run, self.config.stop_grace_secs)
            run.restarts = 0
            run.last_failure = ""
            self._start(run, spec, reason="rebalance")
        self._ensure_monitor()

    def status(self, topology_id: str) -> RunStatus:
        """The topology's state, read from ``status.json`` (cached by its mtime) and
        whether the JVM lives. Cheap: no locks held by stop or rebalance are taken."""
        run = self._known(topology_id)
        if run is None:
            return RunStatus(state="unscheduled",
                             detail="unscheduled: the spark launcher has not launched "
                                    "this topology")
        with run.fields_lock:
            return self._status(run)

    def _status(self, run: _Run) -> RunStatus:
        if not run.pid:
            if run.launch_error:
                return RunStatus(state="failed", errors=tuple(run.errors),
                                 detail=f"failed: could not launch: {run.launch_error}")
            return RunStatus(state="unscheduled",
                             detail="unscheduled: the application has not been started")
        alive = self._alive(run)
        last = self._status_file(run)
        ui = (last.ui_url if last is not None and last.ui_url else "") or \
            (f"http://{LOCAL_HOST}:{run.ui_port}" if run.ui_port else "")
        components = {cid: ComponentStats(emitted=f.emitted, processed=f.processed,
                                          rate=f.rate, latency_ms=f.latency_ms)
                      for cid, f in (last.components if last is not None else {}).items()}
        if alive:
            state, detail = self._alive_detail(run, last, ui)
        else:
            self._note_death(run)
            state, detail = self._gone_detail(run, last)
        errors = list(run.errors)
        if alive and last is not None and last.state == "failed" and last.error:
            errors.append((last.error_component or SPARK_COMPONENT, last.error,
                           int(last.updated_at)))
        started = last.started_at if last is not None and last.started_at else \
            run.launched_at
        return RunStatus(state=state, detail=detail, started_at=started, host=LOCAL_HOST,
                         port=run.ui_port, ui_url=ui if alive else "",
                         components=components, errors=tuple(errors[-MAX_ERRORS:]))

    def nodes(self) -> list[WorkerNode]:
        """Where topologies run: this machine for a local master, the alive workers of
        a standalone master (read from its web UI's JSON, cached), else nothing."""
        master = self.config.spark_master
        threads = local_threads(master)
        if threads is not None:
            slots = os.cpu_count() or 1
            with self._runs_lock:
                runs = list(self._runs.values())
            used = sum(min(threads, max(1, run.cores)) for run in runs
                       if run.pid and not run.stopped and self._alive(run))
            host = socket.gethostname()
            return [WorkerNode(node_id=f"local-{host}", host=host,
                               started_at=self.started_at, slots=slots,
                               used_slots=min(slots, used), version=self.version)]
        url = master_ui_url(master, self.config.spark_master_ui)
        if url is None:
            return []
        now = time.monotonic()
        if self._nodes_cache is not None and now - self._nodes_cache[0] < NODES_CACHE_SECS:
            return list(self._nodes_cache[1])
        nodes = self._cluster_nodes(url)
        self._nodes_cache = (now, nodes)
        return list(nodes)

    def close(self) -> None:
        """Stop the monitor thread. Applications keep running: a restarted daemon adopts
        them."""
        self._closed.set()
        monitor = self._monitor
        if monitor is not None and monitor is not threading.current_thread():
            monitor.join(10)
        if self.class_archive is not None:
            self.class_archive.close()

    # --- monitoring -----------------------------------------------------------------
    def check(self) -> None:
        """One pass of the monitor: notice dead applications and relaunch failed ones
        when it is time (the monitor thread calls this every ``monitor_secs``)."""
        if self.class_archive is not None:
            self.class_archive.poll()
        with self._runs_lock:
            runs = list(self._runs.values())
        for run in runs:
            if not run.lock.acquire(blocking=False):
                continue            # being stopped, rebalanced or launched right now
            try:
                self._check_run(run)
            except Exception as exc:  # noqa: BLE001 - the monitor must keep going
                log.error("spark_monitor_failed", topology=run.topology_id,
                          error=str(exc), exc_info=exc)
            finally:
                run.lock.release()

    def _check_run(self, run: _Run) -> None:
        if not run.pid or run.stopped or run.pending_relaunch:
            return
        now = self.clock()
        if self._alive(run):
            self._dump_class_archive(run)
            if run.restarts and now - run.launched_at > RESTART_RESET_SECS:
                last = self._status_file(run)
                if last is not None and last.state == "running":
                    run.restarts = 0
                    self._save(run)
            return
        self._note_death(run)
        last = self._status_file(run)
        if not self._restartable(run, last):
            return
        if run.next_restart_at is None:
            run.next_restart_at = (run.died_at or now) + self._backoff(run.restarts)
        if now >= run.next_restart_at:
            with run.fields_lock:           # status() sees the count and the new process
                run.last_failure = self._failure(run, last)
                run.restarts += 1
                self._respawn(run, reason="restart")

    def _dump_class_archive(self, run: _Run) -> None:
        """Once an application listing its classes has run a batch (so the list holds
        what starting one loads), dump them into the class archive."""
        if not run.class_list or self.class_archive is None:
            return
        last = self._status_file(run)
        if last is None or last.batch_id < 1 or last.state not in ("running", "paused"):
            return
        classes, run.class_list = Path(run.class_list), ""
        self.class_archive.dump(classes, proc_cmdline(run.pid))
        self._save(run)

    def _restartable(self, run: _Run, last: RunState | None) -> bool:
        return (self.config.restart_failed and not run.stopped
                and run.restarts < self.config.max_restarts
                and (last is None or last.state not in FINAL_STATES)
                and run.dir.control_state() != "stop")

    def _backoff(self, restarts: int) -> float:
        return min(RESTART_BACKOFF_MAX_SECS, self.restart_backoff * 4 ** restarts)

    def _ensure_monitor(self) -> None:
        if self._monitor is not None or self._closed.is_set():
            return
        self._monitor = threading.Thread(target=self._monitor_loop, daemon=True,
                                         name="spark-launcher-monitor")
        self._monitor.start()

    def _monitor_loop(self) -> None:
        while not self._closed.wait(self.monitor_secs):
            self.check()

    # --- processes ------------------------------------------------------------------
    def _run_at(self, topology_id: str, work_dir: Path) -> _Run:
        """The record of a topology whose work directory is ``work_dir``."""
        run = self._record(topology_id, Path(work_dir))
        assert run is not None
        return run

    def _known(self, topology_id: str) -> _Run | None:
        """The record of a topology launched by this launcher or, after a daemon
        restart, by an earlier one (its ``launch.json`` in the daemon's
        ``topologies/<id>``); None if there is none."""
        return self._record(topology_id, None)

    def _record(self, topology_id: str, work_dir: Path | None) -> _Run | None:
        with self._runs_lock:
            run = self._runs.get(topology_id)
            if run is not None:
                if work_dir is not None and work_dir != run.dir.root:
                    run.dir = RunDir(work_dir)
                return run
            root = work_dir if work_dir is not None else \
                self.config.data_dir / "topologies" / topology_id
            if work_dir is None and not (root / "launch.json").exists():
                return None
            run = _Run(topology_id, RunDir(root))
            try:
                run.load(json.loads(run.dir.launch.read_text()))
            except FileNotFoundError:
                pass
            except (OSError, ValueError, TypeError) as exc:
                log.warning("spark_launch_record_unreadable", topology=topology_id,
                            error=str(exc))
            if work_dir is not None or not run.stopped:
                # A stopped one is only being looked at (its directory is removed next).
                self._runs[topology_id] = run
            return run

    def _save(self, run: _Run) -> None:
        if run.dir.root.is_dir():
            write_atomic(run.dir.launch, json.dumps(run.record(), indent=1))

    def _alive(self, run: _Run) -> bool:
        """True while the JVM (the recorded pid with the recorded start time) lives."""
        if not run.pid:
            return False
        if run.popen is not None:
            code = run.popen.poll()
            if code is not None:
                run.exit_code = code
                return False
            return True
        info = proc_info(run.pid)
        return info is not None and info.live and info.start_ticks == run.start_ticks

    def _note_death(self, run: _Run) -> None:
        """Record, once, that the JVM is gone, and the failure if it was one (an exit
        the launcher asked for is not)."""
        with run.fields_lock:
            if run.died_at is not None or not run.pid:
                return
            died_at = self.clock()
            last = self._status_file(run)
            asked = run.stopped or run.pending_relaunch or run.dir.control_state() == "stop"
            if not asked and (last is None or last.state not in FINAL_STATES):
                component = (last.error_component
                             if last is not None and last.error_component
                             else SPARK_COMPONENT)
                message = self._failure(run, last)
                run.errors = [*run.errors, (component, message, int(died_at))][-MAX_ERRORS:]
            run.died_at = died_at
            self._class_archive_done(run)
        log.info("spark_app_exited", topology=run.topology_id, pid=run.pid,
                 exit=_exit_text(run.exit_code), state=last.state if last else None)
        try:
            self._save(run)
        except OSError:
            pass

    def _start(self, run: _Run, spec: LaunchSpec, reason: str) -> None:
        """Write the work directory for ``spec`` and start the application."""
        try:
            plan = check_topology(spec.topology, spec.conf, None)
            run_spec = from_plan(spec.topology_id, spec.name, plan, spec.executors)
            rd = run.dir
            rd.root.mkdir(parents=True, exist_ok=True)
            run_spec.write(rd.spec)
            zip_copy = rd.root / "code.zip"
            if not rd.code.is_dir() or not zip_copy.is_file():
                extract_code(spec.code_path, rd.code)
                tmp = zip_copy.with_name(".code.zip.tmp")
                shutil.copyfile(spec.code_path, tmp)
                os.replace(tmp, zip_copy)
            rd.set_control("active" if spec.active else "paused")
        except (InvalidTopology, OSError, ValueError) as exc:
            run.launch_error = f"{type(exc).__name__}: {exc}"
            raise LauncherError(f"cannot prepare {run.dir.root}: {exc}") from None
        except LauncherError as exc:
            run.launch_error = str(exc)
            raise
        run.num_workers = spec.num_workers
        self._spawn(run, run_spec, reason)

    def _respawn(self, run: _Run, reason: str) -> None:
        """Start the application again from the files already in the work directory."""
        try:
            run_spec = RunSpec.read(run.dir.spec)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            run.launch_error = f"cannot read {run.dir.spec}: {exc}"
            self._save(run)
            log.error("spark_relaunch_failed", topology=run.topology_id,
                      error=run.launch_error)
            return
        self._spawn(run, run_spec, reason)

    def _spawn(self, run: _Run, run_spec: RunSpec, reason: str) -> None:
        rd = run.dir
        if not self.config.spark_submit and not SPARK_MAIN.is_file():
            run.launch_error = f"the runner {SPARK_MAIN} is missing"
            raise LauncherError(f"the runner {SPARK_MAIN} is missing from this installation")
        ui_port = free_port()
        self._class_archive_done(run)               # what the last launch recorded
        archive_options, archive, class_list = self._class_archive_options(run, run_spec)
        command = self.command(run_spec, rd.root, ui_port, run.num_workers,
                               archive=archive_options)
        rd.logs.mkdir(parents=True, exist_ok=True)
        # A new status.json comes from the new driver; an old one would be read as its.
        try:
            rd.status.unlink()
        except FileNotFoundError:
            pass
        out = self._log_file(rd.logs / "stdout")
        err = self._log_file(rd.logs / "stderr")
        try:
            now = self.clock()
            banner = (f"{BANNER}{reason} at "
                      f"{datetime.fromtimestamp(now, timezone.utc).isoformat()}: "
                      f"{shlex.join(command)}\n").encode()
            err.write(banner)
            err.flush()
            popen = subprocess.Popen(
                command, env=self.environment(rd.root), cwd=rd.root,
                stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True,
                close_fds=True)
        except OSError as exc:
            run.launch_error = f"cannot run {command[0]}: {exc.strerror or exc}"
            raise LauncherError(run.launch_error) from None
        finally:
            out.close()
            err.close()
        info = proc_info(popen.pid)
        with run.fields_lock:
            run.popen = popen
            run.pid = popen.pid
            run.start_ticks = info.start_ticks if info is not None else 0
            run.ui_port = ui_port
            run.command = command
            run.launched_at = now
            run.cores = max([c.parallelism for c in run_spec.components.values()] or [1])
            run.spouts = tuple(cid for cid, c in run_spec.components.items()
                               if c.kind == "spout")
            run.exit_code = None
            run.died_at = None
            run.next_restart_at = None
            run.stopped = False
            run.pending_relaunch = False
            run.launch_error = ""
            run.status_key = None
            run.status_cache = None
            run.class_archive = str(archive or "")
            run.class_list = str(class_list or "")
        self._save(run)
        log.info("spark_app_launched", topology=run.topology_id, pid=popen.pid,
                 reason=reason, ui_port=ui_port, master=self.config.spark_master)

    @staticmethod
    def _log_file(path: Path) -> IO[bytes]:
        try:
            if path.stat().st_size > LOG_ROTATE_BYTES:
                os.replace(path, path.with_name(path.name + ".1"))
        except FileNotFoundError:
            pass
        return open(path, "ab")

    def command(self, run_spec: RunSpec, work_dir: Path, ui_port: int,
                num_workers: int, *, archive: Sequence[str] = ()) -> list[str]:
        """The spark-submit command line of one topology.

        Topology configuration keys starting with ``spark.`` are passed as ``--conf``
        (they override the launcher's, except ``spark.ui.port``). On a ``spark://``
        master the application takes as many cores as its most parallel component
        (``spark.cores.max``), in ``topology.workers`` executors, unless the topology
        sets those confs itself. The driver JVM's options (:func:`driver_java_options`,
        with the class archive's ``archive``) are ``spark.driver.defaultJavaOptions``.
        """
        confs: dict[str, str] = {
            "spark.ui.port": str(ui_port),
            "spark.driver.host": LOCAL_HOST,
            "spark.driver.bindAddress": LOCAL_HOST,
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.streaming.metricsEnabled": "true",
        }
        user = self._user_confs(run_spec)
        java_options = driver_java_options(self._java_tokens(user), archive)
        if java_options:
            confs[DEFAULT_JAVA_OPTIONS] = shlex.join(java_options)
        if self.config.spark_master.startswith("spark://"):
            cores_max = user.get("spark.cores.max") or str(
                max([c.parallelism for c in run_spec.components.values()] or [1]))
            confs["spark.cores.max"] = cores_max
            if "spark.executor.cores" not in user and cores_max.isdigit():
                workers = max(1, num_workers)
                confs["spark.executor.cores"] = str(max(1, math.ceil(int(cores_max)
                                                                     / workers)))
        confs.update(user)
        args = [*self.submit, "--master", self.config.spark_master,
                "--name", f"topology-{run_spec.name}"]
        for key, value in confs.items():
            args += ["--conf", f"{key}={value}"]
        return [*args, "--py-files", str(work_dir / "code.zip"), str(SPARK_MAIN),
                "--workdir", str(work_dir)]

    def _cache_dir(self, given: bool | Path) -> Path | None:
        """The cache directory (see ``cache_dir`` in the class docstring)."""
        if isinstance(given, Path):
            return given
        setting = self.config.spark_cache_dir
        if not given or setting == "off":
            return None
        if setting:
            return Path(setting).expanduser()
        return None if self.config.spark_submit else default_cache_dir()

    @staticmethod
    def _user_confs(run_spec: RunSpec | Mapping[str, Any]) -> dict[str, str]:
        """The topology's ``spark.*`` settings the launcher passes on (from its spec or
        its configuration)."""
        conf = run_spec.conf if isinstance(run_spec, RunSpec) else run_spec
        return {k: v for k, v in ((k, _conf_value(v)) for k, v in conf.items()
                                  if isinstance(k, str) and k.startswith("spark."))
                if v is not None and k not in RESERVED_CONFS}

    @staticmethod
    def _java_tokens(user: Mapping[str, str]) -> list[str]:
        """The driver JVM options that are not the launcher's: the topology's
        ``spark.driver.extraJavaOptions`` and the ``java`` launcher's variables."""
        texts = [user.get(EXTRA_JAVA_OPTIONS, "")]
        texts += [os.environ.get(name, "") for name in JAVA_OPTION_VARIABLES]
        return [token for text in texts for token in _option_tokens(text)]

    def _class_archive_options(self, run: _Run, run_spec: RunSpec
                               ) -> tuple[list[str], Path | None, Path | None]:
        """``(options, archive mapped, class list written)`` of the next launch of
        ``run`` (:class:`ClassArchive`): none when the topology sets the driver's
        default options or class data sharing options of its own."""
        key = self._archive_key(self._user_confs(run_spec))
        if self.class_archive is None or key is None:
            return [], None, None
        with self._runs_lock:
            others = [r for r in self._runs.values() if r is not run]
        listing = self.class_archive.dumping or any(r.class_list and self._alive(r)
                                                    for r in others)
        return self.class_archive.options(key, record=not listing)

    def _archive_key(self, user: Mapping[str, str]) -> str | None:
        """The key of the class archive a launch with the topology's ``spark.*`` confs
        ``user`` maps, or None when it gets none (no cache, or the topology sets the
        driver's default options or class data sharing options of its own)."""
        tokens = self._java_tokens(user)
        if self.class_archive is None or DEFAULT_JAVA_OPTIONS in user \
                or any(_CDS_OPTION.match(token) for token in tokens):
            return None
        # What decides the layout of objects an archive holds (not, say, -D options).
        layout = [*[t for t in tokens if t.startswith("-Xmx") or _GC_OPTION.match(t)
                    or _POINTERS_OPTION.match(t)], user.get("spark.driver.memory", "")]
        return self.class_archive.key(str(self._spark_home()),
                                      user.get("spark.driver.extraClassPath", ""), layout)

    def class_archive_for(self, conf: Mapping[str, Any]) -> Path | None:
        """The class archive (made or yet to be made) a topology with configuration
        ``conf`` would map, or None when it would get none."""
        key = self._archive_key(self._user_confs(conf))
        return None if self.class_archive is None or key is None \
            else self.class_archive.archive(key)

    def _class_archive_done(self, run: _Run) -> None:
        """``run``'s JVM is gone: delete its class list, and the archive it mapped if
        it crashed."""
        if run.class_list:
            _unlink(Path(run.class_list))
        elif run.class_archive and run.exit_code != 0 and any(
                JVM_CRASH in line for line in _launch_stderr(run.dir.logs / "stderr")):
            ClassArchive.discard(Path(run.class_archive))
        run.class_list = ""
        run.class_archive = ""

    def _spark_home(self) -> Path | None:
        """The application's SPARK_HOME: the mirror of PySpark's directory
        (:func:`mirror_spark_home`) in the cache directory, or without one PySpark's
        directory itself."""
        if self.spark_home is None or self.cache_dir is None:
            return self.spark_home
        with self._mirror_lock:
            if self.app_spark_home is None:
                try:
                    self.app_spark_home = mirror_spark_home(self.spark_home,
                                                            self.cache_dir / MIRROR_DIR)
                except OSError as exc:
                    log.warning("spark_home_mirror_failed", error=str(exc),
                                spark_home=str(self.spark_home))
                    return self.spark_home      # and try again at the next launch
            return self.app_spark_home

    def environment(self, work_dir: Path) -> dict[str, str]:
        """The application's environment: this Python for the driver and workers, this
        PySpark as SPARK_HOME (its mirror: :meth:`_spark_home`), loopback, and the
        topology's code on PYTHONPATH (the driver-side Python data source runner does
        not see ``--py-files``)."""
        env = dict(os.environ)
        env["PYSPARK_PYTHON"] = sys.executable
        env["PYSPARK_DRIVER_PYTHON"] = sys.executable
        env["SPARK_LOCAL_IP"] = LOCAL_HOST
        home = self._spark_home()
        if home is not None:
            env["SPARK_HOME"] = str(home)
        path = [str(work_dir / "code"), str(PACKAGE_ROOT)]
        if env.get("PYTHONPATH"):
            path.append(env["PYTHONPATH"])
        env["PYTHONPATH"] = os.pathsep.join(path)
        return env

    def _terminate(self, run: _Run, grace: float) -> None:
        """Wait up to ``grace`` for the session to exit, then SIGTERM, then SIGKILL.

        Raises:
            LauncherError: processes survived SIGKILL.
        """
        if not run.pid:
            return
        if self._wait_gone(run, grace):
            return
        log.info("spark_app_terminating", topology=run.topology_id, pid=run.pid,
                 signal="SIGTERM")
        self._signal(run, signal.SIGTERM)
        if self._wait_gone(run, self.term_grace):
            return
        log.warning("spark_app_killing", topology=run.topology_id, pid=run.pid,
                    signal="SIGKILL")
        self._signal(run, signal.SIGKILL)
        if not self._wait_gone(run, KILL_WAIT_SECS):
            left = [p.pid for p in session_members(run.pid, run.start_ticks)]
            raise LauncherError(f"processes {left} of topology {run.topology_id} "
                                "survived SIGKILL")

    def _signal(self, run: _Run, sig: signal.Signals) -> None:
        try:
            os.killpg(run.pid, sig)
        except OSError:
            pass
        # pyspark.daemon puts itself in a process group of its own, in the same session.
        for proc in session_members(run.pid, run.start_ticks):
            try:
                os.kill(proc.pid, sig)
            except OSError:
                pass

    def _wait_gone(self, run: _Run, timeout: float) -> bool:
        """Poll until no process of the session lives (reaping our child)."""
        deadline = time.monotonic() + max(0.0, timeout)
        pause = threading.Event()
        while True:
            self._alive(run)
            if not session_members(run.pid, run.start_ticks):
                if run.popen is not None and run.popen.returncode is None:
                    try:                        # a zombie now: reap it, for its exit code
                        run.exit_code = run.popen.wait(KILL_WAIT_SECS)
                    except subprocess.TimeoutExpired:
                        pass
                self._note_death(run)
                return True
            if time.monotonic() >= deadline:
                return False
            pause.wait(0.05)

    def _control(self, topology_id: str, state: str) -> _Run:
        run = self._known(topology_id)
        if run is None:
            raise LauncherError(f"topology {topology_id} was never launched here")
        run.dir.set_control(state)
        return run

    # --- status ---------------------------------------------------------------------
    def _status_file(self, run: _Run) -> RunState | None:
        try:
            st = os.stat(run.dir.status)
        except OSError:
            run.status_key = None
            run.status_cache = None
            return None
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
        if key != run.status_key:
            run.status_cache = run.dir.read_status()
            run.status_key = key
        return run.status_cache

    def _alive_detail(self, run: _Run, last: RunState | None, ui: str) -> tuple[str, str]:
        ui_text = f", Spark UI {ui}" if ui else ""
        suffix = ""
        if run.last_failure:
            failure = _shorten(run.last_failure, 500)
            suffix = (f"; relaunched from the checkpoint after a failure ({run.restarts} of "
                      f"{self.config.max_restarts}): {failure}" if run.restarts else
                      f"; relaunched from the checkpoint after: {failure}")
        control = run.dir.control_state()
        if last is None:
            if control == "stop":
                return "stopping", f"stopping: asked to stop (pid {run.pid})"
            # No clock in it: a detail that changes only with the state reads well in
            # ``submit --wait``, which prints each new one.
            return "starting", (f"starting: waiting for the Spark application (pid "
                                f"{run.pid}){suffix}")
        state = last.state
        if state == "starting":
            app = f" {last.app_id}" if last.app_id else ""
            return "starting", (f"starting: Spark application{app} is up, waiting for "
                                f"the first batch{ui_text}{suffix}")
        if state in ("running", "paused"):
            batch = f"batch {last.batch_id}" if last.batch_id >= 0 else "no batch yet"
            if state == "running":
                return "running", (f"running: {batch}, {_rate(self._tuple_rate(run, last))}"
                                   f" tuples/s{ui_text}{suffix}")
            return "paused", (f"paused: spouts stopped, {batch}{ui_text}{suffix}")
        if state == "stopping":
            return "stopping", f"stopping: the Spark application is stopping (pid {run.pid})"
        if state == "failed":
            error = self._error_text(last)
            return "failed", f"failed: {error} (the application is exiting; see " \
                             f"{run.dir.logs / 'stderr'})"
        if state == "finished":
            return self._gone_detail(run, last)
        if state == "stopped":
            return "stopped", f"stopped: the Spark application stopped (pid {run.pid} exiting)"
        return state or "unknown", f"{state or 'unknown'}: pid {run.pid}{ui_text}"

    def _gone_detail(self, run: _Run, last: RunState | None) -> tuple[str, str]:
        if last is not None and last.state == "finished":
            batch = f" after batch {last.batch_id}" if last.batch_id >= 0 else ""
            return "finished", f"finished: the bounded run completed{batch}"
        if last is not None and last.state == "stopped":
            return "stopped", (f"stopped: the Spark application stopped "
                               f"({_exit_text(run.exit_code)})")
        if run.stopped:
            return "stopped", (f"stopped: the Spark application was stopped "
                               f"({_exit_text(run.exit_code)})")
        if run.pending_relaunch:
            if run.launch_error:
                return "failed", f"failed: could not relaunch: {run.launch_error}"
            return "stopped", "stopped: being relaunched with the new parallelism"
        detail = "failed: " + self._failure(run, last)
        if self._restartable(run, last):
            when = ""
            if run.next_restart_at is not None:
                when = f" in {max(0, math.ceil(run.next_restart_at - self.clock()))} s"
            detail += (f"; relaunching from the checkpoint{when} (restart "
                       f"{run.restarts + 1} of {self.config.max_restarts})")
        elif self.config.restart_failed and run.restarts >= self.config.max_restarts \
                and run.restarts:
            detail += (f"; gave up after {run.restarts} restarts (deactivate and "
                       "activate the topology to try again)")
        return "failed", detail

    def _failure(self, run: _Run, last: RunState | None) -> str:
        """Why an application is gone: its driver's error, or the last line of its
        stderr when it exited without a final status; with the exit code."""
        stderr = run.dir.logs / "stderr"
        where = f"{_exit_text(run.exit_code)}; see {stderr}"
        if last is not None and last.state == "failed":
            return f"{self._error_text(last)} ({where})"
        line = last_stderr_line(stderr)
        said = f" ({last.state})" if last is not None else ""
        what = f": {line}" if line else ""
        return f"the Spark application exited without a final status{said}{what} ({where})"

    @staticmethod
    def _error_text(last: RunState) -> str:
        error = _shorten(last.error or "the driver reported a failure", 500)
        if last.error_component and last.error_component not in error:
            error = f"component {last.error_component!r}: {error}"
        return error

    @staticmethod
    def _tuple_rate(run: _Run, last: RunState) -> float:
        """Tuples per second entering the topology (its spouts' rate), else the
        busiest component's."""
        spouts = [f.rate for cid, f in last.components.items() if cid in run.spouts]
        if spouts:
            return sum(spouts)
        return max([f.rate for f in last.components.values()] or [0.0])

    # --- cluster --------------------------------------------------------------------
    def _cluster_nodes(self, url: str) -> list[WorkerNode]:
        try:
            with urllib.request.urlopen(url, timeout=MASTER_TIMEOUT_SECS) as reply:
                data = json.loads(reply.read(4 << 20))
        except (OSError, ValueError, urllib.error.URLError) as exc:
            log.warning("spark_master_unreachable", url=url, error=str(exc))
            return []
        nodes = []
        for worker in data.get("workers") or [] if isinstance(data, dict) else []:
            if not isinstance(worker, dict) or worker.get("state", "ALIVE") != "ALIVE":
                continue
            worker_id = str(worker.get("id") or f"{worker.get('host')}:{worker.get('port')}")
            nodes.append(WorkerNode(
                node_id=worker_id, host=str(worker.get("host") or ""),
                started_at=_worker_started(worker_id, self.clock()),
                slots=int(worker.get("cores") or 0),
                used_slots=int(worker.get("coresused") or 0), version=self.version))
        return nodes


def _worker_started(worker_id: str, default: float) -> float:
    """A standalone worker's id is ``worker-<yyyyMMddHHmmss>-<host>-<port>``, in the
    worker's local time; the master's JSON has no start time otherwise."""
    match = re.match(r"worker-(\d{14})-", worker_id)
    if match is None:
        return default
    try:
        return datetime.strptime(match.group(1), "%Y%m%d%H%M%S").timestamp()
    except ValueError:
        return default
