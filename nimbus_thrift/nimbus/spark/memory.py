"""How much of this machine's memory a topology's Spark application takes, read from its
configuration before anything starts, so that the daemon can admit topologies against
what the machine has instead of starting JVMs until it swaps.

The driver runs on this machine in every mode the launcher uses (``local[...]``, and
client mode against a ``spark://`` master); in local mode the executors are threads of
that same JVM, so ``spark.executor.memory`` takes nothing more here, and on a cluster
the executors take the workers' memory, which the cluster's own scheduler admits.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping

#: Spark's default ``spark.driver.memory``.
DEFAULT_DRIVER_MEMORY = 1 << 30
#: Memory an application takes beyond the driver's heap: the JVM's own (metaspace,
#: threads, buffers) and the PySpark Python workers. Measured here: a word count on
#: ``local[*]`` with the default 1 GiB heap peaked at about 1.7 GB RSS on 2 vCPUs.
PROCESS_OVERHEAD = 704 << 20
#: Of the machine's memory, the share topologies may take by default: the rest is the
#: daemon's, the page cache's and everyone else's.
DEFAULT_BUDGET_SHARE = 0.8
#: The largest heap a driver may ask for (a typo such as ``64t`` is refused as a typo).
MAX_DRIVER_MEMORY = 1 << 40

_MEMORY = re.compile(r"^\s*(\d+)\s*([kmgtp]?)b?\s*$", re.IGNORECASE)
_UNITS = {"": 1 << 20, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}


def parse_memory(key: str, value: Any) -> int:
    """Bytes of a JVM memory setting as Spark reads ``spark.driver.memory``: a whole
    number with an optional unit (``k``, ``m``, ``g``, ``t``, ``p``, each optionally
    followed by ``b``); a bare number is MiB, as Spark takes it.

    Raises:
        ValueError: not such a string, or over :data:`MAX_DRIVER_MEMORY`; the message
        names ``key`` and the value.
    """
    match = _MEMORY.match(str(value)) if isinstance(value, (str, int)) and \
        not isinstance(value, bool) else None
    if match is None:
        raise ValueError(f"{key} must be a memory size such as 512m or 2g, not {value!r}")
    size = int(match.group(1)) * _UNITS[match.group(2).lower()]
    if size <= 0 or size > MAX_DRIVER_MEMORY:
        raise ValueError(f"{key} must be more than 0 and at most 1t, not {value!r}")
    return size


def memory_request(conf: Mapping[str, Any]) -> int:
    """Bytes of this machine's memory the application of a topology with ``conf`` takes.

    Raises:
        ValueError: ``spark.driver.memory`` is not a memory size.
    """
    driver = conf.get("spark.driver.memory")
    heap = DEFAULT_DRIVER_MEMORY if driver in (None, "") else \
        parse_memory("spark.driver.memory", driver)
    return heap + PROCESS_OVERHEAD


def machine_memory(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """Bytes of memory this machine has (``MemTotal``), or None where it cannot tell."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def default_budget(total: int | None = None) -> int:
    """The memory topologies may take together when no budget is set: a share of the
    machine's (:data:`DEFAULT_BUDGET_SHARE`), or 0 (no limit) where it is unknown."""
    total = machine_memory() if total is None else total
    return int(total * DEFAULT_BUDGET_SHARE) if total else 0


def format_bytes(size: int) -> str:
    """``1.7 GiB``, ``512 MiB``: how refusals state memory."""
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} bytes"
