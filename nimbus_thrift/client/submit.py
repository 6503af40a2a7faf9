"""Submitting a topology through a :class:`~nimbus_thrift.client.NimbusClient`, and
following it until it runs.

::

    prepare (topology.package)      load, zip, check locally      PackageError
      | isTopologyNameAllowed       the name is free              AlreadyAliveException
      | getNimbusConf               the zip fits the upload cap   SubmitError
      | upload_file                 307,200-byte chunks, progress
      | submitTopologyWithOpts      initial status ACTIVE/INACTIVE
      | getClusterInfo              the new topology's id
      v
    wait_for_topology               getTopologyInfo every poll_interval until the
                                    sched_status's state word says how it went

The state word is ``sched_status`` up to a colon, if any (``running``; daemons before
issue 32 said ``running: batch 12, ...``)::

    running, finished                    done (paused, too, for an inactive submit)
    starting, paused, stopping (a        keep polling until the timeout
      rebalance restarts it), unknown,
      relaunching (after a failure)
    failed, stopped                      TopologyFailed (also when it was killed)
    unscheduled                          TopologyNotScheduled, at once: nothing will
                                         ever run it (a daemon with launcher "none")

and an error the daemon recorded itself (under ``__nimbus``, e.g. the launcher failed
to launch) is a TopologyFailed too.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

from ..idl import NIMBUS_COMPONENT
from ..topology.package import DEFAULT_MAX_PACKAGE_BYTES, PreparedTopology, prepare
from .defaults import DEFAULT_POLL_INTERVAL, DEFAULT_WAIT_TIMEOUT
from .errors import NimbusClientError, NimbusTimeout

if TYPE_CHECKING:
    from ..topology import Topology

class SubmitClient(Protocol):
    """What submitting and waiting need of a client: the calls below, the IDL, and
    the nimbus's address for the errors. :class:`~nimbus_thrift.client.NimbusClient`
    is one; it calls this module for its shortcuts, so this module names the calls it
    makes instead of importing that class (which would make the two import each
    other)."""

    @property
    def idl(self) -> ModuleType: ...

    @property
    def host(self) -> str: ...

    @property
    def port(self) -> int: ...

    @property
    def address(self) -> str: ...

    def isTopologyNameAllowed(self, name: str) -> bool: ...

    def getNimbusConf(self) -> str: ...

    def upload_file(self, path: str | os.PathLike[str], chunk_size: int = ...,
                    progress: Callable[[int, int], None] | None = None) -> str: ...

    def submitTopologyWithOpts(self, name: str, uploadedJarLocation: str, jsonConf: str,
                               topology: Any, options: Any) -> None: ...

    def getClusterInfo(self) -> Any: ...

    def getTopologyInfo(self, id: str) -> Any: ...


#: The daemon's configuration key of its upload cap (absent on other Nimbus servers).
MAX_UPLOAD_KEY = "nimbus-thrift.max_upload_bytes"

#: State words that end a wait: done, or never going to run.
DONE_STATES = frozenset({"running", "finished"})
FAILED_STATES = frozenset({"failed", "stopped"})
UNSCHEDULED = "unscheduled"


class SubmitError(NimbusClientError):
    """The submission was refused before anything was uploaded (for example the code
    is larger than the daemon accepts)."""


class TopologyFailed(NimbusClientError):
    """A submitted topology failed, stopped or vanished while it was waited for.

    ``topology_id`` is the submitted topology, ``status`` its last ``sched_status``,
    ``reason`` the sentence that says why.
    """

    def __init__(self, host: str, port: int, topology_id: str, status: str,
                 reason: str) -> None:
        self.topology_id = topology_id
        self.status = status
        self.reason = reason
        super().__init__(f"topology {topology_id} did not start: {reason}", host, port)


class TopologyNotScheduled(NimbusClientError):
    """The daemon accepted the topology but nothing will run it (its launcher is
    ``none``): waiting for it to run would never end. The topology stays submitted."""

    def __init__(self, host: str, port: int, topology_id: str, status: str) -> None:
        self.topology_id = topology_id
        self.status = status
        super().__init__(f"topology {topology_id} was submitted but will not run: "
                         f"{status}", host, port)


class TopologyWaitTimeout(NimbusTimeout):
    """The topology was not running within the wait's timeout; it stays submitted
    (and may yet start). ``status`` is the last ``sched_status`` seen."""

    def __init__(self, host: str, port: int, topology_id: str, timeout: float,
                 status: str) -> None:
        super().__init__(host, port, "getTopologyInfo", timeout)
        self.topology_id = topology_id
        self.status = status
        self.args = (f"topology {topology_id} was not running after {float(timeout)} s; "
                     f"last status: {status or '(none)'}",)


def state_of(sched_status: str | None) -> str:
    """The state word of a ``sched_status``: ``"running"`` for ``"running: batch 3"``;
    ``""`` when there is none. ``not scheduled`` (older daemons) reads as
    ``unscheduled``."""
    head = (sched_status or "").partition(":")[0].strip().lower()
    if head == "not scheduled":
        return UNSCHEDULED
    return head if head.isidentifier() else ""


def failure_of(info: Any, status: str) -> str:
    """Why a topology whose ``sched_status`` is ``status`` failed: that status (a
    word, as Storm's) with the first line of the topology's latest error, where the
    launcher and the application put the reason."""
    errors = [e for found in (info.errors or {}).values() for e in found or ()]
    if not errors:
        return status
    latest = max(errors, key=lambda e: e.error_time_secs or 0)
    return f"{status}: {(latest.error or '').partition(chr(10))[0]}"


def submit_prepared(client: SubmitClient, prepared: PreparedTopology, *,
                    inactive: bool = False,
                    progress: Callable[[int, int], None] | None = None) -> str:
    """Upload a prepared topology's code and submit it; return the topology id.

    Args:
        client: a client of the daemon.
        prepared: from :func:`nimbus_thrift.topology.package.prepare`.
        inactive: submit with initial status INACTIVE (spouts paused).
        progress: ``progress(bytes_sent, total)`` after each uploaded chunk.

    Raises:
        AlreadyAliveException: the name is taken (checked before uploading).
        SubmitError: the zip is over the daemon's upload cap (checked before
            uploading).
        InvalidTopologyException: the daemon refused the topology.
        and what :meth:`NimbusClient.call` raises.
    """
    idl = client.idl
    if not client.isTopologyNameAllowed(prepared.name):
        raise idl.AlreadyAliveException(
            msg=f"topology {prepared.name!r} already exists on nimbus at {client.address} "
                "(choose another --name, or kill it first)")
    cap = json.loads(client.getNimbusConf()).get(MAX_UPLOAD_KEY)
    if isinstance(cap, int) and prepared.code.size > cap:
        raise SubmitError(f"the code zip is {prepared.code.size:,} bytes; nimbus at "
                          f"{client.address} accepts at most {cap:,} (its max_upload_bytes)",
                          client.host, client.port)
    location = client.upload_file(prepared.code.path, progress=progress)
    status = idl.TopologyInitialStatus.INACTIVE if inactive \
        else idl.TopologyInitialStatus.ACTIVE
    client.submitTopologyWithOpts(prepared.name, location, prepared.json_conf,
                                  prepared.struct, idl.SubmitOptions(initial_status=status))
    for summary in client.getClusterInfo().topologies:
        if summary.name == prepared.name:
            return str(summary.id)
    # Killed and removed between the two calls: nothing left to report an id of.
    raise TopologyFailed(client.host, client.port, prepared.name, "",
                         "it was accepted, then removed before its id could be read")


def wait_for_topology(client: SubmitClient, topology_id: str, *, inactive: bool = False,
                      timeout: float = DEFAULT_WAIT_TIMEOUT,
                      poll_interval: float = DEFAULT_POLL_INTERVAL,
                      on_status: Callable[[str], None] | None = None) -> Any:
    """Poll ``getTopologyInfo`` until the topology runs; return its last TopologyInfo.

    "Runs" is a ``sched_status`` state of ``running`` (or ``finished``: a bounded
    topology that already completed); for ``inactive`` (submitted or deactivated)
    ``paused`` counts too. See the module docstring for the other states.

    Args:
        topology_id: the id :func:`submit_prepared` returned.
        inactive: the topology was submitted inactive.
        timeout: seconds to wait in all.
        poll_interval: seconds between polls.
        on_status: called with each ``sched_status`` that differs from the one before.

    Raises:
        TopologyFailed: failed, stopped, removed, or the daemon recorded an error of
            its own for it (the launcher could not launch it).
        TopologyNotScheduled: the daemon runs nothing (launcher ``none``); raised at
            the first poll, the topology stays submitted.
        TopologyWaitTimeout: still not running after ``timeout`` (a NimbusTimeout).
        and what :meth:`NimbusClient.call` raises.
    """
    done = DONE_STATES | ({"paused"} if inactive else frozenset())
    deadline = time.monotonic() + timeout
    last: str | None = None
    not_alive = client.idl.NotAliveException
    while True:
        try:
            info = client.getTopologyInfo(topology_id)
        except not_alive:
            raise TopologyFailed(client.host, client.port, topology_id, last or "",
                                 "it no longer exists (killed and removed)") from None
        status = info.sched_status or ""
        if status != last and on_status is not None:
            on_status(status)
        last = status
        own_errors = (info.errors or {}).get(NIMBUS_COMPONENT) or []
        if own_errors:
            latest = max(own_errors, key=lambda e: e.error_time_secs or 0)
            raise TopologyFailed(client.host, client.port, topology_id, status,
                                 latest.error)
        if info.status == "KILLED":
            raise TopologyFailed(client.host, client.port, topology_id, status,
                                 "it was killed")
        state = state_of(status)
        if state in done:
            return info
        if state in FAILED_STATES:
            raise TopologyFailed(client.host, client.port, topology_id, status,
                                 failure_of(info, status))
        if state == UNSCHEDULED:
            raise TopologyNotScheduled(client.host, client.port, topology_id, status)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TopologyWaitTimeout(client.host, client.port, topology_id, timeout,
                                      status)
        time.sleep(min(poll_interval, remaining))


def submit_topology(client: SubmitClient,
                    topology: "type[Topology] | str | os.PathLike[str]",
                    name: str | None = None, conf: Mapping[str, Any] | None = None, *,
                    class_name: str | None = None, inactive: bool = False,
                    wait: bool = False, timeout: float = DEFAULT_WAIT_TIMEOUT,
                    poll_interval: float = DEFAULT_POLL_INTERVAL,
                    progress: Callable[[int, int], None] | None = None,
                    on_status: Callable[[str], None] | None = None,
                    max_bytes: int = DEFAULT_MAX_PACKAGE_BYTES) -> str:
    """Package, check, upload and submit a topology; optionally wait until it runs.
    Returns the topology id. See :meth:`NimbusClient.submit_topology`."""
    with tempfile.TemporaryDirectory(prefix="nimbus-submit-") as tmp:
        prepared = prepare(topology, Path(tmp) / "code.zip", name=name, conf=conf,
                           class_name=class_name, max_bytes=max_bytes)
        topology_id = submit_prepared(client, prepared, inactive=inactive,
                                      progress=progress)
    if wait:
        wait_for_topology(client, topology_id, inactive=inactive, timeout=timeout,
                          poll_interval=poll_interval, on_status=on_status)
    return topology_id
