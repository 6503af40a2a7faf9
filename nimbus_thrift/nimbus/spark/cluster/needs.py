"""What a topology's driver and executors take from a standalone cluster, and whether
the alive workers have it free now: checked at submit in cluster deploy mode, so that
a topology the cluster cannot hold is refused with one sentence instead of waiting
forever as SUBMITTED (the master queues a driver no worker can take) or running with
a fraction of its executors.

Counted as the master counts: cores, and memory in MiB of the JVM heaps it was asked
for (``spark.driver.memory``, ``spark.executor.memory``); the driver takes one worker,
the executors are placed as the master spreads them, one at a time over the workers
with the most free cores, until the application has ``spark.cores.max`` cores.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from ..memory import parse_memory
from .masterview import Worker

#: Spark's defaults for what the driver and each executor ask of a worker.
DEFAULT_DRIVER_CORES = 1
DEFAULT_MEMORY_MB = 1024


@dataclass(frozen=True)
class Needs:
    """What one topology asks of the cluster."""

    driver_cores: int
    driver_memory_mb: int
    cores_max: int
    executor_cores: int
    executor_memory_mb: int

    @property
    def executors(self) -> int:
        return math.ceil(self.cores_max / self.executor_cores)

    def sentence(self) -> str:
        return (f"a driver of {self.driver_cores} core(s) and {self.driver_memory_mb} MiB "
                f"on one worker, and {self.executors} executor(s) of "
                f"{self.executor_cores} core(s) and {self.executor_memory_mb} MiB")


def _cores(conf: Mapping[str, Any], key: str, default: int) -> int:
    value = conf.get(key)
    if value in (None, ""):
        return default
    try:
        cores = int(str(value).strip())
    except ValueError:
        raise ValueError(f"{key} must be a whole number of cores, not {value!r}") from None
    if cores < 1:
        raise ValueError(f"{key} must be at least 1, not {value!r}")
    return cores


def _mib(conf: Mapping[str, Any], key: str) -> int:
    value = conf.get(key)
    if value in (None, ""):
        return DEFAULT_MEMORY_MB
    return max(1, parse_memory(key, value) >> 20)


def needs_of(confs: Mapping[str, str]) -> Needs:
    """What an application with the Spark settings ``confs`` (the launcher's, with the
    topology's: ``spark.cores.max`` and ``spark.executor.cores`` are set by then)
    asks of the cluster.

    Raises:
        ValueError: a setting that is not a number of cores or a memory size.
    """
    cores_max = _cores(confs, "spark.cores.max", 1)
    return Needs(driver_cores=_cores(confs, "spark.driver.cores", DEFAULT_DRIVER_CORES),
                 driver_memory_mb=_mib(confs, "spark.driver.memory"),
                 cores_max=cores_max,
                 executor_cores=min(cores_max,
                                    _cores(confs, "spark.executor.cores", cores_max)),
                 executor_memory_mb=_mib(confs, "spark.executor.memory"))


def shortfall(needs: Needs, workers: list[Worker]) -> str:
    """Why the alive ``workers`` cannot hold ``needs`` now ("" when they can): one
    sentence naming what it needs and what is free."""
    free = {w.worker_id: [w.cores_free, w.memory_free_mb] for w in workers if w.alive}
    total_cores = sum(c for c, _ in free.values())
    total_mb = sum(m for _, m in free.values())
    have = (f"the {len(free)} alive worker(s) have {total_cores} core(s) and "
            f"{total_mb} MiB free")
    if not free:
        return f"it needs {needs.sentence()}, and the master has no alive worker"
    driver_at = max((wid for wid, (c, m) in free.items()
                     if c >= needs.driver_cores and m >= needs.driver_memory_mb),
                    key=lambda wid: free[wid][0], default=None)
    if driver_at is None:
        most = max(free.values(), key=lambda cm: (cm[0], cm[1]))
        return (f"it needs {needs.sentence()}, and no worker has room for the driver "
                f"(the most free on one: {most[0]} core(s), {most[1]} MiB); {have}")
    free[driver_at][0] -= needs.driver_cores
    free[driver_at][1] -= needs.driver_memory_mb
    placed = 0
    while placed < needs.executors:
        fits = [wid for wid, (c, m) in free.items()
                if c >= needs.executor_cores and m >= needs.executor_memory_mb]
        if not fits:
            break
        wid = max(fits, key=lambda w: free[w][0])
        free[wid][0] -= needs.executor_cores
        free[wid][1] -= needs.executor_memory_mb
        placed += 1
    if placed < needs.executors:
        return (f"it needs {needs.sentence()}, and the workers can take the driver and "
                f"only {placed} executor(s) beside it; {have}")
    return ""
