"""The gate every IDL call of ``service Nimbus`` passes, and the topology lookups that
check the caller's right on what they find. Every group of calls is given one
:class:`Access` (the handler makes one for all of them).

Every IDL method runs inside :meth:`Access.gate`: the call's principal is checked by
the rule of :data:`.authz.METHODS` before the method reads or changes anything, and
its outcome goes to the audit log (:mod:`.audit`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from thriftpy2.thrift import TApplicationException

from ..role import Role
from ..security.audit import audited
from ..security.authz import Authorizer, Call, TopologyAcl, Unauthorized
from ..state.store import Store, TopologyRecord


#: The IDL methods that change state: in HA mode a nimbus that does not lead refuses
#: them (Role.refusal) before anything else; every other method is a read any nimbus
#: answers. Storm's followers refuse the same (Nimbus.assertIsLeader).
STATE_CHANGES = frozenset({
    "submitTopology", "submitTopologyWithOpts", "killTopology", "killTopologyWithOpts",
    "activate", "deactivate", "rebalance",
    "beginFileUpload", "uploadChunk", "finishFileUpload",
    "setLogConfig", "debug", "setWorkerProfiler", "uploadNewCredentials",
    "beginCreateBlob", "beginUpdateBlob", "uploadBlobChunk", "finishBlobUpload",
    "cancelBlobUpload", "setBlobMeta", "deleteBlob", "updateBlobReplication",
})


def acl_of(rec: TopologyRecord) -> TopologyAcl:
    """Who may do what with the topology ``rec`` (its owner and its conf's lists)."""
    return TopologyAcl.of(rec.id, rec.owner, rec.conf)


class Access:
    """Runs a call through the authorization gate and the audit log, and finds the
    topologies calls name (answering the IDL's NotAliveException when there is none).

    Args:
        idl: the loaded IDL module (its exceptions are the answers).
        store: the daemon's state, where topologies are looked up.
        authz: who may call what (the rules of :data:`.authz.METHODS`).
        role: in HA mode, whether this nimbus leads (a follower refuses state changes).
    """

    def __init__(self, idl: ModuleType, store: Store, authz: Authorizer,
                 role: Role | None = None):
        self._idl = idl
        self._store = store
        self._authz = authz
        self._role = role

    @contextmanager
    def gate(self, operation: str, **subject: Any) -> Iterator[Call]:
        """Run one IDL call: yields its :class:`~.authz.Call` (the method checks it
        with the authorizer before it reads or changes anything), records the outcome
        in the audit log, and answers a refusal with the IDL's AuthorizationException."""
        if self._role is not None and operation in STATE_CHANGES \
                and not self._role.leading():
            # INTERNAL_ERROR, as Storm's followers answer, naming the leader.
            raise TApplicationException(TApplicationException.INTERNAL_ERROR,
                                        self._role.refusal())
        call = Call.current(operation, **subject)
        try:
            with audited(call):
                yield call
        except Unauthorized as exc:
            raise self._idl.AuthorizationException(msg=str(exc)) from None

    def alive(self, name: Any) -> TopologyRecord:
        """The topology named ``name``, or the IDL's NotAliveException."""
        rec = self._store.topology_named(name) if isinstance(name, str) else None
        if rec is None:
            raise self._idl.NotAliveException(msg=f"no topology named {name!r}")
        return rec

    def by_id(self, topology_id: Any) -> TopologyRecord:
        """The topology with id ``topology_id``, or the IDL's NotAliveException."""
        rec = self._store.topology(topology_id) if isinstance(topology_id, str) else None
        if rec is None:
            raise self._idl.NotAliveException(msg=f"no topology with id {topology_id!r}")
        return rec

    def permitted(self, call: Call, topology_id: Any) -> TopologyRecord:
        """The topology ``topology_id``, if ``call`` may (by its rule) act on it."""
        rec = self.by_id(topology_id)
        self._authz.check(call, acl_of(rec))
        return rec

    def permitted_named(self, call: Call, name: Any) -> TopologyRecord:
        """The topology named ``name``, if ``call`` may (by its rule) act on it; the
        call's audit subject gets its id."""
        rec = self.alive(name)
        call.subject["topology_id"] = rec.id
        self._authz.check(call, acl_of(rec))
        return rec

    def may_read(self, call: Call, rec: TopologyRecord) -> bool:
        """Whether ``call``'s principal may read ``rec`` (the daemon itself may)."""
        return call.principal is None or self._authz.may_read(call.principal, acl_of(rec))
