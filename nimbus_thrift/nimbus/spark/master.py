"""Where a Spark master runs applications: the threads of a ``local`` master, and a
standalone master's workers, read from the JSON status of its web UI.
"""

from __future__ import annotations

import json
import os
import re
import socket
import urllib.error
import urllib.request
from datetime import datetime
from typing import Callable

import structlog

from ..launcher import WorkerNode

log = structlog.get_logger(__name__)

#: The standalone master's web UI port when ``spark_master_ui`` is not set.
MASTER_UI_PORT = 8080
#: Timeout of one request to the standalone master's JSON status.
MASTER_TIMEOUT_SECS = 2.0

_LOCAL_MASTER = re.compile(r"^local(?:\[(\*|\d+)(?:,\s*\d+)?\])?$")


def local_threads(master: str) -> int | None:
    """Threads of a ``local``, ``local[N]``, ``local[*]`` or ``local[N,F]`` master."""
    match = _LOCAL_MASTER.match(master.strip())
    if match is None:
        return None
    count = match.group(1)
    if count is None:
        return 1
    return os.cpu_count() or 1 if count == "*" else int(count)


def local_node(threads: int, cores: list[int], started_at: float,
               version: str, topologies: tuple[str, ...] = ()) -> WorkerNode:
    """This machine as the node of a local master with ``threads`` threads, running
    applications that use ``cores`` cores each (at most ``threads``): those of
    ``topologies``."""
    slots = os.cpu_count() or 1
    used = sum(min(threads, max(1, count)) for count in cores)
    host = socket.gethostname()
    return WorkerNode(node_id=f"local-{host}", host=host, started_at=started_at,
                      slots=slots, used_slots=min(slots, used), version=version,
                      topologies=topologies)


def master_ui_url(master: str, override: str) -> str | None:
    """The JSON status URL of a standalone master (``spark://host:port``)."""
    if override:
        base = override.rstrip("/")
        return base if base.endswith("/json") else base + "/json/"
    if not master.startswith("spark://"):
        return None
    first = master[len("spark://"):].split(",")[0]
    host = first.rsplit(":", 1)[0] if ":" in first else first
    return f"http://{host}:{MASTER_UI_PORT}/json/"


def cluster_nodes(url: str, version: str, clock: Callable[[], float]) -> list[WorkerNode]:
    """The alive workers of the standalone master whose JSON status is at ``url``
    (none when it cannot be read); ``version`` is the Spark they run."""
    try:
        with urllib.request.urlopen(url, timeout=MASTER_TIMEOUT_SECS) as reply:
            data = json.loads(reply.read(4 << 20))
    except (OSError, ValueError, urllib.error.URLError) as exc:
        log.warning("spark_master_unreachable", url=url, error=str(exc))
        return []
    nodes = []
    for worker in data.get("workers") or [] if isinstance(data, dict) else []:
        if not isinstance(worker, dict) or worker.get("state", "ALIVE") != "ALIVE":
            continue
        worker_id = str(worker.get("id") or f"{worker.get('host')}:{worker.get('port')}")
        nodes.append(WorkerNode(
            node_id=worker_id, host=str(worker.get("host") or ""),
            started_at=worker_started(worker_id, clock()),
            slots=int(worker.get("cores") or 0),
            used_slots=int(worker.get("coresused") or 0), version=version))
    return nodes


def worker_started(worker_id: str, default: float) -> float:
    """A standalone worker's id is ``worker-<yyyyMMddHHmmss>-<host>-<port>``, in the
    worker's local time; the master's JSON has no start time otherwise."""
    match = re.match(r"worker-(\d{14})-", worker_id)
    if match is None:
        return default
    try:
        return datetime.strptime(match.group(1), "%Y%m%d%H%M%S").timestamp()
    except ValueError:
        return default
