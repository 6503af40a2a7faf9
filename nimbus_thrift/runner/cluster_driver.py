"""A topology's driver on a standalone master's worker (cluster mode).

::

    spark-submit ... spark_main.py --workdir DIR --cluster

The daemon submits the driver to the master (``nimbus/spark/cluster/``); the master
runs it on a worker, in the worker's own directory, and, with
``spark.driver.supervise``, runs it again (under a new driver id since SPARK-19900)
whenever it exits non-zero or its worker is lost, at once and without end. ``DIR`` is
on storage every host sees; the daemon writes its ``supervision.json`` anew at each
submission, so the master's relaunches share one count of failures in a row.
So this driver does what the daemon's launcher does for a local one:

1. logs: its stdout and stderr (file descriptors 1 and 2: what PySpark and any child
   process write too) go to ``DIR/logs/stdout`` and ``DIR/logs/stderr``, appended to,
   each renamed to ``*.1`` first past :data:`LOG_ROTATE_BYTES`, after a banner line
   that starts with :data:`BANNER` (the daemon reads the lines after the last banner
   as this launch's). So does the spouts' source runner's (a Python process of the
   driver's JVM: :mod:`.source`). The JVM's own log (log4j) stays in the worker's
   files, and the executors' in theirs, as for any driver the master runs;
2. attempts (:mod:`.attempts`): one record per run in ``attempts.json``, a back-off
   before Spark starts after failures in a row (status ``starting`` with ``restarts``
   and ``relaunch_at``; ``stop`` and SIGTERM are obeyed meanwhile), and giving up past
   ``max_restarts`` (status ``failed``, "gave up after N restarts: ...", exit 0);
3. exit codes: 1 (:data:`EXIT_FAILED`) only for a failure after which it may run again
   (status ``failed`` with ``relaunch``: the master relaunches it); 0 for a stop, an
   end, a give-up, and anything a relaunch cannot mend (no work directory, no spec);
4. the fence (:mod:`.claim`): once its back-off is over it takes ``driver.claim``,
   and it stops, writing nothing more, once another driver has taken it.

The work directory's files are otherwise a client-mode driver's (:mod:`.driver`).
"""

from __future__ import annotations

import os
import re
import socket
import sys
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from ..topology.blobs import WORK_DIR_ENV
from .attempts import (FAILED, FINISHED, STOPPED, SUPERSEDED, Attempt,
                       AttemptBook, Supervision, clip_error, read_attempts,
                       read_supervision, write_attempts)
from .claim import Claim, DriverFence, Fence, new_token, write_claim
from .driver import (EXIT_FAILED, EXIT_OK, POLL_S, Status, _StopSignal, parse_args,
                     serve_cold)
from .rundir import RunDir
from .settings import configure_logging, follow_logs

#: stdout and stderr are renamed to ``*.1`` at a start once they grew past this (the
#: daemon's launcher does so for a local driver: nimbus/spark/submit.py, whose constant
#: runner/ may not import).
LOG_ROTATE_BYTES = 50 << 20
#: Starts the line written to stderr at each start (nimbus/spark/status.py's BANNER).
BANNER = "--- nimbus-thrift "
#: The name a standalone worker gives a driver's directory (our working directory).
DRIVER_ID = re.compile(r"^driver-\d+-\d+$")


@dataclass(frozen=True)
class Identity:
    """Which driver this is: the master's driver id ("" when not run by a worker),
    the host and the pid."""

    driver_id: str
    host: str
    pid: int

    @classmethod
    def here(cls) -> "Identity":
        name = Path.cwd().name
        return cls(name if DRIVER_ID.match(name) else "", socket.gethostname(), os.getpid())

    def words(self) -> str:
        driver = f" of driver {self.driver_id}" if self.driver_id else ""
        return f"{driver} on host {self.host} (pid {self.pid})"


def redirect_output(logs: Path, banner: str) -> None:
    """Point file descriptors 1 and 2 at ``logs/stdout`` and ``logs/stderr`` (appended
    to; renamed to ``*.1`` first past :data:`LOG_ROTATE_BYTES`) and write ``banner``
    (one line) to both.

    Raises:
        OSError: the directory or a file cannot be made or opened (nothing changed if
            it was the first).
    """
    logs.mkdir(parents=True, exist_ok=True)
    for name in ("stdout", "stderr"):
        path = logs / name
        try:
            if path.stat().st_size > LOG_ROTATE_BYTES:
                os.replace(path, path.with_name(name + ".1"))
        except FileNotFoundError:
            pass
    follow_logs(logs)
    data = banner.rstrip("\n").encode("utf-8", "replace") + b"\n"
    for fd in (1, 2):
        os.write(fd, data)


