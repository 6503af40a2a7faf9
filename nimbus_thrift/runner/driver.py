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
                  status ``paused``, with ``in_flight`` true until a batch
                  planned before the pause can no longer be running (see
                  :class:`Pause`); ``active`` again resumes. Ignored by a
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

With ``--standby PID:TICKS`` it is a standby driver instead (:mod:`.standby`): it
warms up and waits to be handed a topology, then runs it as above
(:func:`run_handed`). With ``--cluster`` it is a driver a standalone master runs on
one of its workers (:mod:`.cluster_driver`, entered through ``spark_main.py``): its
own logs, attempts and back-off, and a fence against a second driver.

With ``--fence`` (the daemon passes it in HA mode, where a new leader on another host
starts a driver while the old leader's may still run) this driver takes the same fence
as a cluster-mode one (:mod:`.claim`): it writes ``driver.claim`` before Spark starts,
and once another driver has taken it, it stops its query and Spark, writes nothing
more (``status.json`` is the new driver's) and exits 0.

SIGTERM to this (Python) process is the same as ``stop``. A failed query gives status
``failed`` with a one-line ``error`` (naming the component whose code raised, also in
``error_component``) and exit code 1. A bounded run (``spec.run["bounded"]``) ends
with status ``finished`` and exit 0 once the spouts' data at the start is done.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import socket
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any, Callable

from ..topology.blobs import WORK_DIR_ENV
from .claim import Claim, ClaimUnreadable, DriverFence, Fence, new_token, write_claim
from .loglevels import LogLevels
from .rundir import STANDBY_READY, STANDBY_WARMING, RunDir, RunState
from .settings import SettingsWatcher, configure_logging
from .spec import RunSpec

#: The topology's code as uploaded, in its work directory (the launcher's --py-files).
CODE_ZIP = "code.zip"
#: Seconds between status writes and control polls.
POLL_S = 0.5
#: ... until the first batch is done, so that "running" is seen as soon as it is.
STARTING_POLL_S = 0.1

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
#: status.json states after which a driver that lost the claim must not write.
_FINAL = ("stopping", "stopped", "finished", "failed")


class Status:
    """status.json of this driver (written by rename, see RunDir); nothing is written
    once the driver lost the claim (``fence``, set by a fenced driver when it takes
    it: :mod:`.claim`), and a final state is written only after one more look at it."""

    def __init__(self, run_dir: RunDir):
        self.run_dir = run_dir
        self.fence: DriverFence | None = None
        self.state = RunState(state="starting", pid=os.getpid(), updated_at=time.time(),
                              started_at=time.time())

    def write(self, **changes: Any) -> None:
        if self.fence is not None:
            if self.fence.superseded:
                return
            if changes.get("state") in _FINAL:
                try:
                    if not self.fence.poll():
                        return
                except ClaimUnreadable:
                    pass                # unknown: write, as without a fence
        # in_flight belongs to the paused state: each write that says it is paused
        # says it again, any other clears it.
        changes.setdefault("in_flight", False)
        for key, value in changes.items():
            setattr(self.state, key, value)
        self.state.updated_at = time.time()
        self.run_dir.write_status(self.state)


class Pause:
    """Whether a pause has taken hold, asked at each poll: :meth:`in_flight` with
    whether ``control`` said paused (read before the call) and a probe of the query
    (:meth:`~.query.TopologyQuery.batch_in_flight`).

    A batch Spark planned before the spouts saw ``paused`` still runs after it (it
    holds what they produced until then: seconds of work on a loaded machine), and
    until it ends the topology is not fully paused. From the first poll at which the
    probe says no batch can be running, the pause holds until ``control`` says
    otherwise: every later trigger reads ``paused`` and plans nothing, so the probe
    is not asked again (while paused, triggers still come and go every few ms)."""

    def __init__(self) -> None:
        self._held = False

    def in_flight(self, paused: bool, busy: Callable[[], bool]) -> bool:
        """True while ``paused`` and a batch planned before the pause may be running
        (``busy()``, asked until it first says False); False when not paused."""
        if not paused:
            self._held = False
            return False
        if not self._held:
            self._held = not busy()
        return not self._held


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
    parser.add_argument("--standby", metavar="PID:TICKS",
                        help="be a standby driver (:mod:`.standby`): warm up with the "
                             "spec in --workdir, then wait for a hand-off; exit if "
                             "the daemon PID started at TICKS is gone")
    parser.add_argument("--cluster", action="store_true",
                        help="run on a standalone master's worker (:mod:`.cluster_driver`)"
                             ": logs, attempts and back-off kept in --workdir")
    parser.add_argument("--fence", action="store_true",
                        help="take driver.claim in --workdir before Spark starts and stop "
                             "once another driver took it (:mod:`.claim`; the daemon's "
                             "HA mode)")
    return parser.parse_args(argv)


def take_claim(run_dir: RunDir, *, attempt: int = 0, driver_id: str = "") -> DriverFence:
    """Write ``driver.claim`` in ``run_dir`` naming this process (by rename: the last
    driver to write it wins) and return the fence that checks it still does.

    Raises:
        OSError: the claim could not be written.
    """
    token = new_token()
    write_claim(run_dir.claim, Claim(token=token, attempt=attempt, driver_id=driver_id,
                                     host=socket.gethostname(), pid=os.getpid(),
                                     at=time.time()))
    return DriverFence(Fence(str(run_dir.claim), token))


def main(argv: list[str] | None = None) -> int:
    """Run the driver; returns the process exit code."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.cluster:
        print("spark_main: --cluster is run by cluster_driver.main", file=sys.stderr)
        return EXIT_USAGE
    run_dir = RunDir(args.workdir)
    if not run_dir.spec.is_file():
        print(f"spark_main: no run spec at {run_dir.spec}", file=sys.stderr)
        return EXIT_USAGE
    stop = _StopSignal()
    stop.install()
    configure_logging()
    if args.standby is not None:
        if args.fence:
            # The daemon keeps no standbys in HA mode (nimbus/spark/standby_drivers.py).
            print("spark_main: --standby and --fence do not go together", file=sys.stderr)
            return EXIT_USAGE
        return _run_standby(run_dir, args.standby, stop)
    status = Status(run_dir)
    if args.fence:
        try:
            status.fence = take_claim(run_dir)
        except OSError as exc:
            print(f"spark_main: cannot take {run_dir.claim}: {exc}", file=sys.stderr)
            return EXIT_FAILED
    status.write()
    code = serve_cold(run_dir, status, stop, status.fence)
    if status.fence is not None and status.fence.superseded:
        return EXIT_OK          # another driver runs the topology now: not a failure
    return code


def serve_cold(run_dir: RunDir, status: Status, stop: "_StopSignal",
               fence: DriverFence | None = None) -> int:
    """Start a SparkSession for the topology of ``run_dir`` and run it (a cold driver:
    :func:`main`, and :mod:`.cluster_driver` with its ``fence``)."""
    spec = _read_spec(run_dir, status)
    if spec is None:
        return EXIT_FAILED
    if run_dir.code.is_dir():
        sys.path.insert(0, str(run_dir.code))
    try:
        from pyspark.sql import SparkSession
        spark = SparkSession.builder.appName(spec.name).getOrCreate()
        context = spark.sparkContext
        status.write(app_id=context.applicationId, ui_url=context.uiWebUrl or "")
    except Exception as exc:
        status.write(state="failed", error=one_line(exc))
        return EXIT_FAILED
    return _serve(spark, spec, run_dir, status, stop, fence)


def run_handed(spark: Any, run_dir: RunDir, stop: "_StopSignal") -> int:
    """Run the topology of ``run_dir`` in ``spark``, the session of a standby driver
    that was handed it (:mod:`.standby`), as :func:`main` runs it in a new one.

    What a cold start passes on its command line comes from the work directory here:
    the code (``code/`` on this process's path, ``code.zip`` to the Python workers as
    ``--py-files`` would), and the work directory, which the standby's environment
    names through its ``current`` link (made by the launcher before the hand-off)."""
    status = Status(run_dir)
    context = spark.sparkContext
    status.write(app_id=context.applicationId, ui_url=context.uiWebUrl or "")
    spec = _read_spec(run_dir, status)
    if spec is None:
        spark.stop()
        return EXIT_FAILED
    os.environ[WORK_DIR_ENV] = str(run_dir.root)
    try:
        os.chdir(run_dir.root)          # where a cold driver starts
        if run_dir.code.is_dir():
            sys.path.insert(0, str(run_dir.code))
            importlib.invalidate_caches()
        code_zip = run_dir.root / CODE_ZIP
        if code_zip.is_file():
            context.addPyFile(str(code_zip))
    except Exception as exc:
        status.write(state="failed", error=one_line(exc))
        spark.stop()
        return EXIT_FAILED
    return _serve(spark, spec, run_dir, status, stop)


def _run_standby(run_dir: RunDir, parent: str, stop: "_StopSignal") -> int:
    """A standby driver's life (:mod:`.standby`): warm up, wait, run what it is
    handed."""
    from .standby import parse_parent, process_alive, wait_for_handoff, warm_up
    try:
        pid, ticks = parse_parent(parent)
    except ValueError as exc:
        print(f"spark_main: {exc}", file=sys.stderr)
        return EXIT_USAGE
    status = Status(run_dir)
    status.write(state=STANDBY_WARMING)
    try:
        from pyspark.sql import SparkSession
        spark = SparkSession.builder.getOrCreate()
        context = spark.sparkContext
        status.write(app_id=context.applicationId, ui_url=context.uiWebUrl or "")
    except Exception as exc:
        status.write(state="failed", error=one_line(exc))
        return EXIT_FAILED
    try:
        warm_up(spark, run_dir, interrupted=run_dir.handoff.exists)
    except Exception as exc:
        if not run_dir.handoff.exists():
            status.write(state="failed", error=one_line(exc))
            spark.stop()
            return EXIT_FAILED
        # Handed a topology already: it runs in the session there is.
        print(f"spark_main: the warm-up was cut short: {one_line(exc)}", file=sys.stderr)
    status.write(state=STANDBY_READY)
    work = wait_for_handoff(run_dir, lambda: process_alive(pid, ticks),
                            lambda: stop.received)
    if work is None:
        status.write(state="stopped")
        spark.stop()
        return EXIT_OK
    return run_handed(spark, RunDir(work), stop)


def _read_spec(run_dir: RunDir, status: Status) -> RunSpec | None:
    try:
        return RunSpec.read(run_dir.spec)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        status.write(state="failed", error=f"cannot read {run_dir.spec}: {exc}")
        return None


def _serve(spark: Any, spec: RunSpec, run_dir: RunDir, status: Status,
           stop: "_StopSignal", fence: DriverFence | None = None) -> int:
    """Run the topology's query until it ends or is stopped, then stop the session."""
    try:
        return _run(spark, spec, run_dir, status, stop, fence)
    except Exception as exc:            # the JVM went away, or a bug of ours
        status.write(state="failed", error=one_line(exc))
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
                  f"{one_line(exc)}", file=sys.stderr)
    return set_level


def one_line(exc: BaseException) -> str:
    """``Type: message``, its first line only (status.json's ``error``)."""
    lines = f"{type(exc).__name__}: {exc}".splitlines()
    return lines[0] if lines else type(exc).__name__


def _run(spark: Any, spec: RunSpec, run_dir: RunDir, status: Status,
         stop: _StopSignal, fence: DriverFence | None) -> int:
    from .stats import StatsTracker
    from .query import TopologyQuery
    try:
        run = TopologyQuery(spark, spec, run_dir,
                            fence=fence.fence if fence is not None else None)
        query = run.start()
    except Exception as exc:
        status.write(state="failed", error=one_line(exc))
        return EXIT_FAILED
    tracker = StatsTracker(run.plan)
    settings = SettingsWatcher(run_dir, LogLevels(on_root=_jvm_root_level(spark)))
    pausing = Pause()

    def figures() -> dict[str, Any]:
        progress = run.progress()
        last = progress[-1] if progress else None
        return {"components": tracker.update(run.counts(), progress),
                "batch_id": last["batchId"] if last else -1,
                "batch_ms": float(last["durationMs"].get("triggerExecution", 0))
                if last else 0.0}

    while True:
        if fence is not None and not fence.poll():
            query.stop()        # another driver took over: nothing more of ours
            return EXIT_OK
        settings.refresh()
        wanted = run_dir.control_state()
        if stop.received or wanted == "stop":
            status.write(state="stopping", **figures())
            query.stop()
            return EXIT_OK
        if not query.isActive:
            break
        now = figures()
        paused = wanted == "paused" and not run.bounded
        state = "paused" if paused else (
            "running" if now["batch_id"] >= 0 else "starting")
        status.write(state=state, in_flight=pausing.in_flight(paused, run.batch_in_flight),
                     **now)
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
