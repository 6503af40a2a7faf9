"""Admission against a standalone cluster's free room: the sentence names what the
topology needs and what the alive workers have."""

from __future__ import annotations

import pytest

from nimbus_thrift.nimbus.spark.cluster.masterview import Worker
from nimbus_thrift.nimbus.spark.cluster.needs import needs_of, shortfall


def worker(name: str, cores: int, mb: int, alive: bool = True) -> Worker:
    return Worker(worker_id=name, host="h", port=1, cores=cores, cores_free=cores,
                  memory_mb=mb, memory_free_mb=mb, alive=alive)


def test_what_a_topology_needs_follows_sparks_settings_and_defaults() -> None:
    needs = needs_of({"spark.cores.max": "4", "spark.executor.cores": "2",
                      "spark.executor.memory": "2g", "spark.driver.memory": "512m"})
    assert (needs.driver_cores, needs.driver_memory_mb) == (1, 512)
    assert (needs.executors, needs.executor_cores, needs.executor_memory_mb) == (2, 2, 2048)
    with pytest.raises(ValueError, match="spark.driver.cores"):
        needs_of({"spark.driver.cores": "many"})
    with pytest.raises(ValueError, match="spark.executor.memory"):
        needs_of({"spark.executor.memory": "lots"})


def test_the_driver_and_every_executor_must_fit_on_alive_workers() -> None:
    needs = needs_of({"spark.cores.max": "2", "spark.executor.cores": "2"})
    assert shortfall(needs, [worker("a", 3, 3072)]) == ""
    # The driver takes a core of the only worker: no room left for the executor.
    problem = shortfall(needs, [worker("a", 2, 4096)])
    assert "only 0 executor(s)" in problem and "2 core(s) and 4096 MiB free" in problem
    # Two workers: driver on one, executor on the other.
    assert shortfall(needs, [worker("a", 2, 2048), worker("b", 2, 2048)]) == ""
    # A dead worker's room does not count.
    assert "no alive worker" in shortfall(needs, [worker("a", 8, 8192, alive=False)])
    big = needs_of({"spark.driver.memory": "8g"})
    assert "no worker has room for the driver" in shortfall(big, [worker("a", 4, 4096)])
