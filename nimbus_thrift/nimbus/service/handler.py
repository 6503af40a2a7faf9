"""The Nimbus service: ``service Nimbus`` of idl/nimbus.thrift, assembled from groups
of calls over the daemon's state, a launcher and timers.

::

    NimbusHandler: what the RPC server dispatches to; each IDL method is the bound
    │              method of the group METHOD_TABLE names for it
    ├─ groups of calls
    │    topologies      TopologyCalls   submit, kill, (de)activate, rebalance
    │    queries         QueryCalls      Storm 1.x's read-only calls
    │    storm2          StormTwoCalls   Storm 2.x's summaries, lookups, ...
    │    logs            LogCalls        log levels, tuple sampling
    │    pages           PageCalls       the UI's page info
    │    blob_calls      BlobCalls       the blob store
    │    transfer_calls  TransferCalls   file uploads and downloads
    ├─ shared helpers
    │    access          Access          the gate; topology lookups and ACLs
    │    infos           Infos           the IDL's info structs; decoded structures
    │    launching       Launching       launcher calls in each topology's order
    │    placement       TopologyBlobs   a topology's blobs, checked and placed
    └─ on its own
         upkeep          Upkeep          recovery, the timers' due actions, sweeps

Each group is given what it uses in its constructor; the handler makes the shared
state (authorizer, transfers, blob store, locks, background queues, time series) and
hands it out here, in one place.

Per call, the dispatcher (:mod:`nimbus_thrift.rpc.dispatch`) looks each method up
once, when the server is made: ``getattr(handler, name)`` is then the group's bound
method itself, so the table costs a call nothing. (So a subclass's method of the same
name is shadowed: a test that answers a method its own way sets the attribute after
``__init__``.)
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType, ModuleType

from ..blobs.calls import BlobCalls, TopologyBlobs
from ..blobs.store import BlobStore
from ..config import NimbusConfig
from ..launcher import Launcher, RunStatus
from ..role import Role
from ..security.authz import Authorizer, daemon_principal, unclassified
from ..security.runas import TRAVERSE_MODE
from ..state.background import SerialQueues
from ..state.locks import KeyedLocks
from ..state.store import Store
from ..state.timeseries import Sampler, TimeSeries
from ..transfers.calls import TransferCalls
from ..transfers.uploads import TransferLimits, Transfers
from .access import Access
from .infos import Infos
from .launching import Launching
from .logs import LogCalls
from .pages import PageCalls
from .queries import QueryCalls
from .storm2 import StormTwoCalls
from .topologies import TopologyCalls
from .upkeep import Upkeep

#: At stop, how long the launcher calls running get to finish (the ones queued behind
#: them are redone by the next start's recovery).
CLOSE_WAIT_SECS = 5.0

#: The method table: which group of calls (the handler's attribute holding it) answers
#: each method of ``service Nimbus``. Every IDL method is in exactly one group.
METHOD_TABLE: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "topologies": (
        "submitTopology", "submitTopologyWithOpts", "killTopology",
        "killTopologyWithOpts", "activate", "deactivate", "rebalance"),
    "transfer_calls": (
        "beginFileUpload", "uploadChunk", "finishFileUpload", "beginFileDownload",
        "downloadChunk"),
    "queries": (
        "getNimbusConf", "getClusterInfo", "getLeader", "isTopologyNameAllowed",
        "getTopologyInfo", "getTopologyConf", "getTopology", "getUserTopology"),
    "storm2": (
        "getTopologySummaries", "getTopologySummaryByName", "getTopologySummary",
        "getTopologyInfoByName", "getTopologyInfoWithOpts",
        "getTopologyInfoByNameWithOpts", "getTopologyHistory",
        "getOwnerResourceSummaries", "getComponentPendingProfileActions",
        "setWorkerProfiler", "uploadNewCredentials", "getSupervisorAssignments",
        "sendSupervisorWorkerHeartbeats", "sendSupervisorWorkerHeartbeat",
        "processWorkerMetrics", "createStateInZookeeper"),
    "logs": ("setLogConfig", "getLogConfig", "debug"),
    "pages": ("getTopologyPageInfo", "getComponentPageInfo", "getSupervisorPageInfo"),
    "blob_calls": (
        "beginCreateBlob", "beginUpdateBlob", "uploadBlobChunk", "finishBlobUpload",
        "cancelBlobUpload", "getBlobMeta", "setBlobMeta", "beginBlobDownload",
        "downloadBlobChunk", "deleteBlob", "listBlobs", "getBlobReplication",
        "updateBlobReplication", "isRemoteBlobExists"),
})


def _answered_by(table: Mapping[str, tuple[str, ...]]) -> dict[str, str]:
    """The group answering each method, from ``table``.

    Raises:
        ValueError: a method listed in two groups (or twice in one).
    """
    groups: dict[str, str] = {}
    for group, methods in table.items():
        for method in methods:
            if method in groups:
                raise ValueError(f"method {method} is in group {groups[method]} and "
                                 f"again in {group}: each is answered by one group")
            groups[method] = group
    return groups


#: METHOD_TABLE the other way round: the group answering each IDL method.
ANSWERED_BY: Mapping[str, str] = MappingProxyType(_answered_by(METHOD_TABLE))


class NimbusHandler:
    """Implements ``service Nimbus``: each IDL method is an attribute bound to the
    group of calls :data:`METHOD_TABLE` names for it (see the module docstring).

    Args:
        idl: the loaded IDL module.
        config: the daemon's configuration.
        store: the daemon's state.
        launcher: what runs the topologies.
        clock: epoch seconds.
        role: in HA mode, whether this nimbus leads (nimbus/role.py); None: it runs
            alone and always leads.

    Raises:
        ValueError: a method of ``service Nimbus`` missing from
            :data:`.authz.METHODS` (who may call it) or from :data:`METHOD_TABLE`.
    """

    def __init__(self, idl: ModuleType, config: NimbusConfig, store: Store,
                 launcher: Launcher, *, clock: Callable[[], float] = time.time,
                 role: Role | None = None):
        missing = unclassified(idl.Nimbus)
        if missing:
            raise ValueError("methods of service Nimbus missing from nimbus/authz.py's "
                             "METHODS (who may call them): " + ", ".join(missing))
        unanswered = sorted(set(idl.Nimbus.thrift_services) - set(ANSWERED_BY))
        if unanswered:
            raise ValueError("methods of service Nimbus missing from METHOD_TABLE (which "
                             "group answers them): " + ", ".join(unanswered))
        self.idl = idl
        self.config = config
        self.store = store
        self.launcher = launcher
        self.clock = clock
        self.role = role
        #: Who owns what the daemon itself submits (outside a request); with no users
        #: set, the service's only user besides the admins.
        self.daemon_principal = daemon_principal()
        self.authz = Authorizer(config.admins, config.users,
                                daemon_user=self.daemon_principal,
                                allow_anonymous=config.allow_anonymous)
        self.topologies_dir = config.files_dir / "topologies"
        self.topologies_dir.mkdir(parents=True, exist_ok=True)
        if config.run_as_user:
            # Each user enters their own work directory by its name; nobody lists.
            os.chmod(self.topologies_dir, TRAVERSE_MODE)
        self.transfers = Transfers(
            store, config.files_dir, max_upload_bytes=config.max_upload_bytes,
            expiration_secs=config.file_copy_expiration_secs,
            retention_secs=config.upload_retention_secs,
            chunk_bytes=config.download_chunk_bytes, clock=clock,
            limits=TransferLimits.of(config))
        self.blobs = BlobStore.of(config, store, self.transfers, self.topologies_dir, clock)
        self.background = SerialQueues()
        #: Each topology's component stats over time: the page-info calls' windows.
        self.figures = TimeSeries()
        locks = KeyedLocks()                # one per topology
        names_lock = threading.Lock()       # the name table's

        # The shared helpers.
        self.access = Access(idl, store, self.authz, role)
        self.infos = Infos(idl, config, store, launcher, self.topologies_dir, clock, role)
        self.placement = TopologyBlobs(self.authz, store, self.blobs, locks,
                                       self.topologies_dir, self.daemon_principal, clock)
        self.launching = Launching(launcher, store, self.background, config, self.infos,
                                   self.transfers, self.placement, self.topologies_dir,
                                   clock)
        self.upkeep = Upkeep(config, store, launcher, self.launching, self.infos,
                             self.transfers, self.blobs, locks, names_lock,
                             self.topologies_dir, clock, role)
        self.timers = self.upkeep.timers

        # The groups of calls, by the names METHOD_TABLE uses.
        self.topologies = TopologyCalls(
            idl, config, self.access, self.authz, store, launcher, self.launching,
            self.timers, locks, names_lock, self.transfers, self.placement, self.infos,
            self.daemon_principal, clock)
        self.queries = QueryCalls(self.access, self.authz, store, self.infos)
        self.storm2 = StormTwoCalls(idl, self.access, self.authz, store, launcher,
                                    self.infos, clock)
        self.logs = LogCalls(idl, self.access, self.authz, store, locks,
                             self.topologies_dir, clock)
        self.pages = PageCalls(idl, self.access, self.authz, store, launcher, self.infos,
                               self.figures, self.topologies_dir, clock)
        self.blob_calls = BlobCalls(idl, self.access, self.authz, store, self.blobs,
                                    self.placement)
        self.transfer_calls = TransferCalls(idl, self.access, self.authz, store,
                                            self.transfers)
        self._sampler = Sampler(self.pages.sample_figures)

        # The registration: each IDL method is its group's bound method (looked up
        # here once, so a call through the handler takes no extra hop).
        for method, group in ANSWERED_BY.items():
            setattr(self, method, getattr(getattr(self, group), method))

    # --- life of the daemon ---------------------------------------------------------
    def recover(self) -> None:
        """After (re)start: see :meth:`.upkeep.Upkeep.recover`."""
        self.upkeep.recover()

    def take_over(self) -> None:
        """HA mode, this nimbus just elected and caught up with the journal: what a
        restart does (:meth:`recover`: timers re-armed, every topology handed to the
        launcher, which starts what does not run here)."""
        self.upkeep.recover()

    def step_down(self) -> None:
        """HA mode, leadership lost: disarm the timers and stop every topology this
        nimbus runs (the new leader starts them from their checkpoints; two drivers of
        one topology would write the same checkpoint)."""
        self.upkeep.step_down()

    def start(self, address: tuple[str, int]) -> None:
        """Start timers; ``address`` is where clients reach this nimbus."""
        host, port = address
        if host in ("", "0.0.0.0", "::"):
            host = socket.getfqdn()
        self.infos.address = (host, port)
        self.timers.start()
        self._sampler.start()

    def close(self) -> None:
        """Stop the sampler and timers; give running launcher calls a moment."""
        self._sampler.stop()
        self.timers.stop()
        self.background.close(CLOSE_WAIT_SECS)

    # --- what the HTTP side and tools read ------------------------------------------
    @property
    def address(self) -> tuple[str, int]:
        """Where clients reach this nimbus (set by :meth:`start`)."""
        return self.infos.address

    @address.setter
    def address(self, value: tuple[str, int]) -> None:
        self.infos.address = value

    @property
    def launcher_failures(self) -> dict[str, int]:
        """Launcher calls that raised, by method (launch, stop, ...): /metrics."""
        return self.launching.failures

    def run_status(self, topology_id: str) -> RunStatus:
        """What the launcher reports of ``topology_id`` (see :meth:`.Infos.run_status`)."""
        return self.infos.run_status(topology_id)

    def metrics_scope(self) -> Callable[[str], bool]:
        """See :meth:`.queries.QueryCalls.metrics_scope`."""
        return self.queries.metrics_scope()

    def sample_figures(self) -> None:
        """Sample every topology's stats now (the sampler thread does it periodically)."""
        self.pages.sample_figures()

    def run_action(self, topology_id: str) -> None:
        """Run the topology's pending action if it is due (the timers call this)."""
        self.upkeep.run_action(topology_id)
