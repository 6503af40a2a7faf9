"""What the cluster launcher reports of a topology (:class:`RunStatus`): read, each time
it is asked, from three facts: the driver's state as the master lists it
(:mod:`.masterview`), the driver's last ``status.json`` and its attempts
(``attempts.json``: each start of the driver, written by the driver itself), both in
the work directory every host sees::

    master says   status.json says     -> state     detail
    SUBMITTED     -                       starting  "starting: driver D is waiting for
                                                     a worker with room for it"
    RUNNING       nothing, starting       starting  "starting: driver D on H, ..."
    RUNNING       running, paused, ...    the same  "running: batch 12, 3.4k tuples/s;
                                                     driver D on H"
    RUNNING       failed                  failed    "failed: <error> (driver D is
                                                     exiting)"
    RELAUNCHING   -                       failed    "failed: <last failure>; the master
                                                     relaunches driver D ..."
    FINISHED      stopped / finished      the same
    FINISHED      failed (gave up)        failed    "failed: <error>; gave up after ..."
    KILLED        -                       stopped   (asked) or failed (killed elsewhere)
    FAILED/ERROR  -                       failed    "failed: <the master's message>"
    UNKNOWN       -                       failed    "the master no longer knows D"
    unreadable    something               its own   "...; the master cannot be read"
                                                    (with its age once 15 s old)
    unreadable    nothing yet             starting

The detail starts with the state word and a colon, as client mode's
(:mod:`..status`), whose sentence helpers this uses.
"""

from __future__ import annotations

import time
from typing import Callable

from ....runner.attempts import (FAILURES, AttemptBook, AttemptsSummary,
                                 read_supervision, summarize)
from ....runner.rundir import RunState
from ...config import NimbusConfig
from ...launcher import RunStatus
from ..status import (IN_FLIGHT, MAX_ERRORS, SPARK_COMPONENT, component_stats,
                      error_text, first_line, last_stderr_line, rate, shorten,
                      tuple_rate)
from .masterview import MasterView
from .records import ClusterRun

#: A status.json written this recently says the driver lives even when the master
#: cannot be read (the driver writes it every 0.5 s).
FRESH_STATUS_SECS = 15.0


def where(run: ClusterRun, view: MasterView) -> tuple[str, str]:
    """``(worker id, host)`` of ``run``'s driver as the master lists it."""
    driver = view.drivers.get(run.driver_id)
    if driver is None or not driver.worker_id:
        return "", ""
    worker = view.worker(driver.worker_id)
    return driver.worker_id, worker.host if worker is not None else ""


def cluster_status(run: ClusterRun, view: MasterView, driver_state: str,
                   book: AttemptBook, config: NimbusConfig,
                   clock: Callable[[], float] = time.time) -> RunStatus:
    """The status of ``run``, whose driver the master says is in ``driver_state`` (""
    when the master cannot be read: ``view.error`` says why) and whose drivers' attempts
    are ``book``."""
    if not run.driver_id:
        if run.launch_error:
            return RunStatus(state="failed", errors=tuple(run.errors),
                             detail=f"failed: could not launch: {run.launch_error}")
        return RunStatus(state="starting",
                         detail="starting: the driver is being submitted to the master")
    last = run.status_file()
    attempts = summarize(book, read_supervision(run.dir.supervision), clock())
    _, host = where(run, view)
    on = f"driver {run.driver_id}" + (f" on {host}" if host else "")
    state, detail, relaunching = _state(run, last, attempts, driver_state, view, on,
                                        config, clock)
    # Each failed or lost driver is an error, as each failed application is in client
    # mode: getTopologyInfo, the page and /metrics show them.
    errors = list(run.errors) + [
        (SPARK_COMPONENT, f"driver {a.driver_id} on {a.host}: {first_line(a.error)}",
         int(a.ended_at or a.started_at))
        for a in book.attempts if a.outcome in FAILURES and a.error]
    if last is not None and last.state == "failed" and last.error and \
            (not errors or errors[-1][1] != last.error):
        errors.append((last.error_component or SPARK_COMPONENT, last.error,
                       int(last.updated_at)))
    batched = last is not None and last.batch_id >= 0
    started = last.started_at if last is not None and last.started_at else \
        run.submitted_at
    return RunStatus(
        state=state, detail=detail, started_at=started, host=host,
        ui_url=last.ui_url if last is not None and state in ("running", "paused")
        else "",
        components=component_stats(last), errors=tuple(errors[-MAX_ERRORS:]),
        restarts=attempts.failures_in_row, relaunching=relaunching,
        batches=last.batch_id + 1 if batched and last is not None else None,
        last_batch_secs=last.batch_ms / 1000 if batched and last is not None else None)