def banner_line(what: str, me: Identity, now: float) -> str:
    when = datetime.fromtimestamp(now, timezone.utc).isoformat(timespec="seconds")
    return f"{BANNER}cluster {what}{me.words()} at {when}"


class ClusterStatus(Status):
    """status.json of a cluster-mode driver: a failure says whether the master
    relaunches it (``relaunch``) or it gave up (the error says so); nothing is written
    once the driver lost the claim (``fence``, set when it takes it: :class:`Status`)."""

    def __init__(self, run_dir: RunDir, on_failure: Callable[[str], tuple[bool, str]]):
        super().__init__(run_dir)
        self._on_failure = on_failure

    def write(self, **changes: Any) -> None:
        if self.fence is not None and self.fence.superseded:
            return
        if changes.get("state") == "failed":
            relaunch, error = self._on_failure(str(changes.get("error", "")))
            changes.update(relaunch=relaunch, error=error)
        super().write(**changes)


class ClusterDriver:
    """One attempt, from its start to its exit code (:meth:`run`).

    Args:
        run_dir: the work directory. me: this driver. stop: SIGTERM's flag.
        clock: epoch seconds. sleep: waits (tests pass fakes of both).
        serve: runs the topology once the claim is taken
            (:func:`~.driver.serve_cold`; tests pass a fake).
    """

    def __init__(self, run_dir: RunDir, me: Identity, stop: _StopSignal, *,
                 clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep,
                 serve: Callable[..., int] = serve_cold):
        self.run_dir = run_dir
        self.me = me
        self.stop = stop
        self.clock = clock
        self.sleep = sleep
        self.serve = serve
        self.supervision = Supervision()
        self.record: Attempt | None = None

    def run(self, logs: bool = True) -> int:
        """The attempt; its exit code. ``logs``: redirect stdout and stderr first."""
        rd = self.run_dir
        sup = self.supervision = read_supervision(rd.supervision)
        book = read_attempts(rd.attempts)
        now = self.clock()
        book.mark_died(now, self._last_seen())
        failures = book.failures_in_row(sup.submission, sup.reset_secs)
        giving_up = not sup.may_relaunch(failures)
        what = "give-up" if giving_up else f"attempt {book.count + 1}"
        if logs:
            try:
                redirect_output(rd.logs, banner_line(what, self.me, now))
            except OSError as exc:
                print(f"spark_main: cannot write to {rd.logs} ({exc}): the logs stay "
                      "in the worker's directory", file=sys.stderr)
        configure_logging()
        if giving_up:
            return self._give_up(book, sup, failures, now)
        wait = sup.delay(failures)
        self.record = Attempt(attempt=book.count + 1, driver_id=self.me.driver_id,
                              host=self.me.host, pid=self.me.pid, started_at=now,
                              restarts=failures, submission=sup.submission,
                              relaunch_at=now + wait if wait else None)
        book.start(self.record)
        status = ClusterStatus(rd, self._failure)
        try:
            write_attempts(rd.attempts, book)
            status.write(state="starting", restarts=failures,
                         relaunch_at=self.record.relaunch_at or 0.0)
        except OSError as exc:
            # A supervising master relaunches at once: fail no faster than the back-off.
            print(f"spark_main: cannot write to {rd.root}: {exc}", file=sys.stderr)
            self._wait(now + sup.delay(max(failures, 1)), None)
            return EXIT_FAILED
        if self._wait(self.record.relaunch_at or now, status):
            return self._stopped(status)
        fence = self._take_claim()
        status.fence = fence
        status.write(relaunch_at=0.0)       # the back-off is over
        code = self.serve(rd, status, self.stop, fence)
        return self._end(code, status, fence)

    # -- steps -------------------------------------------------------------------------

    def _last_seen(self) -> dict[int, float]:
        """pid -> when status.json was last written by it (the driver before, if it
        wrote the last status)."""
        last = self.run_dir.read_status()
        return {last.pid: last.updated_at} if last is not None else {}

    def _give_up(self, book: AttemptBook, sup: Supervision, failures: int,
                 now: float) -> int:
        error = sup.gave_up_error(failures, book.last_error() or "no error recorded")
        print(f"spark_main: {error}", file=sys.stderr, flush=True)
        book.gave_up = {"driver_id": self.me.driver_id, "submission": sup.submission,
                        "at": now, "error": clip_error(error)}
        status = Status(self.run_dir)
        try:
            write_attempts(self.run_dir.attempts, book)
            status.write(state="failed", error=error, restarts=failures, relaunch=False)
        except OSError as exc:
            print(f"spark_main: cannot write to {self.run_dir.root}: {exc}",
                  file=sys.stderr)
        return EXIT_OK

    def _wait(self, until: float, status: Status | None) -> bool:
        """Wait until ``until`` (epoch seconds), ``status`` rewritten at each poll;
        True as soon as a stop is asked (``control``, SIGTERM), also when there is no
        wait."""
        while True:
            if self.stop.received or self.run_dir.control_state() == "stop":
                return True
            left = until - self.clock()
            if left <= 0:
                return False
            self.sleep(min(POLL_S, left))
            if status is not None:
                status.write()

    def _take_claim(self) -> DriverFence:
        rd, me = self.run_dir, self.me
        assert self.record is not None
        token = new_token()
        now = self.clock()
        write_claim(rd.claim, Claim(token=token, attempt=self.record.attempt,
                                    driver_id=me.driver_id, host=me.host, pid=me.pid,
                                    at=now))
        self.record = replace(self.record, claimed_at=now)
        self._save(self.record)
        return DriverFence(Fence(str(rd.claim), token))

    def _failure(self, error: str) -> tuple[bool, str]:
        """status.json's ``relaunch`` and error for a failure of this attempt."""
        assert self.record is not None
        ended = replace(self.record, outcome=FAILED, ended_at=self.clock())
        failures = ended.failures_after(self.supervision.reset_secs)
        if self.supervision.may_relaunch(failures):
            return True, error
        return False, self.supervision.gave_up_error(failures, error)

    def _stopped(self, status: Status) -> int:
        status.write(state="stopped")
        self._finish(STOPPED, "")
        return EXIT_OK

    def _end(self, code: int, status: ClusterStatus, fence: DriverFence) -> int:
        if fence.superseded:
            # attempts.json is the new driver's now; only if the claim is gone
            # altogether (the daemon took it back) is this record still ours to end.
            if not self.run_dir.claim.exists():
                self._finish(SUPERSEDED, "another driver took over, or the claim "
                             "was withdrawn")
            return EXIT_OK
        state = status.state
        if state.state == "failed":
            self._finish(FAILED, state.error, gave_up=not state.relaunch)
            return EXIT_FAILED if state.relaunch else EXIT_OK
        self._finish(FINISHED if state.state == "finished" else STOPPED, "")
        return EXIT_OK

    def _finish(self, outcome: str, error: str, gave_up: bool = False) -> None:
        assert self.record is not None
        self.record = replace(self.record, outcome=outcome, error=clip_error(error),
                              ended_at=self.clock())
        self._save(self.record, gave_up_error=error if gave_up else None)

    def _save(self, record: Attempt, gave_up_error: str | None = None) -> None:
        """Write ``record`` into attempts.json as it is now (another driver may have
        added its own, or marked this one died); nothing if this one is gone from it."""
        book = read_attempts(self.run_dir.attempts)
        if not book.update(record):
            return
        if gave_up_error is not None:
            book.gave_up = {"driver_id": record.driver_id,
                            "submission": record.submission, "at": record.ended_at,
                            "error": clip_error(gave_up_error)}
        try:
            write_attempts(self.run_dir.attempts, book)
        except OSError as exc:
            print(f"spark_main: cannot write {self.run_dir.attempts}: {exc}",
                  file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """spark_main.py's entry with ``--cluster``; returns the process exit code."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    run_dir = RunDir(args.workdir)
    # A usage error exits 0 here: a supervising master relaunches any other exit at
    # once, for ever, and no relaunch mends these.
    if args.standby is not None:
        print("spark_main: --cluster and --standby do not go together", file=sys.stderr)
        return EXIT_OK
    if not run_dir.spec.is_file():
        print(f"spark_main: no run spec at {run_dir.spec}: nothing to run",
              file=sys.stderr)
        return EXIT_OK
    me = Identity.here()
    stop = _StopSignal()
    stop.install()
    # What a local driver's launcher gives it: the work directory as the working
    # directory (the worker's is ours at start) and in the environment.
    os.chdir(run_dir.root)
    os.environ[WORK_DIR_ENV] = str(run_dir.root)
    return ClusterDriver(run_dir, me, stop).run()
