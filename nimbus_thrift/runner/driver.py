"""The topology's Spark driver program (run by spark-submit through spark_main.py).

::

    spark-submit [--conf ...] nimbus_thrift/runner/spark_main.py --workdir DIR

reads ``DIR/spec.json``, puts ``DIR/code`` on ``sys.path``, starts the topology's one
streaming query (checkpoint in ``DIR/checkpoint``) and then, about every 0.5 s (0.1 s
until the first batch is done), writes ``DIR/status.json`` and reads ``DIR/control``:

================  ===========================================================
control           effect
================  ===========================================================
``active``        run (status ``running``, ``starting`` before the first batch)
``paused``        the spouts stop advancing (no new batches, state kept);
                  status ``paused``; ``active`` again resumes. Ignored by a
                  bounded run (availableNow would end at a paused spout)
``stop``          ``query.stop()``, ``spark.stop()``, status ``stopped``, exit 0
================  ===========================================================

Run settings (``spec.run``): ``trigger_ms`` (processing-time trigger interval, default
0: the next batch starts when one ends), ``bounded`` (``availableNow``: what the spouts
have at the start, then status ``finished``), ``max_batch`` (offsets per spout task
per batch unless the topology's ``topology.max.spout.pending`` says; default 100000).

It also follows ``DIR/settings.json`` at each poll (:mod:`.settings`): named logger
levels, the root logger's carried over to Spark's own (JVM) log level, back to the
level it had at start when the setting is removed or its time is up.

SIGTERM to this (Python) process is the same as ``stop``. A failed query gives status
``failed`` with a one-line ``error`` (naming the component whose code raised, also in
``error_component``) and exit code 1. A bounded run (``spec.run["bounded"]``) ends
with status ``finished`` and exit 0 once the spouts' data at the start is done.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

from .loglevels import LogLevels
from .rundir import RunDir, RunState
from .settings import SettingsWatcher, configure_logging
from .spec import RunSpec

#: Seconds between status writes and control polls.
POLL_S = 0.5
#: ... until the first batch is done, so that "running" is seen as soon as it is.
STARTING_POLL_S = 0.1

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


class Status:
    """status.json of this driver (written by rename, see RunDir)."""

    def __init__(self, run_dir: RunDir):
        self.run_dir = run_dir
        self.state = RunState(state="starting", pid=os.getpid(), updated_at=time.time(),
                              started_at=time.time())

    def write(self, **changes: Any) -> None:
        for key, value in changes.items():
            setattr(self.state, key, value)
        self.state.updated_at = time.time()
        self.run_dir.write_status(self.state)


class _StopSignal:
    """Set by SIGTERM (and SIGINT): the loop stops at its next poll."""

    def __init__(self) -> None:
        self.received = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.received = True

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self)
        signal.signal(signal.SIGINT, self)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="spark_main.py",
                                     description="Run one topology's Spark query.")
    parser.add_argument("--workdir", required=True, type=Path,
                        help="the topology's work directory (spec.json, code/, control)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the driver; returns the process exit code."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    run_dir = RunDir(args.workdir)
    if not run_dir.spec.is_file():
        print(f"spark_main: no run spec at {run_dir.spec}", file=sys.stderr)
        return EXIT_USAGE
    stop = _StopSignal()
    stop.install()
    configure_logging()
    status = Status(run_dir)
    status.write()
    try:
        spec = RunSpec.read(run_dir.spec)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        status.write(state="failed", error=f"cannot read {run_dir.spec}: {exc}")
        return EXIT_FAILED
    if run_dir.code.is_dir():
        sys.path.insert(0, str(run_dir.code))
    try:
        from pyspark.sql import SparkSession
        spark = SparkSession.builder.appName(spec.name).getOrCreate()
        context = spark.sparkContext
        status.write(app_id=context.applicationId, ui_url=context.uiWebUrl or "")
    except Exception as exc:
        status.write(state="failed", error=_one_line(exc))
        return EXIT_FAILED
    try:
        return _run(spark, spec, run_dir, status, stop)
    except Exception as exc:            # the JVM went away, or a bug of ours
        status.write(state="failed", error=_one_line(exc))
        return EXIT_FAILED
    finally:
        spark.stop()
        if status.state.state == "stopping":
            status.write(state="stopped")


def _jvm_root_level(spark: Any) -> Any:
    """A function that sets Spark's (the JVM's) root log level to a log4j level name,
    or back to the one it had now for None."""
    context = spark.sparkContext
    try:
        original = str(context._jvm.org.apache.logging.log4j.LogManager
                       .getRootLogger().getLevel().toString())
    except Exception:                   # no log4j 2 behind this Spark: its default
        original = "INFO"

    def set_level(level: str | None) -> None:
        try:
            context.setLogLevel(level or original)
        except Exception as exc:        # noqa: BLE001 - the Python loggers changed
            print(f"spark_main: cannot set Spark's log level to {level or original}: "
                  f"{_one_line(exc)}", file=sys.stderr)
    return set_level


def _one_line(exc: BaseException) -> str:
    lines = f"{type(exc).__name__}: {exc}".splitlines()
    return lines[0] if lines else type(exc).__name__


def _run(spark: Any, spec: RunSpec, run_dir: RunDir, status: Status,
         stop: _StopSignal) -> int:
    from .figures import FigureTracker
    from .query import TopologyQuery
    try:
        run = TopologyQuery(spark, spec, run_dir)
        query = run.start()
    except Exception as exc:
        status.write(state="failed", error=_one_line(exc))
        return EXIT_FAILED
    tracker = FigureTracker(run.plan)
    settings = SettingsWatcher(run_dir, LogLevels(on_root=_jvm_root_level(spark)))

    def figures() -> dict[str, Any]:
        progress = run.progress()
        last = progress[-1] if progress else None
        return {"components": tracker.update(run.counts(), progress),
                "batch_id": last["batchId"] if last else -1,
                "batch_ms": float(last["durationMs"].get("triggerExecution", 0))
                if last else 0.0}

    while True:
        settings.refresh()
        wanted = run_dir.control_state()
        if stop.received or wanted == "stop":
            status.write(state="stopping", **figures())
            query.stop()
            return EXIT_OK
        if not query.isActive:
            break
        now = figures()
        state = "paused" if wanted == "paused" and not run.bounded else (
            "running" if now["batch_id"] >= 0 else "starting")
        status.write(state=state, **now)
        try:
            # PySpark takes float seconds (it checks int or float) but types int.
            pause = STARTING_POLL_S if state == "starting" else POLL_S
            query.awaitTermination(pause)  # type: ignore[arg-type]
        except Exception:
            break           # failed: reported below
    failure = run.failure()
    if failure is not None:
        component, message = failure
        status.write(state="failed", error=message, error_component=component, **figures())
        return EXIT_FAILED
    status.write(state="finished" if run.bounded else "stopped", **figures())
    return EXIT_OK
