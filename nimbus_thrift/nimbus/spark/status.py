"""What the launcher reports of a topology
(:class:`~nimbus_thrift.nimbus.launcher.RunStatus`): its state and the ``detail``
sentence, read from :class:`.records.Run` and the driver's last ``status.json``, with
the lines of its stderr worth quoting when its application failed.

The state is read, each time it is asked, from whether the JVM is alive and the last
``status.json``::

    JVM    status.json says      -> state     detail (the web page's sentence)
    alive  nothing yet              starting  "starting: waiting for the Spark application"
    alive  starting                 starting  "starting: Spark application ... is up, ..."
    alive  running/paused/stopping  the same  "running: batch 12, 3.4k tuples/s"
    alive  paused, in_flight        paused    "paused: spouts stopped, batch 12; a batch
                                               planned before the pause may still be
                                               running"
    alive  failed                   failed    "failed: <the driver's error> (exiting ...)"
    gone   stopped                  stopped   "stopped: ... (exit code 0)"
    gone   finished                 finished  "finished: the bounded run completed ..."
    gone   failed                   failed    "failed: <error> (exit code 1; see <stderr>)"
    gone   anything else, nothing   failed    "failed: ... without a final status: <last
                                               stderr line> (exit code 1; see <stderr>)"

The detail always starts with the state word and a colon. Storm's ``sched_status`` is
not the detail but :attr:`RunStatus.sched_status`: the state word, or ``relaunching
after a failure`` / ``relaunching with the new parallelism`` (:func:`relaunching`)
between a gone application and its relaunch; tools list it in a table column.
A topology whose Spark UI is on (``spark.ui.enabled: true`` in its conf; it is off
otherwise) has ``, Spark UI http://127.0.0.1:<port>`` after the batch, and that port
is the worker's port in the IDL's summaries (render.py's ``spark_ui`` reads it from
there): that UI is readable by every local account.

A run whose ``launch.json`` another host wrote (HA mode: :attr:`.records.Run.foreign`)
is read from its ``status.json`` alone (:func:`elsewhere_status`): alive while the
driver wrote it in the last few seconds (the fresh limit the launcher passes), the
figures its, the detail ending with ``(on host H)``, and with ``; its last status is
N s old`` once it is stale.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path
from typing import Callable

from ...runner.rundir import (STANDBY_WARMING, RunState, read_untrusted_tail,
                              report_malformed)
from ..config import NimbusConfig
from ..launcher import ComponentStats, RunStatus
from .proctree import exit_text
from .records import Run
from .submit import LOCAL_HOST

#: stderr is searched for its last meaningful line in this many bytes of its end (the
#: topology writes it: only its end is read, however long it grew).
STDERR_TAIL_BYTES = 64 << 10
#: Starts the line the launcher writes to stderr before each launch.
BANNER = "--- nimbus-thrift "
#: Errors kept per topology for getTopologyInfo (Storm keeps 10 per component).
MAX_ERRORS = 10
#: Pseudo-component of errors that belong to the application, not to one component.
SPARK_COMPONENT = "__spark"
#: Follows the batch in a paused topology's detail while the batch Spark planned
#: before the pause may still be running (status.json's ``in_flight``).
IN_FLIGHT = "a batch planned before the pause may still be running"

_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*"
                             r"(?:Error|Exception|Exit|Interrupt|Failure)\b")
_LOOPBACK_URL = re.compile(rf"http://{re.escape(LOCAL_HOST)}:\d{{1,5}}")
_LOG_NOISE = re.compile(r"^\d\d[/-]\d\d[/-]\d\d.* (?:INFO|DEBUG|TRACE) |"
                        r"^\s*at |^\s*\.\.\. \d+ more|^WARNING: ")


def last_stderr_line(path: Path, below: Path | None = None) -> str:
    """The last line of ``path`` worth showing: an exception line if there is one near
    the end, else the last line that is not INFO logging or a stack frame. ``below``:
    as :func:`launch_stderr`'s."""
    lines = [line.rstrip() for line in launch_stderr(path, below) if line.strip()]
    for line in reversed(lines[-200:]):
        if _EXCEPTION_LINE.match(line.strip()):
            return shorten(line.strip())
    for line in reversed(lines):
        if not _LOG_NOISE.match(line):
            return shorten(line.strip())
    return ""


def launch_stderr(path: Path, below: Path | None = None) -> list[str]:
    """The lines of ``path`` (a topology's stderr) the last launch wrote, as far as
    they are in its last :data:`STDERR_TAIL_BYTES`. Read as untrusted input
    (:func:`~nimbus_thrift.runner.rundir.read_untrusted_tail`): a symbolic link, a FIFO
    or a device there is no stderr (logged, rate-limited); with ``below`` (the work
    directory) neither is a link on the way (``logs`` replaced by a link to ``/etc``).
    """
    try:
        data = read_untrusted_tail(path, STDERR_TAIL_BYTES, below=below)
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        report_malformed(path, exc)
        return []
    lines = data.decode("utf-8", "replace").splitlines()
    for index in range(len(lines) - 1, -1, -1):
        if lines[index].startswith(BANNER):
            return lines[index + 1:]               # this launch's output only
    return lines


