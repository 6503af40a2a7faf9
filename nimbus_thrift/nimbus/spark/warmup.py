"""Make the driver JVM's class archive ahead of the first submit (``nimbus-thrift
warm-up``, run by ``scripts/setup.sh``).

A topology launched before the archive exists starts 4-6 s slower (see
:class:`.archive.ClassArchive`), and the archive is only made after a first
launch has run a batch. This runs that first launch on a small built-in topology
(:mod:`.warmup_topology`) in a throw-away data directory, waits for the dump its
batch starts, and stops, so that the user's first topology maps the archive too.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import threading
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ...topology.validate import InvalidTopology, check_topology
from ..config import NimbusConfig
from ..launcher import LauncherError, LaunchSpec
from .archive import ClassArchive
from .launcher import SparkLauncher

#: The configuration of the warm-up topology: no spark.* settings, so its archive is
#: the one a topology without driver JVM options of its own maps.
WARMUP_CONF = {"topology.name": "nimbus-warm-up"}
WARMUP_ID = "nimbus-warm-up-1-1"
#: How often the warm-up looks at the application and the dump.
POLL_SECS = 0.25


@dataclass(frozen=True)
class WarmUpResult:
    """``state``: ``made`` (the archive is new), ``present`` (it was there already) or
    ``skipped`` (no archive applies: ``detail`` says why); ``archive`` its path."""

    state: str
    detail: str
    archive: Path | None = None
    seconds: float = 0.0


class WarmUpError(Exception):
    """The warm-up could not make the archive; the message says why and where to look."""


def warm_up(config: NimbusConfig, *, timeout: float = 600.0,
            progress: Callable[[str], None] = lambda line: None) -> WarmUpResult:
    """Make the class archive the configuration's topologies map, unless it exists.

    Launches the warm-up topology with the configuration's Spark (``spark_master``,
    ``spark_cache_dir``) in a temporary data directory, waits until its batch starts the
    dump, stops the application, and waits for the dump (``progress`` is told each
    step). Everything it started is stopped before it returns; the data directory is
    deleted, except after a failure, when it holds the logs the error names.

    Raises:
        WarmUpError: the application failed, or the archive was not made within
            ``timeout`` seconds.
        LauncherError: Spark cannot be launched at all (no PySpark or Java).
    """
    if config.launcher != "spark":
        return WarmUpResult("skipped", f"the launcher is {config.launcher!r}, not spark")
    data_dir = Path(tempfile.mkdtemp(prefix="nimbus-warm-up-"))
    try:
        result = _warm_up(config, data_dir, timeout, progress)
    except WarmUpError:
        raise                       # the data directory stays: the error names its logs
    except BaseException:
        shutil.rmtree(data_dir, ignore_errors=True)
        raise
    shutil.rmtree(data_dir, ignore_errors=True)
    return result


def _warm_up(config: NimbusConfig, data_dir: Path, timeout: float,
             progress: Callable[[str], None]) -> WarmUpResult:
    from .warmup_topology import WarmUp      # imports the topology DSL: only when needed

    began = time.monotonic()
    launcher = SparkLauncher(dataclasses.replace(config, data_dir=data_dir),
                             monitor_secs=POLL_SECS)
    try:
        archive = launcher.class_archive_for(WARMUP_CONF)
        dump = launcher.class_archive
        if archive is None or dump is None:
            why = ("spark_cache_dir is off" if config.spark_cache_dir == "off" else
                   "a custom spark_submit gets no archive" if config.spark_submit else
                   "no Java or PySpark was found")
            return WarmUpResult("skipped", f"no class archive applies: {why}")
        if archive.is_file():
            return WarmUpResult("present", "the class archive is there", archive)
        spec = _launch_spec(data_dir, WarmUp.to_thrift())
        try:
            progress(f"launching a warm-up topology on {config.spark_master}")
            launcher.launch(spec)
            _wait(lambda: dump.dumping or archive.is_file(), began, timeout, spec,
                  launcher)
            progress("first batch done; stopping it and dumping the classes it loaded")
            launcher.stop(spec.topology_id, config.stop_grace_secs)
            _wait(lambda: _dump_ended(dump), began, timeout, spec)
        finally:
            launcher.stop(spec.topology_id, 0)
        if not archive.is_file():
            raise WarmUpError(f"the class archive dump failed; see its log in "
                              f"{archive.parent}/.driver-*.log")
        return WarmUpResult("made", "the class archive is made", archive, _since(began))
    finally:
        launcher.close()                # stops a dump still running (the timeout)


def _dump_ended(dump: ClassArchive) -> bool:
    dump.poll()                 # as the launcher's monitor does, without waiting for it
    return not dump.dumping


def _since(began: float) -> float:
    return time.monotonic() - began


def _launch_spec(data_dir: Path, topology: object) -> LaunchSpec:
    try:
        plan = check_topology(topology, dict(WARMUP_CONF), None)
    except InvalidTopology as exc:          # a bug of ours, said plainly
        raise LauncherError(f"the warm-up topology is invalid: {exc}") from None
    code = data_dir / "code.zip"
    with zipfile.ZipFile(code, "w"):
        pass                                # its components are in the package
    return LaunchSpec(topology_id=WARMUP_ID, name=WARMUP_CONF["topology.name"],
                      topology=topology, conf=dict(WARMUP_CONF), code_path=code,
                      work_dir=data_dir / "topologies" / WARMUP_ID,
                      num_workers=plan.num_workers, executors=plan.executors,
                      tasks=plan.tasks, active=True, plan=plan)


def _wait(done: Callable[[], bool], began: float, timeout: float, spec: LaunchSpec,
          launcher: SparkLauncher | None = None) -> None:
    """Poll ``done`` until true; fail ``timeout`` seconds after ``began`` or, with
    ``launcher``, as soon as the warm-up application has failed or ended."""
    deadline = began + timeout
    pause = threading.Event()
    while not done():
        if launcher is not None:
            status = launcher.status(spec.topology_id)
            if status.state in ("failed", "stopped", "finished"):
                raise WarmUpError(f"the warm-up topology {status.detail}")
        if time.monotonic() > deadline:
            raise WarmUpError(f"no class archive after {timeout:g} s (the warm-up's "
                              f"logs are in {spec.work_dir / 'logs'})")
        pause.wait(POLL_SECS)
