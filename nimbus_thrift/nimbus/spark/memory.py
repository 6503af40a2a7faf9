"""How much of this machine's memory a topology's Spark application takes, read from its
configuration before anything starts, so that the daemon can admit topologies against
what the machine has (:mod:`..admission`) instead of starting JVMs until it swaps.

The driver runs on this machine in every mode the launcher uses (``local[...]``, and
client mode against a ``spark://`` master); in local mode the executors are threads of
that same JVM, so ``spark.executor.memory`` takes nothing more here, and on a cluster
the executors take the workers' memory, which the cluster's own scheduler admits.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

#: Spark's default ``spark.driver.memory``.
DEFAULT_DRIVER_MEMORY = 1 << 30
#: Memory an application takes beyond the driver's heap: the JVM's own (metaspace,
#: threads, buffers) and the PySpark Python workers. Measured here: a word count on
#: ``local[*]`` with the default 1 GiB heap peaked at about 1.7 GB RSS on 2 vCPUs.
PROCESS_OVERHEAD = 704 << 20
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