def _state(run: ClusterRun, last: RunState | None, attempts: AttemptsSummary,
           driver_state: str, view: MasterView, on: str, config: NimbusConfig,
           clock: Callable[[], float]) -> tuple[str, str, str]:
    """``(state, detail, relaunching)`` by the table of the module docstring."""
    if driver_state == "":
        # The driver's own word, with its age: it writes every 0.5 s while it runs.
        note = f"; the master cannot be read: {view.error}"
        if last is not None:
            age = clock() - last.updated_at
            if age >= FRESH_STATUS_SECS:
                note = f" (its last status is {age:.0f} s old){note}"
            state, detail = _alive(run, last, attempts, on, config)
            return state, detail + note, ""
        return "starting", f"starting: {on} has not written its status yet{note}", ""
    if driver_state == "SUBMITTED":
        return "starting", f"starting: {on} is waiting for a worker with room for it", ""
    if driver_state == "RUNNING":
        return (*_alive(run, last, attempts, on, config), "")
    if driver_state == "RELAUNCHING":
        failure = _failure(run, last, attempts, view)
        return "failed", (f"failed: {failure}; the master relaunches {on} from the "
                          "checkpoint"), \
            "after a failure"
    if driver_state == "KILLED" and (run.stopped or run.dir.control_state() == "stop"):
        return "stopped", f"stopped: {on} was stopped", ""
    if driver_state == "FINISHED" and last is not None:
        if last.state == "finished":
            batch = f" after batch {last.batch_id}" if last.batch_id >= 0 else ""
            return "finished", f"finished: the bounded run completed{batch}", ""
        if last.state == "stopped" or (last.state == "stopping" and run.stopped):
            return "stopped", f"stopped: {on} stopped", ""
    if run.stopped:
        return "stopped", f"stopped: {on} was stopped ({driver_state})", ""
    if run.pending_relaunch:
        return "stopped", "stopped: being relaunched with the new parallelism", \
            "with the new parallelism"
    if driver_state == "KILLED":
        return "failed", (f"failed: {on} was killed, not by nimbus-thrift (the master's "
                          "UI or another REST client); activate the topology to "
                          "start it again"), ""
    if driver_state == "UNKNOWN":
        return "failed", (f"failed: the master no longer knows {on} (restarted "
                          "without recovery?); activate the topology to start it "
                          "again"), ""
    failure = _failure(run, last, attempts, view)
    if attempts.gave_up:
        said = first_line(attempts.gave_up_error) or failure
        return "failed", (f"failed: {shorten(said, 500)} (deactivate and activate the "
                          "topology to try again)"), ""
    return "failed", f"failed: {failure} ({on} {driver_state})", ""


def _alive(run: ClusterRun, last: RunState | None, attempts: AttemptsSummary, on: str,
           config: NimbusConfig) -> tuple[str, str]:
    """``(state, detail)`` of a driver the master says runs."""
    suffix = ""
    if attempts.failures_in_row:
        suffix = (f"; relaunched from the checkpoint after a failure"
                  f"{_restart_count(attempts, config)}: "
                  f"{shorten(first_line(attempts.last_failure), 300)}")
    if last is None or last.state == "starting":
        if attempts.relaunch_at:
            return "starting", (f"starting: {on} waits before relaunching from the "
                                f"checkpoint{suffix}")
        up = f"Spark application {last.app_id} is up, waiting for the first batch" \
            if last is not None and last.app_id else "waiting for the Spark application"
        return "starting", f"starting: {up}; {on}{suffix}"
    batch = f"batch {last.batch_id}" if last.batch_id >= 0 else "no batch yet"
    if last.state == "running":
        return "running", f"running: {batch}, {rate(tuple_rate(run.spouts, last))} " \
                          f"tuples/s; {on}{suffix}"
    if last.state == "paused":
        draining = f"; {IN_FLIGHT}" if last.in_flight else ""
        return "paused", f"paused: spouts stopped, {batch}; {on}{draining}{suffix}"
    if last.state == "failed":
        return "failed", (f"failed: {first_line(error_text(last))} ({on} is exiting; "
                          f"see {run.dir.logs / 'stderr'})")
    if last.state in ("stopping", "stopped"):
        return "stopping", f"stopping: {on} is stopping"
    return last.state, f"{last.state}: {on}"


def _failure(run: ClusterRun, last: RunState | None, attempts: AttemptsSummary,
             view: MasterView) -> str:
    if last is not None and last.state == "failed" and last.error:
        return first_line(error_text(last))
    if attempts.last_failure:
        return shorten(first_line(attempts.last_failure), 500)
    line = last_stderr_line(run.dir.logs / "stderr", run.dir.root)
    said = "the driver exited without a final status" + (f": {line}" if line else "")
    # Before the driver takes its work directory's logs (or when Python never
    # started), what it wrote is on its worker.
    driver = view.drivers.get(run.driver_id)
    worker = view.worker(driver.worker_id) if driver is not None else None
    link = worker.driver_log(run.driver_id, "stdout") if worker is not None else ""
    return said + (f" (its worker's log: {link})" if link else "")


def _restart_count(attempts: AttemptsSummary, config: NimbusConfig) -> str:
    """`` (restart k of N)`` of a driver relaunched after k failures in a row."""
    if not config.restart_failed or not attempts.failures_in_row:
        return ""
    return f" (restart {attempts.failures_in_row} of {config.max_restarts})"
