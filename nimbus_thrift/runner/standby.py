"""A standby driver: a Spark application started before any topology, warmed up, then
waiting to be handed one (``spark_main.py --workdir STANDBY_DIR --standby PID:TICKS``).

::

    start   SparkSession up                                  status.json: warming
    warm    the warm-up topology of spec.json (a spout, a mapInArrow bolt, the
            stateful operator, a foreachBatch tail) runs until WARM_BATCHES batches
            with data are done, then stops; its checkpoint is deleted. A hand-off
            that comes now (a submit found no standby ready) cuts it short: what
            is warm by then is warm, and the session is up either way
    wait    polls ``handoff`` every HANDOFF_POLL_S           status.json: ready
            exits if the daemon (PID with its start TICKS) is gone or on SIGTERM
    run     the hand-off names a topology's work directory: from here on this is
            that topology's driver (:func:`.driver.run_handed`), its status.json
            written there

What a cold start spends before its first batch and a standby has done already: the
JVM's start and class loading (2-3 s), the SparkSession (2-3 s), and the first pass
of the JVM through each kind of stage, the Python workers' start and their imports of
PySpark, pyarrow and pandas (most of a cold batch 0's 3-6 s).

The steps are run by :mod:`.driver` (``_run_standby``); the daemon's side is
``nimbus/spark/standby.py``; the files are in :mod:`.rundir`.
"""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path
from typing import Any, Callable

from .rundir import RunDir
from .spec import RunSpec

#: Batches with data the warm-up runs: the first takes every stage's first pass, the
#: second the stateful operator over a state store that has a version to load.
WARM_BATCHES = 2
#: The warm-up gives up (and the standby fails, to be replaced) after this long.
WARM_TIMEOUT_S = 300.0
#: How often a waiting standby looks for its hand-off: a ``stat`` each time; the
#: submit waits half of it on average.
HANDOFF_POLL_S = 0.02
#: How often a waiting standby checks that the daemon that started it still lives.
PARENT_POLL_S = 1.0


def parse_parent(text: str) -> tuple[int, int]:
    """``PID:TICKS`` (the daemon's pid and start time in clock ticks after boot).

    Raises:
        ValueError: not two whole numbers joined by a colon.
    """
    pid, sep, ticks = text.partition(":")
    if not sep or not pid.isdigit() or not ticks.isdigit():
        raise ValueError(f"--standby must be PID:TICKS, not {text!r}")
    return int(pid), int(ticks)


def process_alive(pid: int, start_ticks: int, proc: Path = Path("/proc")) -> bool:
    """Whether process ``pid`` started at ``start_ticks`` lives (a reused pid does not
    count): read from ``/proc/<pid>/stat``."""
    try:
        raw = (proc / str(pid) / "stat").read_bytes().decode("ascii", "replace")
    except OSError:
        return False
    fields = raw[raw.rfind(")") + 2:].split()
    try:
        return fields[0] not in ("Z", "X") and int(fields[19]) == start_ticks
    except (IndexError, ValueError):
        return False


def wait_for_handoff(run_dir: RunDir, parent_alive: Callable[[], bool],
                     stopped: Callable[[], bool], *,
                     poll: float = HANDOFF_POLL_S, parent_poll: float = PARENT_POLL_S,
                     clock: Callable[[], float] = time.monotonic) -> Path | None:
    """Wait for the hand-off: the work directory it names, or None when the standby
    should exit instead (``stopped()``, or ``parent_alive()`` false)."""
    pause = threading.Event()
    next_parent = clock()
    while True:
        work = run_dir.read_handoff() if run_dir.handoff.exists() else None
        if work is not None:
            return work
        if stopped():
            return None
        if clock() >= next_parent:
            if not parent_alive():
                return None
            next_parent = clock() + parent_poll
        pause.wait(poll)


def warm_up(spark: Any, run_dir: RunDir, *, batches: int = WARM_BATCHES,
            timeout: float = WARM_TIMEOUT_S,
            interrupted: Callable[[], bool] = lambda: False) -> int:
    """Run the warm-up topology of ``run_dir``'s spec until ``batches`` batches with
    data are done, or ``interrupted()`` (a hand-off came: the topology should not
    wait for the rest); returns the batches run. Its checkpoint is deleted afterwards.

    Raises:
        RuntimeError: the query failed, or ended or timed out before that.
    """
    from .query import TopologyQuery
    if interrupted():                   # handed a topology as the session came up
        return 0
    spec = RunSpec.read(run_dir.spec)
    run = TopologyQuery(spark, spec, run_dir)
    query = run.start()
    deadline = time.monotonic() + timeout
    try:
        while True:
            done = [p for p in run.progress() if p.get("numInputRows", 0)]
            if len(done) >= batches or interrupted():
                return len(done)
            if not query.isActive:
                failure = run.failure()
                raise RuntimeError(f"the warm-up query ended: {failure[1]}" if failure
                                   else "the warm-up query ended before its batches")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the warm-up ran {len(done)} of {batches} batches "
                                   f"in {timeout:g} s")
            query.awaitTermination(0.05)  # type: ignore[arg-type]
    finally:
        query.stop()
        shutil.rmtree(run_dir.checkpoint, ignore_errors=True)
