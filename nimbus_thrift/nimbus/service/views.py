"""What the read calls answer, built once and served to every caller until what it
shows changes: the ClusterSummary (a TopologySummary per topology), each topology's
TopologyInfo, its ACL and its conf as JSON.

Theory of operation. Every change to what a view shows is either committed to the
store (a submit, a kill, a status or timer transition, a rebalance, an error recorded:
the store tells :meth:`Views.changed` after the commit), written to a topology's work
directory (tuple sampling: the store's ``notify``), or seen in what the launcher
reports (pull-based: nothing tells the daemon, so it is asked)::

    store commit ─► changed(id) ─► id's version +1; its listed row is read again
                                   (the whole listing when topologies came or went)
    launcher call done, a read or the sampler sees a new sched_status
                 ─► run_changed(id) ─► that summary's run status is asked again
    the clock    ─► a whole second passed: every uptime and run status again

A view built from what was read at version ``v`` is kept only if the version is still
``v`` when it is done (a change committed meanwhile makes it a one-time answer), and a
kept view is served while the version is unchanged, so no answer is older than the last
commit. A topology's TopologyInfo is also keyed by its launcher's run status, asked at
every read (what Storm shows of executors and their stats), and its uptimes are set at
serve time (a copy once a second, not a rebuild). The ClusterSummary is kept for at
most one second of the daemon's clock (and of the monotonic clock, which a frozen test
clock does not stop): its uptimes and run statuses are never more than a second old,
and asking the launcher of 1,000 topologies happens once a second, not at every call.
It is also shared with the server (rpc/shared.py): the reply's body is encoded once,
not per call (an 860 KB summary of 5,000 topologies cost 5 ms a call).

Nothing here takes a topology's lock; a hit reads neither the store nor the launcher's
list. Builds of the ClusterSummary run one at a time (the others wait for it rather
than build the same thing again); the views' own lock guards dicts only.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Protocol

from ...rpc.shared import share
from ..launcher import RunStatus
from ..security.authz import TopologyAcl
from ..state.store import Store, TopologyListing, TopologyRecord
from .listing import number, secs

#: How long a ClusterSummary is served (and a run status in it kept) at most: Storm's
#: uptimes count whole seconds, so an answer is never wrong by more than one.
CLUSTER_TTL_SECS = 1.0
#: Topologies changed since the last ClusterSummary above which it is listed again
#: whole (one statement) rather than row by row (and every run status asked again):
#: also what bounds the sets of changed ids while nobody asks for the summary.
MAX_ROWS_REREAD = 256
#: Bytes of topology confs kept as JSON (least recently read go first): a conf is
#: serialised once, not per getTopologyConf; the store bounds the parsed ones alike.
CONF_CACHE_BYTES = 64 << 20


class Builder(Protocol):
    """What :class:`Views` builds its answers with (:class:`.infos.Infos`)."""

    def run_status(self, topology_id: str) -> RunStatus: ...
    def summary(self, row: TopologyListing, now: float,
                run: RunStatus | None = None) -> Any: ...
    def topology_info(self, rec: TopologyRecord, num_errors: int | None = None,
                      run: RunStatus | None = None) -> Any: ...
    def cluster_parts(self, now: float) -> tuple[list[Any], int, list[Any]]: ...


@dataclass
class TopologyView:
    """What is kept of one topology while its version holds."""

    id: str
    version: int
    acl: TopologyAcl
    submitted_at: float
    #: TopologyInfo by GetInfoOptions.num_err_choice (None: ALL), with the run status
    #: it was built with.
    infos: dict[int | None, tuple[RunStatus, Any]] = field(default_factory=dict)


@dataclass
class _Cluster:
    store_counter: int
    runs_counter: int
    second: int
    tick: float
    #: Per listed topology, in order: its row, the run status detail shown, its
    #: TopologySummary (the id is the summary's).
    entries: list[tuple[TopologyListing, str, Any]]
    #: id -> its position in ``entries``
    index: dict[str, int]
    value: Any


class Views:
    """The read calls' answers, kept up to date (see the module docstring).

    Args:
        idl: the loaded IDL module (NotAliveException).
        store: the daemon's state; the views watch its commits.
        builder: builds the IDL structs (the daemon's :class:`.infos.Infos`).
        clock: epoch seconds (uptimes).
        monotonic: seconds that never step back (how old a ClusterSummary is).
    """

    def __init__(self, idl: ModuleType, store: Store, builder: Builder,
                 clock: Callable[[], float],
                 monotonic: Callable[[], float] = time.monotonic):
        self._idl = idl
        #: What :meth:`topology` raises for an id it does not know.
        self.not_alive: type[Exception] = idl.NotAliveException
        self._store = store
        self._builder = builder
        self._clock = clock
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._build_lock = threading.Lock()     # one ClusterSummary build at a time
        self._counter = 0                       # every change to any topology
        self._versions: dict[str, int] = {}     # id -> _counter at its last change
        self._removals = 0                      # topologies forgotten so far
        self._topologies: dict[str, TopologyView] = {}
        self._runs_counter = 0
        self._runs_changed: set[str] = set()
        self._rows_changed: set[str] = set()
        self._cluster: _Cluster | None = None
        self._confs: OrderedDict[str, str] = OrderedDict()
        self._conf_bytes = 0
        store.watch(self.changed)

    # --- what tells the views -------------------------------------------------------
    def changed(self, topology_id: str) -> None:
        """``topology_id``'s stored state (or its work directory's settings) changed
        and is committed: what is kept of it is built again at its next read."""
        with self._lock:
            self._counter += 1
            self._versions[topology_id] = self._counter
            self._topologies.pop(topology_id, None)
            if len(self._rows_changed) <= MAX_ROWS_REREAD:    # past it: all again
                self._rows_changed.add(topology_id)

    def run_changed(self, topology_id: str) -> None:
        """What the launcher reports of ``topology_id`` may have changed (a launcher
        call returned): its summary asks the launcher again."""
        with self._lock:
            self._runs_counter += 1
            if len(self._runs_changed) <= MAX_ROWS_REREAD:    # past it: all again
                self._runs_changed.add(topology_id)

    def run_seen(self, topology_id: str, run: RunStatus) -> None:
        """A read or the sampler asked the launcher: a sched_status the ClusterSummary
        does not show yet makes it stale."""
        cluster = self._cluster
        if cluster is not None:
            at = cluster.index.get(topology_id)
            if at is not None and cluster.entries[at][1] != run.detail:
                self.run_changed(topology_id)

    def forget(self, topology_id: str) -> None:
        """``topology_id`` was removed: drop all that is kept of it."""
        with self._lock:
            self._counter += 1
            self._removals += 1
            self._versions.pop(topology_id, None)
            self._topologies.pop(topology_id, None)
            if len(self._rows_changed) <= MAX_ROWS_REREAD:
                self._rows_changed.add(topology_id)
            conf = self._confs.pop(topology_id, None)
            if conf is not None:
                self._conf_bytes -= len(conf)

    # --- one topology ---------------------------------------------------------------
    def topology(self, topology_id: Any) -> tuple[TopologyView, TopologyRecord | None]:
        """What is kept of ``topology_id`` (its ACL: check the caller's right with it),
        and its record when it was just read for it (None on a hit).

        Raises:
            NotAliveException: there is no such topology.
        """
        with self._lock:
            view = self._topologies.get(topology_id) if isinstance(topology_id, str) \
                else None
            if view is not None:
                return view, None
            version = self._versions.get(topology_id, 0) \
                if isinstance(topology_id, str) else 0
            removals = self._removals
        rec = self._store.topology(topology_id) if isinstance(topology_id, str) else None
        if rec is None:
            raise self._idl.NotAliveException(msg=f"no topology with id {topology_id!r}")
        view = TopologyView(rec.id, version, TopologyAcl.of(rec.id, rec.owner, rec.conf),
                            rec.submitted_at)
        with self._lock:
            # Kept only if nothing changed it (or removed any topology) since the read.
            if self._versions.get(rec.id, 0) == version and self._removals == removals:
                self._topologies.setdefault(rec.id, view)
        return view, rec

    def topology_info(self, view: TopologyView, rec: TopologyRecord | None = None,
                      num_errors: int | None = None) -> Any:
        """The TopologyInfo of ``view``'s topology (``rec``: its record if just read;
        ``num_errors``: a NumErrorsChoice, None for ALL), kept while its version and
        its launcher's run status hold.

        Raises:
            NotAliveException: the topology is gone.
            InvalidOption: ``num_errors`` is not a NumErrorsChoice.
        """
        run = self._builder.run_status(view.id)
        self.run_seen(view.id, run)
        kept = view.infos.get(num_errors)
        if kept is not None and kept[0] == run:
            info = kept[1]
        else:
            if rec is None:
                rec = self._store.topology(view.id)
                if rec is None:
                    raise self._idl.NotAliveException(
                        msg=f"no topology with id {view.id!r}")
            info = self._builder.topology_info(rec, num_errors, run=run)
        fresh = self._with_uptimes(info, view.submitted_at, run)
        if fresh is not info or kept is None or kept[1] is not info:
            # Only while the view is the kept one (a change meanwhile dropped it).
            view.infos[num_errors] = (run, fresh)
        return fresh

    def _with_uptimes(self, info: Any, submitted_at: float, run: RunStatus) -> Any:
        """``info`` with its uptimes as of now: itself when they hold, else a copy
        (the cached one is shared with callers and never changed)."""
        now = self._clock()
        uptime = secs(now - submitted_at)
        executor_uptime = secs(now - (run.started_at or now))
        executors = info.executors or []
        if info.uptime_secs == uptime and all(
                e.uptime_secs == executor_uptime for e in executors[:1]):
            return info
        fresh = _copied(info)
        fresh.uptime_secs = uptime
        if executors:
            fresh.executors = [_copied(e) for e in executors]
            for e in fresh.executors:
                e.uptime_secs = executor_uptime
        return fresh

    def conf_json(self, topology_id: str, rec: TopologyRecord | None = None) -> str:
        """getTopologyConf's JSON of ``topology_id`` (a conf never changes once stored):
        serialised once, kept within :data:`CONF_CACHE_BYTES`.

        Raises:
            NotAliveException: there is no such topology.
        """
        with self._lock:
            text = self._confs.get(topology_id)
            if text is not None:
                self._confs.move_to_end(topology_id)
                return text
            removals = self._removals
        if rec is None:
            rec = self._store.topology(topology_id)
            if rec is None:
                raise self._idl.NotAliveException(
                    msg=f"no topology with id {topology_id!r}")
        text = json.dumps(rec.conf, sort_keys=True)
        if len(text) <= CONF_CACHE_BYTES // 4:
            with self._lock:
                if self._removals == removals and topology_id not in self._confs:
                    self._confs[topology_id] = text
                    self._conf_bytes += len(text)
                while self._conf_bytes > CONF_CACHE_BYTES and self._confs:
                    _, old = self._confs.popitem(last=False)
                    self._conf_bytes -= len(old)
        return text

    # --- the cluster ----------------------------------------------------------------
    def cluster_summary(self) -> Any:
        """The ClusterSummary every caller gets (see the module docstring)."""
        hit = self._cluster_hit()
        if hit is not None:
            return hit
        with self._build_lock:
            hit = self._cluster_hit()      # another caller may have just built it
            if hit is not None:
                return hit
            return self._build_cluster()

    def summaries(self) -> list[Any]:
        """Every topology's TopologySummary, as the ClusterSummary lists them."""
        return list(self.cluster_summary().topologies)

    def _cluster_hit(self) -> Any:
        cluster = self._cluster
        if cluster is None:
            return None
        if (cluster.store_counter != self._counter
                or cluster.runs_counter != self._runs_counter
                or int(self._clock()) != cluster.second
                or self._monotonic() - cluster.tick >= CLUSTER_TTL_SECS):
            return None
        return cluster.value

    def _build_cluster(self) -> Any:
        now = self._clock()
        tick = self._monotonic()
        last = self._cluster
        with self._lock:
            store_counter, runs_counter = self._counter, self._runs_counter
            rows_changed, self._rows_changed = self._rows_changed, set()
            runs_changed, self._runs_changed = self._runs_changed, set()
        try:
            entries = None if last is None else \
                self._updated(last, rows_changed, runs_changed, now, tick)
            # Updated in place, the summaries keep their places (and the index).
            index = None if entries is None or last is None else last.index
            if entries is None:
                entries = self._listed(now)
            nodes, nimbus_uptime, nimbuses = self._builder.cluster_parts(now)
        except BaseException:
            with self._lock:        # the next build does them
                self._rows_changed |= rows_changed
                self._runs_changed |= runs_changed
            raise
        # Shared (rpc/shared.py): encoded once per protocol for every caller, and held
        # once however many slow readers are still taking it. Never changed from here.
        value = share(self._idl.ClusterSummary(
            supervisors=nodes, nimbus_uptime_secs=nimbus_uptime,
            topologies=[summary for _, _, summary in entries], nimbuses=nimbuses),
            elements="topologies")
        if index is None:
            index = {e[2].id: at for at, e in enumerate(entries)}
        self._cluster = _Cluster(store_counter, runs_counter, int(now), tick, entries,
                                 index, value)
        return value

    def _listed(self, now: float) -> list[tuple[TopologyListing, str, Any]]:
        """Every topology's summary, from the whole listing."""
        entries = []
        for row in self._store.listing():
            run = self._builder.run_status(str(row.id))
            entries.append((row, run.detail, self._builder.summary(row, now, run)))
        return entries

    def _updated(self, last: _Cluster, rows_changed: set[str], runs_changed: set[str],
                 now: float, tick: float) -> list[tuple[TopologyListing, str, Any]] | None:
        """``last``'s summaries brought up to date: the rows that changed read again,
        run statuses asked again where they may have changed (all of them, and every
        uptime, in a new second); None when the whole listing is cheaper or needed
        (topologies came or went)."""
        if len(rows_changed) > MAX_ROWS_REREAD or not rows_changed <= last.index.keys():
            return None
        rows = {row.id: row for row in self._store.listing_of(sorted(rows_changed))} \
            if rows_changed else {}
        if len(rows) != len(rows_changed):
            return None                 # one was removed
        new_second = int(now) != last.second or tick - last.tick >= CLUSTER_TTL_SECS
        entries = list(last.entries)
        if new_second or len(runs_changed) > MAX_ROWS_REREAD:
            todo: Any = range(len(entries))
        else:
            todo = sorted(last.index[i] for i in rows_changed | runs_changed
                          if i in last.index)
        for at in todo:
            old_row, old_detail, old = entries[at]
            row = rows.get(old.id, old_row)
            run = self._builder.run_status(old.id)
            if (row is not old_row and row != old_row) or run.detail != old_detail:
                entries[at] = (row, run.detail, self._builder.summary(row, now, run))
            elif new_second:
                # Only the uptime moved: a copy (the kept one is shared with callers).
                summary = _copied(old)
                summary.uptime_secs = secs(now - number(row.submitted_at))
                entries[at] = (row, run.detail, summary)
        return entries


def _copied(struct: Any) -> Any:
    """A shallow copy of a thriftpy2 struct (its fields are its ``__dict__``): a
    quarter of what ``copy.copy`` costs, measured on a TopologySummary."""
    clone = object.__new__(type(struct))
    clone.__dict__.update(struct.__dict__)
    return clone
