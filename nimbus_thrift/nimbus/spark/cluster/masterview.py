"""What a standalone master says of its workers and drivers, from its web UI's JSON
(``/json/``): :func:`parse_master` (no sockets) and :class:`MasterWatch`, which reads
it at most every :data:`VIEW_SECS` for every caller.

One read answers every topology's status, the supervisors of getClusterInfo and the
room left for a submit, where the REST server would take a request per driver.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable

#: The master's view is read again after this long.
VIEW_SECS = 2.0
#: One read of the master's JSON.
VIEW_TIMEOUT_SECS = 3.0
#: The JSON of a master with thousands of drivers is a few MB at most.
MAX_VIEW_BYTES = 16 << 20


@dataclass(frozen=True)
class Worker:
    """One worker as the master counts it (memory in MiB, as the master does)."""

    worker_id: str
    host: str
    port: int
    cores: int
    cores_free: int
    memory_mb: int
    memory_free_mb: int
    alive: bool
    #: The worker's web UI (its drivers' stdout and stderr are read there).
    web_url: str = ""

    def driver_log(self, driver_id: str, which: str = "stderr") -> str:
        """The address of a driver's own log on this worker's web UI ("" without one):
        what the JVM wrote, and the Python driver before it took its work
        directory's logs."""
        if not self.web_url.startswith(("http://", "https://")):
            return ""
        return f"{self.web_url.rstrip('/')}/logPage/?driverId={driver_id}&logType={which}"


@dataclass(frozen=True)
class Driver:
    """One driver the master lists (active or completed)."""

    driver_id: str
    state: str
    worker_id: str
    cores: int
    memory_mb: int


@dataclass(frozen=True)
class MasterView:
    """The master's workers and drivers at one moment (``read_at``, monotonic)."""

    workers: tuple[Worker, ...] = ()
    drivers: dict[str, Driver] = field(default_factory=dict)
    read_at: float = 0.0
    #: Why the master could not be read ("" when it was).
    error: str = ""

    def alive_workers(self) -> list[Worker]:
        return [w for w in self.workers if w.alive]

    def worker(self, worker_id: str) -> Worker | None:
        for worker in self.workers:
            if worker.worker_id == worker_id:
                return worker
        return None


def _int(raw: dict[str, Any], key: str) -> int:
    value = raw.get(key)
    try:
        return int(value) if value is not None else 0
    except (TypeError, ValueError):
        return 0


def parse_master(data: Any, read_at: float = 0.0) -> MasterView:
    """The master's ``/json/`` document as a :class:`MasterView` (what is malformed in
    it is left out, never raised)."""
    if not isinstance(data, dict):
        return MasterView(read_at=read_at, error="the master's JSON is not an object")
    workers = []
    for raw in data.get("workers") or []:
        if not isinstance(raw, dict) or not raw.get("id"):
            continue
        cores, memory = _int(raw, "cores"), _int(raw, "memory")
        free_cores = raw.get("coresfree")
        workers.append(Worker(
            worker_id=str(raw["id"]), host=str(raw.get("host") or ""),
            port=_int(raw, "port"), cores=cores,
            cores_free=_int(raw, "coresfree") if free_cores is not None
            else cores - _int(raw, "coresused"),
            memory_mb=memory, memory_free_mb=_int(raw, "memoryfree")
            if raw.get("memoryfree") is not None else memory - _int(raw, "memoryused"),
            alive=str(raw.get("state") or "ALIVE") == "ALIVE",
            web_url=str(raw.get("webuiaddress") or "")))
    drivers: dict[str, Driver] = {}
    # Completed first: a relaunched id listed in both is active.
    for key in ("completeddrivers", "activedrivers"):
        for raw in data.get(key) or []:
            if not isinstance(raw, dict) or not raw.get("id"):
                continue
            drivers[str(raw["id"])] = Driver(
                driver_id=str(raw["id"]), state=str(raw.get("state") or ""),
                worker_id=str(raw.get("worker") or ""), cores=_int(raw, "cores"),
                memory_mb=_int(raw, "memory"))
    return MasterView(workers=tuple(workers), drivers=drivers, read_at=read_at)


def read_master(url: str, timeout: float = VIEW_TIMEOUT_SECS,
                clock: Callable[[], float] = time.monotonic) -> MasterView:
    """The master's view from its JSON at ``url``; an empty view with ``error`` when
    it cannot be read."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            body = reply.read(MAX_VIEW_BYTES + 1)
        if len(body) > MAX_VIEW_BYTES:
            return MasterView(read_at=clock(), error=f"the master's JSON at {url} is "
                                                     f"over {MAX_VIEW_BYTES} bytes")
        return parse_master(json.loads(body), clock())
    except (OSError, ValueError, urllib.error.URLError) as exc:
        reason = getattr(exc, "reason", exc)
        return MasterView(read_at=clock(), error=f"cannot read the master's state at "
                                                 f"{url}: {reason}")


class MasterWatch:
    """The master's view, read again when older than ``max_age`` seconds (one reader
    at a time; the others get the view there is)."""

    def __init__(self, url: str, max_age: float = VIEW_SECS,
                 reader: Callable[[str], MasterView] = read_master,
                 clock: Callable[[], float] = time.monotonic):
        self.url = url
        self.max_age = max_age
        self._reader = reader
        self._clock = clock
        self._view = MasterView(read_at=-max_age * 2, error="not read yet")
        self._reading = threading.Lock()

    def view(self, fresh: bool = False) -> MasterView:
        """The view, no older than ``max_age`` (``fresh``: read now)."""
        view = self._view
        if not fresh and self._clock() - view.read_at < self.max_age:
            return view
        if not self._reading.acquire(blocking=fresh):
            return view                 # another thread reads it right now
        try:
            view = self._view
            if fresh or self._clock() - view.read_at >= self.max_age:
                view = self._reader(self.url)
                self._view = view
            return view
        finally:
            self._reading.release()
