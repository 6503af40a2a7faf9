"""The read-only calls of ``service Nimbus`` (Storm 1.x's): configuration, the cluster
summary, the leader, whether a name is free, one topology's information, configuration
and structure; and the scope of the HTTP side's ``/metrics`` for its caller.

They take no lock: what they answer is kept up to date by :mod:`.views` (built by
:mod:`.infos`) and served to every caller; a topology's ACL is checked per call
against the one kept with it, so a hit reads nothing from the store.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...topology.validate import InvalidTopology, check_name
from ..security.authz import Authorizer, Call
from ..state.store import Store
from .access import Access
from .infos import Infos


class QueryCalls:
    """getNimbusConf, getClusterInfo, getLeader, isTopologyNameAllowed,
    getTopologyInfo, getTopologyConf, getTopology, getUserTopology.

    Args:
        access: the gate and the topology lookups.
        authz: who may call what.
        store: the daemon's state.
        infos: builds the answers.
    """

    def __init__(self, access: Access, authz: Authorizer, store: Store, infos: Infos):
        self._access = access
        self._authz = authz
        self._store = store
        self._infos = infos
        self._views = infos.views

    def getNimbusConf(self) -> str:
        with self._access.gate("getNimbusConf") as call:
            self._authz.check(call)
            return self._infos.nimbus_conf()

    def getClusterInfo(self) -> Any:
        # Every topology is listed to every user, as Storm does: names, owners and
        # counts are not secret; confs, code and details are (the topology rules).
        with self._access.gate("getClusterInfo") as call:
            self._authz.check(call)
            return self._views.cluster_summary()

    def getLeader(self) -> Any:
        with self._access.gate("getLeader") as call:
            self._authz.check(call)
            return self._infos.leader()

    def isTopologyNameAllowed(self, name: str) -> bool:
        with self._access.gate("isTopologyNameAllowed") as call:
            self._authz.check(call)
            try:
                check_name(name)
            except InvalidTopology:
                return False
            return not self._store.name_taken(name)

    def getTopologyInfo(self, id: str) -> Any:
        with self._access.gate("getTopologyInfo", topology=id) as call:
            view, rec = self._views.topology(id)
            self._authz.check(call, view.acl)
            return self._views.topology_info(view, rec)

    def getTopologyConf(self, id: str) -> str:
        with self._access.gate("getTopologyConf", topology=id) as call:
            view, rec = self._views.topology(id)
            self._authz.check(call, view.acl)
            return self._views.conf_json(view.id, rec)

    def getTopology(self, id: str) -> Any:
        # Storm adds its system components (ackers, metrics) here; there are none on Spark.
        with self._access.gate("getTopology", topology=id) as call:
            return self._structure(call, id)

    def getUserTopology(self, id: str) -> Any:
        with self._access.gate("getUserTopology", topology=id) as call:
            return self._structure(call, id)

    def _structure(self, call: Call, id: str) -> Any:
        # The ACL as the views keep it; the structure decoded once per topology.
        view, rec = self._views.topology(id)
        self._authz.check(call, view.acl)
        return self._infos.structure_of(view.id, rec)

    def metrics_scope(self) -> Callable[[str], bool]:
        """The HTTP side's ``/metrics`` for the caller of this request: checked as
        getClusterInfo (USER), then which topologies' series it may see, by id: those
        it may read (TOPOLOGY_READ).

        Raises:
            AuthorizationException: the caller may not call getClusterInfo.
        """
        with self._access.gate("getClusterInfo") as call:
            self._authz.check(call)
        principal = call.principal

        def readable(topology_id: str) -> bool:
            if principal is None:
                return True             # the daemon itself
            try:
                view, _ = self._views.topology(topology_id)
            except self._views.not_alive:
                return False
            return self._authz.may_read(principal, view.acl)
        return readable