def shorten(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def rate(value: float) -> str:
    for unit, scale in (("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.1f}{unit}"
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"


def run_status(run: Run, alive: bool, last: RunState | None, config: NimbusConfig,
               clock: Callable[[], float]) -> RunStatus:
    """The status of a started application: ``alive`` whether its JVM lives, ``last``
    its driver's last ``status.json``."""
    # A foreign run's UI (if any) is on its own host's loopback: none to show here.
    ui = "" if run.foreign else ui_address(run, last)
    components = component_stats(last)
    if alive:
        state, detail = alive_detail(run, last, ui, config, clock)
    else:
        state, detail = gone_detail(run, last, config, clock)
    errors = list(run.errors)
    if alive and last is not None and last.state == "failed" and last.error:
        errors.append((last.error_component or SPARK_COMPONENT, last.error,
                       int(last.updated_at)))
    started = last.started_at if last is not None and last.started_at else \
        run.launched_at
    batched = last is not None and last.batch_id >= 0
    return RunStatus(state=state, detail=detail, started_at=started,
                     host=run.host if run.foreign else LOCAL_HOST,
                     port=0 if run.foreign else ui_port(ui) or run.ui_port,
                     ui_url=ui if alive else "",
                     relaunching="" if alive else relaunching(run, last, state, config),
                     components=components, errors=tuple(errors[-MAX_ERRORS:]),
                     restarts=run.restarts,
                     batches=last.batch_id + 1 if batched and last is not None else None,
                     last_batch_secs=last.batch_ms / 1000 if batched and last is not None
                     else None)


def elsewhere_status(run: Run, last: RunState | None, config: NimbusConfig,
                     clock: Callable[[], float], fresh_secs: float) -> RunStatus:
    """The status of a :attr:`~.records.Run.foreign` run (its pid is another host's):
    from ``last``, its driver's ``status.json``, alone. The driver is taken for alive
    while ``last`` is under ``fresh_secs`` old (it writes every 0.5 s), or before its
    first status while its launch is that recent; the detail says the host, and the
    status's age once it is stale."""
    since = last.updated_at if last is not None else run.launched_at
    age = max(0.0, clock() - since)
    alive = age < fresh_secs
    status = run_status(run, alive, last, config, clock)
    note = f"on host {run.host}"
    if not alive:
        note += (f"; its last status is {age:.0f} s old" if last is not None
                 else f"; no status {age:.0f} s after its launch")
    return replace(status, detail=f"{status.detail} ({note})")


def relaunching(run: Run, last: RunState | None, state: str, config: NimbusConfig
                ) -> str:
    """Why the gone application of ``run`` is being launched again (RunStatus's
    ``relaunching``), or "" when it is not: the cases of :func:`gone_detail` that say
    it will be."""
    if run.pending_relaunch and not run.launch_error and not run.stopped and \
            state == "stopped":
        return "with the new parallelism"
    if state == "failed" and not run.pending_relaunch and run.restartable(last, config):
        return "after a failure"
    return ""


def ui_port(url: str) -> int:
    """The port of a Spark UI address :func:`ui_address` gave (0 for none): the
    worker's port in the IDL's summaries, which ``nimbus-thrift info`` shows the UI
    at."""
    match = _LOOPBACK_URL.fullmatch(url or "")
    return int(url.rsplit(":", 1)[1]) if match else 0


def ui_address(run: Run, last: RunState | None) -> str:
    """The URL of the application's Spark UI, or ``""`` when it has none: only when
    the launcher turned it on (``run.ui_port``, the port it asked for), and then the
    driver's report of it when that is a loopback address (Spark takes the next port
    when its own was taken), never another one a status file names."""
    if not run.ui_port:
        return ""
    said = last.ui_url if last is not None else ""
    return said if _LOOPBACK_URL.fullmatch(said or "") else \
        f"http://{LOCAL_HOST}:{run.ui_port}"


def alive_detail(run: Run, last: RunState | None, ui: str, config: NimbusConfig,
                 clock: Callable[[], float]) -> tuple[str, str]:
    """``(state, detail)`` of an application whose JVM lives."""
    ui_text = f", Spark UI {ui}" if ui else ""
    suffix = ""
    if run.last_failure:
        failure = shorten(first_line(run.last_failure), 500)
        suffix = (f"; relaunched from the checkpoint after a failure ({run.restarts} of "
                  f"{config.max_restarts}): {failure}" if run.restarts else
                  f"; relaunched from the checkpoint after: {failure}")
    if run.warm:
        suffix += "; started warm from a standby driver" + (
            " (taken while it warmed up)" if run.warm == STANDBY_WARMING else "")
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
            return "running", (f"running: {batch}, {rate(tuple_rate(run.spouts, last))}"
                               f" tuples/s{ui_text}{suffix}")
        # Until the batch Spark planned before the pause ends, tuples still reach the
        # bolts (for seconds on a busy machine): a user waiting for the topology to be
        # quiet needs to know it is not yet.
        draining = f"; {IN_FLIGHT}" if last.in_flight else ""
        return "paused", (f"paused: spouts stopped, {batch}{ui_text}{draining}{suffix}")
    if state == "stopping":
        return "stopping", f"stopping: the Spark application is stopping (pid {run.pid})"
    if state == "failed":
        error = first_line(error_text(last))
        return "failed", f"failed: {error} (the application is exiting; see " \
                         f"{run.dir.logs / 'stderr'})"
    if state == "finished":
        return gone_detail(run, last, config, clock)
    if state == "stopped":
        return "stopped", f"stopped: the Spark application stopped (pid {run.pid} exiting)"
    return state or "unknown", f"{state or 'unknown'}: pid {run.pid}{ui_text}"


def gone_detail(run: Run, last: RunState | None, config: NimbusConfig,
                clock: Callable[[], float]) -> tuple[str, str]:
    """``(state, detail)`` of an application whose JVM is gone."""
    if last is not None and last.state == "finished":
        batch = f" after batch {last.batch_id}" if last.batch_id >= 0 else ""
        return "finished", f"finished: the bounded run completed{batch}"
    if last is not None and last.state == "stopped":
        return "stopped", (f"stopped: the Spark application stopped "
                           f"({exit_text(run.exit_code)})")
    if run.stopped:
        return "stopped", (f"stopped: the Spark application was stopped "
                           f"({exit_text(run.exit_code)})")
    if run.pending_relaunch:
        if run.launch_error:
            return "failed", f"failed: could not relaunch: {run.launch_error}"
        return "stopped", "stopped: being relaunched with the new parallelism"
    detail = "failed: " + first_line(failure_text(run, last))
    if run.restartable(last, config):
        when = ""
        if run.next_restart_at is not None:
            when = f" in {max(0, math.ceil(run.next_restart_at - clock()))} s"
        detail += (f"; relaunching from the checkpoint{when} (restart "
                   f"{run.restarts + 1} of {config.max_restarts})")
    elif config.restart_failed and run.restarts >= config.max_restarts \
            and run.restarts:
        detail += (f"; gave up after {run.restarts} restarts (deactivate and "
                   "activate the topology to try again)")
    return "failed", detail


def failure_text(run: Run, last: RunState | None, now: float | None = None) -> str:
    """Why an application is gone: its driver's error, or the last line of its
    stderr when it exited without a final status; with the exit code. A
    :attr:`~.records.Run.foreign` one's exit is not seen from here: that it stopped
    writing its status (how long before ``now``, when given)."""
    stderr = run.dir.logs / "stderr"
    if run.foreign and (last is None or last.state != "failed"):
        said = f" ({last.state})" if last is not None else ""
        age = f", {now - last.updated_at:.0f} s before" \
            if last is not None and now is not None else ""
        return (f"the Spark application on host {run.host} stopped writing its "
                f"status{said}{age} (see {stderr})")
    where = f"{exit_text(run.exit_code)}; see {stderr}"
    if last is not None and last.state == "failed":
        # The frames in the user's code (runner/failures.py) stay on the lines below.
        first, _, frames = error_text(last).partition("\n")
        return f"{first} ({where})" + (f"\n{frames}" if frames else "")
    line = last_stderr_line(stderr, run.dir.root)
    said = f" ({last.state})" if last is not None else ""
    what = f": {line}" if line else ""
    return f"the Spark application exited without a final status{said}{what} ({where})"


def error_text(last: RunState) -> str:
    """The driver's error: its message (one line, shortened) and, on the lines below, the
    traceback's frames in the user's code that runner/failures.py kept (bounded there)."""
    message, _, frames = (last.error or "the driver reported a failure").partition("\n")
    error = shorten(message, 500)
    if last.error_component and last.error_component not in error:
        error = f"component {last.error_component!r}: {error}"
    return error + (f"\n{frames}" if frames.strip() else "")


def first_line(text: str) -> str:
    """A status detail is one line: an error's message, not its frames."""
    return text.partition("\n")[0]


def tuple_rate(spouts: tuple[str, ...], last: RunState) -> float:
    """Tuples per second entering the topology (its ``spouts``' rate), else the
    busiest component's."""
    rates = [f.rate for cid, f in last.components.items() if cid in spouts]
    if rates:
        return sum(rates)
    return max([f.rate for f in last.components.values()] or [0.0])


def component_stats(last: RunState | None) -> dict[str, ComponentStats]:
    """The figures of each component in the driver's last ``status.json``."""
    return {cid: ComponentStats(emitted=f.emitted, processed=f.processed, rate=f.rate,
                                latency_ms=f.latency_ms, busy_ms=f.busy_ms)
            for cid, f in (last.components if last is not None else {}).items()}
