"""The driver JVM's class data sharing archive (:class:`ClassArchive`), and the driver
JVM options it goes with: the launcher's own (``spark.driver.defaultJavaOptions``)
and those of the topology and the environment, which may rule an archive out or
decide which one a launch maps.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Mapping, Sequence

import structlog

from .proctree import exit_text, kill_group

log = structlog.get_logger(__name__)

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


def option_tokens(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:                  # unbalanced quotes: the JVM will say so
        return text.split()


def driver_java_options(user: Sequence[str], archive: Sequence[str] = ()) -> list[str]:
    """The launcher's options for the driver JVM (``spark.driver.defaultJavaOptions``):
    the class archive's (:class:`ClassArchive`), unless ``user`` (the topology's and the
    environment's options) sets class data sharing options of its own."""
    return [] if any(_CDS_OPTION.match(token) for token in user) else list(archive)


def java_tokens(user: Mapping[str, str]) -> list[str]:
    """The driver JVM options that are not the launcher's: the topology's
    ``spark.driver.extraJavaOptions`` and the ``java`` launcher's variables."""
    texts = [user.get(EXTRA_JAVA_OPTIONS, "")]
    texts += [os.environ.get(name, "") for name in JAVA_OPTION_VARIABLES]
    return [token for text in texts for token in option_tokens(text)]


def archive_layout(user: Mapping[str, str]) -> list[str] | None:
    """What decides the class archive a launch with the topology's ``spark.*`` confs
    ``user`` maps, besides the installation (the ``options`` of :meth:`ClassArchive.key`),
    or None when it gets none: the topology sets the driver's default options or class
    data sharing options of its own."""
    tokens = java_tokens(user)
    if DEFAULT_JAVA_OPTIONS in user or any(_CDS_OPTION.match(token) for token in tokens):
        return None
    # What decides the layout of objects an archive holds (not, say, -D options).
    return [*[t for t in tokens if t.startswith("-Xmx") or _GC_OPTION.match(t)
              or _POINTERS_OPTION.match(t)], user.get("spark.driver.memory", "")]


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
            unlink(classes)         # the JVM writes on to the unlinked file, unread
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
                unlink(listed)
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
                kill_group(process)
                code = process.returncode
            self._dump = None
        for path in (listed, output):
            unlink(path)
        if code == 0 and archive.is_file():
            unlink(log_path)
            log.info("spark_class_archive_made", archive=str(archive))
        else:
            unlink(archive.with_suffix(".json"))
            log.warning("spark_class_archive_dump_failed", exit=exit_text(code),
                        log=str(log_path))

    def close(self) -> None:
        """Stop a dump in progress (the archive is made again later)."""
        with self._lock:
            dump, self._dump = self._dump, None
        if dump is not None:
            process, archive, output, listed, log_path = dump
            kill_group(process)
            for path in (output, listed, log_path):
                unlink(path)
            if not archive.is_file():
                unlink(archive.with_suffix(".json"))

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
                        if unlink(stale):
                            gone.append(stale)
            elif entry.name.endswith(".classes"):
                try:
                    old = now - entry.stat().st_mtime > STALE_CLASS_LIST_SECS
                except OSError:
                    continue
                if old and unlink(path):
                    gone.append(path)
        if gone:
            log.info("spark_class_archives_tidied", removed=[str(p) for p in gone])
        return gone

    @staticmethod
    def discard(archive: Path) -> None:
        """Delete an archive a JVM crashed with."""
        if unlink(archive):
            log.warning("spark_class_archive_discarded", archive=str(archive),
                        reason="a JVM that mapped it crashed")


#: Runs a class archive dump (its command line in the arguments) and renames what it
#: wrote to the archive's name if it succeeded (a complete archive, or none: a
#: truncated one would crash the JVMs mapping it).
_DUMP_SCRIPT = ('if "$@"; then mv -f -- "$CDS_OUTPUT" "$CDS_ARCHIVE"; '
                'else rm -f -- "$CDS_OUTPUT"; exit 1; fi')


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


def unlink(path: Path) -> bool:
    try:
        path.unlink()
    except OSError:
        return False
    return True

