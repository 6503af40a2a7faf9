"""Finding Spark and Java, and the cache of what is made once per installation.

The launcher runs PySpark's own ``bin/spark-submit`` (found without importing PySpark)
on the ``java`` of ``JAVA_HOME`` or ``PATH``. The application's SPARK_HOME is a mirror
of PySpark's directory without its zipped Python code (:func:`mirror_spark_home`), kept
with the driver JVM's class archives (:mod:`.archive`) in a cache directory of the
user (:func:`default_cache_dir`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import sys
import uuid
from pathlib import Path

from ..config import NimbusConfig
from ..launcher import LauncherError

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


def default_submit(spark_home: Path | None) -> Path:
    """PySpark's spark-submit, once it is known to run: PySpark and Java are there.

    Raises:
        LauncherError: PySpark, its spark-submit or Java is missing.
    """
    if spark_home is None:
        raise LauncherError(
            f"PySpark is not installed for {sys.executable}: install the spark extra "
            "(pip install 'nimbus-thrift[spark]') or run topologies nowhere with "
            "--launcher none")
    submit = spark_home / "bin" / "spark-submit"
    if not os.access(submit, os.X_OK):
        raise LauncherError(f"{submit} is missing or not executable; reinstall PySpark "
                            "or set spark_submit to the spark-submit to use")
    java_home = os.environ.get("JAVA_HOME")
    if not (java_home and os.access(Path(java_home) / "bin" / "java", os.X_OK)) \
            and shutil.which("java") is None:
        raise LauncherError("Spark needs Java (17 or later): there is no java on PATH "
                            "and JAVA_HOME is not set")
    return submit


def java_binary() -> Path | None:
    """The java spark-submit runs (``$JAVA_HOME/bin/java``, else ``java`` on PATH)."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and os.access(Path(java_home) / "bin" / "java", os.X_OK):
        return Path(java_home) / "bin" / "java"
    found = shutil.which("java")
    return Path(found) if found else None


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


def resolve_cache_dir(config: NimbusConfig, given: bool | Path) -> Path | None:
    """The cache directory (see ``cache_dir`` of :class:`.launcher.SparkLauncher`)."""
    if isinstance(given, Path):
        return given
    setting = config.spark_cache_dir
    if not given or setting == "off":
        return None
    if setting:
        return Path(setting).expanduser()
    return None if config.spark_submit else default_cache_dir()
