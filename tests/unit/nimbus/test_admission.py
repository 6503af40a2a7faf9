"""Bytes tier: admitting topologies (nimbus/admission.py) and what one Spark application
takes of this machine's memory (nimbus/spark/memory.py), read from its configuration."""

from __future__ import annotations

from pathlib import Path

import pytest

from nimbus_thrift.topology.validate import InvalidTopology

from nimbus_thrift.nimbus.admission import (check_admission, default_budget, format_bytes,
                                            machine_memory)
from nimbus_thrift.nimbus.spark.memory import (DEFAULT_DRIVER_MEMORY, PROCESS_OVERHEAD,
                                               memory_request, parse_memory)


@pytest.mark.parametrize("text,size", [
    ("512m", 512 << 20), ("2g", 2 << 30), ("2G", 2 << 30), ("1536", 1536 << 20),
    ("64k", 64 << 10), ("3gb", 3 << 30), (" 1t ", 1 << 40), (700, 700 << 20),
])
def test_memory_strings_read_as_spark_reads_them(text: object, size: int) -> None:
    assert parse_memory("spark.driver.memory", text) == size


@pytest.mark.parametrize("text", ["lots", "", "1.5g", "-1g", "0", "2x", "1p", True, None,
                                  [1]])
def test_other_memory_strings_are_refused_naming_the_key(text: object) -> None:
    with pytest.raises(ValueError, match=r"spark\.driver\.memory must be"):
        parse_memory("spark.driver.memory", text)


def test_an_application_takes_its_driver_heap_and_the_process_overhead() -> None:
    assert memory_request({}) == DEFAULT_DRIVER_MEMORY + PROCESS_OVERHEAD
    assert memory_request({"spark.driver.memory": "4g"}) == (4 << 30) + PROCESS_OVERHEAD
    # Executors run in the driver's JVM locally and on the workers on a cluster.
    assert memory_request({"spark.executor.memory": "8g"}) == memory_request({})


def test_the_machine_memory_and_the_default_budget(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       25165824 kB\nMemFree:  1 kB\n")
    assert machine_memory(meminfo) == 24 << 30
    assert machine_memory(tmp_path / "missing") is None
    assert default_budget(10 << 30) == 8 << 30
    assert default_budget(0) == 0


def test_sizes_are_stated_in_binary_units() -> None:
    assert format_bytes(int(1.5 * (1 << 30))) == "1.5 GiB"
    assert format_bytes(512 << 20) == "512.0 MiB"
    assert format_bytes(10) == "10 bytes"


def _size(conf: dict[str, int]) -> int:
    return conf["size"]


def test_topologies_past_the_count_are_refused_naming_the_setting() -> None:
    check_admission(0, [{"size": 0}] * 2, _size, max_topologies=3, budget=0)
    with pytest.raises(InvalidTopology, match=r"keeps 3 topologies, its limit "
                                              r"\(max_topologies\)"):
        check_admission(0, [{"size": 0}] * 3, _size, max_topologies=3, budget=0)


def test_memory_past_the_budget_is_refused_saying_what_is_used_and_free() -> None:
    kept = [{"size": 3 << 30}, {"size": 2 << 30}]
    check_admission(3 << 30, kept, _size, max_topologies=10, budget=8 << 30)   # exactly
    with pytest.raises(InvalidTopology) as info:
        check_admission((3 << 30) + 1, kept, _size, max_topologies=10, budget=8 << 30)
    assert str(info.value) == (
        "the topology needs 3.0 GiB of this machine's memory, and the 2 topologies here "
        "take 5.0 GiB of the 8.0 GiB they may use (spark_memory_budget): 3.0 GiB are free")


def test_no_budget_or_a_topology_taking_nothing_is_never_refused_for_memory() -> None:
    check_admission(1 << 40, [{"size": 1 << 40}], _size, max_topologies=10, budget=0)
    check_admission(0, [{"size": 1 << 40}], _size, max_topologies=10, budget=1)


def test_a_kept_topology_whose_size_cannot_be_read_counts_as_none() -> None:
    def size(conf: dict[str, int]) -> int:
        if not conf:
            raise ValueError("spark.driver.memory must be a memory size")
        return conf["size"]
    check_admission(1 << 30, [{}, {"size": 1 << 30}], size, max_topologies=10,
                    budget=2 << 30)
