"""Spark for tests: one local[2] session per test process, and the environment of
spark-submit drivers started as subprocesses.

Import the fixture into a test module: ``from support.spark import spark  # noqa: F401``.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parents[1]
REPO_DIR = TESTS_DIR.parent

#: C1-only JIT and the serial GC start the JVM about 2 s sooner (lab notes, s01).
FAST_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def spark_home() -> str:
    import pyspark
    return os.path.dirname(pyspark.__file__)


def spark_env(*code_dirs: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a Spark JVM, its Python workers and a spark-submit driver:
    this interpreter for workers (it has pyarrow), SPARK_HOME of the installed
    PySpark, loopback only, and ``code_dirs`` and the repository on PYTHONPATH (the
    driver-side source runner ignores ``--py-files``)."""
    env = dict(os.environ if base is None else base)
    paths = [str(p) for p in code_dirs] + [str(REPO_DIR)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env.update(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               SPARK_HOME=spark_home(), SPARK_LOCAL_IP="127.0.0.1",
               JAVA_TOOL_OPTIONS=FAST_JVM, PYTHONPATH=os.pathsep.join(paths))
    return env


@contextlib.contextmanager
def environment(env: dict[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


LOOPBACK_CONF = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
}


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A local[2] SparkSession on loopback, UI off, 2 shuffle partitions, its
    scratch space in a temporary directory."""
    from pyspark.sql import SparkSession
    scratch = tmp_path_factory.mktemp("spark")
    builder = SparkSession.builder.master("local[2]").appName("nimbus-thrift-tests")
    for key, value in {**LOOPBACK_CONF,
                       "spark.sql.shuffle.partitions": "2",
                       "spark.local.dir": str(scratch / "local"),
                       "spark.sql.warehouse.dir": str(scratch / "warehouse")}.items():
        builder = builder.config(key, value)
    # The JVM and the Python workers it forks take the environment at launch; the
    # test process gets its own back right after.
    # tests/topologies, and the Spark tier's test modules (their bolt classes run in the
    # workers, imported by module name), on the workers' path.
    with environment(spark_env(TESTS_DIR, TESTS_DIR / "spark")):
        session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def spark_submit_command(work_dir: Path, *conf: tuple[str, str]) -> list[str]:
    """``spark-submit`` of the runner's driver on ``work_dir``, local[2], loopback."""
    import nimbus_thrift.runner
    main = Path(nimbus_thrift.runner.__file__).parent / "spark_main.py"
    command = [os.path.join(spark_home(), "bin", "spark-submit"), "--master", "local[2]"]
    for key, value in [*LOOPBACK_CONF.items(), *conf]:
        command += ["--conf", f"{key}={value}"]
    return command + [str(main), "--workdir", str(work_dir)]


def processes_in_group(pgid: int) -> list[int]:
    """Live processes (not zombies) whose process group is ``pgid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...: comm may hold spaces, so split after ')'.
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:
            found.append(int(entry.name))
    return found
