"""Who may call what: every method of ``service Nimbus`` in one table, and the rules
of Storm's ``SimpleACLAuthorizer`` with this daemon's names.

Theory of operation. A request's **principal** is what its transport established
(:func:`nimbus_thrift.current_request`): the OS user on the Unix socket and on loopback
TCP (the kernel says who owns the client's socket), the client certificate's CN on
mutual TLS, and :data:`ANONYMOUS` when nothing says (plain TCP from another machine, a
certificate without a CN, a loopback client the kernel could not name). A call made
outside a request (recovery, timers, an embedding program) is the daemon itself: never
checked.

One namespace for all transports, on purpose: the CA vouches that the certificate
CN alice is the user alice. A certificate may never claim the names whose collision is
dangerous (:func:`reserved_principals`: ``anonymous``, ``root``, the daemon's own OS
user): :class:`CertificatePrincipals` refuses it, and the connection is closed.

``anonymous`` may call nothing, not even the USER reads, unless ``allow_anonymous``
is set; it then counts as a user. Each method has one :class:`Rule`:

=============  ====================================================================
USER           ``admins``, and those in ``users``; with no ``users``, the daemon's
               own OS user (:func:`daemon_principal`): sharing means naming them
TOPOLOGY       ``admins``, the topology's owner (who submitted it), ``topology.users``
TOPOLOGY_READ  as TOPOLOGY, and ``topology.readonly.users``
CODE           a topology's code: as TOPOLOGY_READ; a finished upload: as UPLOAD
UPLOAD         ``admins`` and the principal that began the upload
DOWNLOAD       the principal that began the download session, nobody else
SUPERVISOR     ``admins`` only: calls of Storm's own supervisors and workers, of which
               there are none on Spark (Storm's ``nimbus.supervisor.users``)
=============  ====================================================================

A submit is USER, and its upload must also pass UPLOAD: nobody submits code someone
else uploaded. The blob store's methods are USER here; each blob's own ACL
(``SettableBlobMeta``) is checked by the blob calls themselves. A refusal is
:class:`Unauthorized` (the handler answers the IDL's ``AuthorizationException``),
raised before the call changes anything.
"""

from __future__ import annotations

import enum
import os
import pwd
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from ...rpc.context import current_request
from ...rpc.tls import CertificateRefused, common_name

#: The principal of a request whose transport says nothing about the client (plain TCP
#: from another machine, a certificate without a CN).
ANONYMOUS = "anonymous"
#: The superuser's name: no certificate may claim it.
ROOT = "root"
#: Topology conf keys (Storm's names): principals who may control the topology, and
#: principals who may only read its conf, structure, code and information.
TOPOLOGY_USERS = "topology.users"
TOPOLOGY_READONLY_USERS = "topology.readonly.users"


class Rule(enum.Enum):
    USER = "user"
    TOPOLOGY = "topology"
    TOPOLOGY_READ = "topology-read"
    CODE = "code"
    UPLOAD = "upload"
    DOWNLOAD = "download"
    SUPERVISOR = "supervisor"


@dataclass(frozen=True)
class Method:
    rule: Rule
    #: Every call is an audit event (refused, failed or done). Refusals of the other
    #: methods are audit events too; their successes are not (reads, and the chunks of
    #: a transfer, which its begin and finish bracket: one line per 300 KiB would
    #: drown the audit log).
    audit_all: bool


#: Every method of ``service Nimbus`` (idl/nimbus.thrift) and who may call it. The
#: handler refuses to start if the IDL has a method missing here.
METHODS: dict[str, Method] = {
    "submitTopology": Method(Rule.USER, audit_all=True),
    "submitTopologyWithOpts": Method(Rule.USER, audit_all=True),
    "killTopology": Method(Rule.TOPOLOGY, audit_all=True),
    "killTopologyWithOpts": Method(Rule.TOPOLOGY, audit_all=True),
    "activate": Method(Rule.TOPOLOGY, audit_all=True),
    "deactivate": Method(Rule.TOPOLOGY, audit_all=True),
    "rebalance": Method(Rule.TOPOLOGY, audit_all=True),
    "beginFileUpload": Method(Rule.USER, audit_all=True),
    "uploadChunk": Method(Rule.UPLOAD, audit_all=False),
    "finishFileUpload": Method(Rule.UPLOAD, audit_all=True),
    "beginFileDownload": Method(Rule.CODE, audit_all=True),
    "downloadChunk": Method(Rule.DOWNLOAD, audit_all=False),
    "getNimbusConf": Method(Rule.USER, audit_all=False),
    "getClusterInfo": Method(Rule.USER, audit_all=False),
    "getLeader": Method(Rule.USER, audit_all=False),
    "isTopologyNameAllowed": Method(Rule.USER, audit_all=False),
    "getTopologyInfo": Method(Rule.TOPOLOGY_READ, audit_all=False),
    "getTopologyConf": Method(Rule.TOPOLOGY_READ, audit_all=False),
    "getTopology": Method(Rule.TOPOLOGY_READ, audit_all=False),
    "getUserTopology": Method(Rule.TOPOLOGY_READ, audit_all=False),
    # Storm 2.x: summaries and lookups (user level, as in SimpleACLAuthorizer; the
    # ones that show a topology's details are topology reads).
    "getTopologySummaries": Method(Rule.USER, audit_all=False),
    "getTopologySummaryByName": Method(Rule.USER, audit_all=False),
    "getTopologySummary": Method(Rule.USER, audit_all=False),
    "getTopologyInfoByName": Method(Rule.TOPOLOGY_READ, audit_all=False),
    "getTopologyInfoWithOpts": Method(Rule.TOPOLOGY_READ, audit_all=False),
    "getTopologyInfoByNameWithOpts": Method(Rule.TOPOLOGY_READ, audit_all=False),
    "getTopologyHistory": Method(Rule.USER, audit_all=False),
    "getOwnerResourceSummaries": Method(Rule.USER, audit_all=False),
    # Page info (the UI's pages).
    "getTopologyPageInfo": Method(Rule.TOPOLOGY_READ, audit_all=False),
    "getComponentPageInfo": Method(Rule.TOPOLOGY_READ, audit_all=False),
    "getSupervisorPageInfo": Method(Rule.USER, audit_all=False),
    # Log levels and tuple sampling: changing them controls the topology.
    "setLogConfig": Method(Rule.TOPOLOGY, audit_all=True),
    "getLogConfig": Method(Rule.TOPOLOGY_READ, audit_all=False),
    "debug": Method(Rule.TOPOLOGY, audit_all=True),
    # Profiling and credentials (not supported on Spark, still checked and audited).
    "setWorkerProfiler": Method(Rule.TOPOLOGY, audit_all=True),
    "getComponentPendingProfileActions": Method(Rule.TOPOLOGY_READ, audit_all=False),
    "uploadNewCredentials": Method(Rule.TOPOLOGY, audit_all=True),
    # The blob store: USER here, then the blob's ACL. Chunks are bracketed by their
    # session's begin and finish (audited), like the file transfers.
    "beginCreateBlob": Method(Rule.USER, audit_all=True),
    "beginUpdateBlob": Method(Rule.USER, audit_all=True),
    "uploadBlobChunk": Method(Rule.USER, audit_all=False),
    "finishBlobUpload": Method(Rule.USER, audit_all=True),
    "cancelBlobUpload": Method(Rule.USER, audit_all=True),
    "getBlobMeta": Method(Rule.USER, audit_all=False),
    "setBlobMeta": Method(Rule.USER, audit_all=True),
    "beginBlobDownload": Method(Rule.USER, audit_all=False),
    "downloadBlobChunk": Method(Rule.USER, audit_all=False),
    "deleteBlob": Method(Rule.USER, audit_all=True),
    "listBlobs": Method(Rule.USER, audit_all=False),
    "getBlobReplication": Method(Rule.USER, audit_all=False),
    "updateBlobReplication": Method(Rule.USER, audit_all=True),
    "isRemoteBlobExists": Method(Rule.USER, audit_all=False),
    "createStateInZookeeper": Method(Rule.USER, audit_all=False),
    # Storm's supervisors and workers: none on Spark.
    "getSupervisorAssignments": Method(Rule.SUPERVISOR, audit_all=False),
    "sendSupervisorWorkerHeartbeats": Method(Rule.SUPERVISOR, audit_all=False),
    "sendSupervisorWorkerHeartbeat": Method(Rule.SUPERVISOR, audit_all=False),
    "processWorkerMetrics": Method(Rule.SUPERVISOR, audit_all=False),
}


def unclassified(service: Any) -> list[str]:
    """The methods of a thriftpy2 service (``idl.Nimbus``) missing from :data:`METHODS`."""
    return sorted(set(service.thrift_services) - set(METHODS))


def daemon_principal() -> str:
    """The daemon's own OS user: the owner of what it submits outside a request (what
    the Unix socket would call that user too)."""
    uid = os.geteuid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def reserved_principals(daemon_user: str) -> dict[str, str]:
    """The names no client certificate may claim, each with why: a certificate that
    named one would be that principal (``anonymous``'s grants with allow_anonymous,
    root's topologies, the daemon's own user's rights when no users are set)."""
    return {ANONYMOUS: "it is the name of callers nobody identified",
            ROOT: "it is the superuser's name",
            daemon_user: "it is the daemon's own OS user"}


class CertificatePrincipals:
    """The daemon's ``principal_from_cert``: a verified certificate's subject CN (as
    Storm takes it), None without one; a reserved name is refused.

    Raises (when called):
        CertificateRefused: the CN is one of :func:`reserved_principals`.
    """

    def __init__(self, daemon_user: str):
        self.reserved = reserved_principals(daemon_user)

    def __call__(self, cert: dict[str, Any]) -> str | None:
        name = common_name(cert)
        if name is not None and name in self.reserved:
            raise CertificateRefused(name, f"{self.reserved[name]}, which no "
                                           "certificate may claim")
        return name


@dataclass
class Call:
    """One call of an IDL method: who made it and what it is about (for the audit)."""

    operation: str
    #: None: the daemon itself (no request), never checked nor audited.
    principal: str | None
    peer: str | None
    #: What the call names (topology, topology_id, upload, download), as the audit
    #: line shows it; filled in as the call learns more.
    subject: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def current(cls, operation: str, **subject: Any) -> "Call":
        """The call ``operation`` of the request this thread is processing."""
        assert operation in METHODS, operation
        request = current_request()
        if request is None:
            return cls(operation, None, None, dict(subject))
        principal = request.principal if request.principal is not None else ANONYMOUS
        return cls(operation, principal, request.peer, dict(subject))


@dataclass(frozen=True)
class TopologyAcl:
    """What the topology rules need of one topology."""

    topology: str           # its id
    owner: str
    users: frozenset[str]
    readonly_users: frozenset[str]

    @classmethod
    def of(cls, topology_id: str, owner: str, conf: Mapping[str, Any]) -> "TopologyAcl":
        return cls(topology_id, owner, principals_in(conf, TOPOLOGY_USERS),
                   principals_in(conf, TOPOLOGY_READONLY_USERS))


def principals_in(conf: Mapping[str, Any], key: str) -> frozenset[str]:
    """The principals a topology conf lists under ``key``; a value that is not a list
    of strings (a row stored before submits checked it) grants nothing."""
    value = conf.get(key)
    if not isinstance(value, list):
        return frozenset()
    return frozenset(p for p in value if isinstance(p, str) and p)


def acl_conf_problem(conf: Mapping[str, Any]) -> str | None:
    """Why a submitted conf's ACL keys are unusable, or None."""
    for key in (TOPOLOGY_USERS, TOPOLOGY_READONLY_USERS):
        value = conf.get(key)
        if value is None:
            continue
        if not isinstance(value, list) or not all(isinstance(p, str) and p for p in value):
            return f"{key} must be a list of principal names, not {value!r}"
    return None


class Unauthorized(Exception):
    """A call its principal may not make; the message names the principal, the
    operation and what it was about."""

    def __init__(self, principal: str, operation: str, what: str, allowed: str):
        self.principal = principal
        self.operation = operation
        self.what = what
        super().__init__(f"{principal!r} may not call {operation}{what}: {allowed}")


#: Why anonymous is refused (no principal names in it, as in every refusal).
_ANONYMOUS_REFUSED = ("the caller is not identified (plain TCP from another machine, "
                      "or a certificate without a common name) and allow_anonymous is "
                      "off")


class Authorizer:
    """The rules of the table, for one daemon's ``admins`` and ``users``.

    Args:
        daemon_user: the daemon's own OS user (default :func:`daemon_principal`): with
            no ``users``, it and the admins are the service's users.
        allow_anonymous: let :data:`ANONYMOUS` in, as a user; otherwise it may call
            nothing, whatever the lists say.
    """

    def __init__(self, admins: Iterable[str] = (), users: Iterable[str] = (), *,
                 daemon_user: str | None = None, allow_anonymous: bool = False):
        self.admins = frozenset(admins)
        self.users = frozenset(users)
        self.daemon_user = daemon_principal() if daemon_user is None else daemon_user
        self.allow_anonymous = allow_anonymous

    # --- the rules --------------------------------------------------------------------
    def admitted(self, principal: str) -> bool:
        """Whether any rule may grant ``principal`` anything: all but anonymous, which
        only with allow_anonymous."""
        return principal != ANONYMOUS or self.allow_anonymous

    def is_admin(self, principal: str) -> bool:
        return principal in self.admins and self.admitted(principal)

    def may_use(self, principal: str) -> bool:
        """USER: may use the service at all."""
        if principal == ANONYMOUS:
            return self.allow_anonymous
        if principal in self.admins:
            return True
        return principal in self.users if self.users else principal == self.daemon_user

    def may_control(self, principal: str, acl: TopologyAcl) -> bool:
        """TOPOLOGY: may kill, activate, deactivate and rebalance it."""
        return self.admitted(principal) and (
            principal in self.admins or principal == acl.owner or principal in acl.users)

    def may_read(self, principal: str, acl: TopologyAcl) -> bool:
        """TOPOLOGY_READ: may read its conf, structure, code and information."""
        return self.may_control(principal, acl) or (
            self.admitted(principal) and principal in acl.readonly_users)

    def may_use_upload(self, principal: str, began_by: str | None) -> bool:
        """UPLOAD: ``began_by`` None is an upload whose owner is not known (begun
        outside a request, or before the daemon restarted): admins only."""
        return self.is_admin(principal) or (began_by is not None and principal == began_by
                                            and self.admitted(principal))

    def may_use_download(self, principal: str, began_by: str | None) -> bool:
        """DOWNLOAD: a session is its beginner's alone (admins start their own)."""
        return began_by is not None and principal == began_by and self.admitted(principal)

    def _refuse_anonymous(self, call: Call, what: str = "") -> None:
        """The first check of every rule: anonymous without allow_anonymous."""
        if call.principal is not None and not self.admitted(call.principal):
            raise Unauthorized(call.principal, call.operation, what, _ANONYMOUS_REFUSED)

    # --- checks, by the table ---------------------------------------------------------
    def check(self, call: Call, topology: TopologyAcl | None = None) -> None:
        """Check ``call`` by its method's rule (USER, SUPERVISOR, TOPOLOGY,
        TOPOLOGY_READ, or CODE for a topology's code: pass the topology for the
        topology rules).

        Raises:
            Unauthorized: the call's principal may not make it.
        """
        principal = call.principal
        if principal is None:
            return
        rule = METHODS[call.operation].rule
        self._refuse_anonymous(call, f" on topology {topology.topology!r}"
                               if topology is not None else "")
        if rule is Rule.USER:
            if not self.may_use(principal):
                raise Unauthorized(principal, call.operation, "",
                                   "only the principals in users and admins may use "
                                   "this nimbus" if self.users else
                                   "only the daemon's own OS user and admins may use "
                                   "this nimbus (users is not set)")
            return
        if rule is Rule.SUPERVISOR:
            if not self.is_admin(principal):
                raise Unauthorized(principal, call.operation, "",
                                   "only admins may make the calls of Storm's "
                                   "supervisors")
            return
        assert topology is not None and rule in (Rule.TOPOLOGY, Rule.TOPOLOGY_READ,
                                                 Rule.CODE), (call.operation, rule)
        if rule is Rule.TOPOLOGY:
            if not self.may_control(principal, topology):
                raise Unauthorized(principal, call.operation,
                                   f" on topology {topology.topology!r}",
                                   f"only its owner {topology.owner!r}, admins and the "
                                   f"principals in its {TOPOLOGY_USERS} may")
            return
        if not self.may_read(principal, topology):
            raise Unauthorized(principal, call.operation,
                               f" on topology {topology.topology!r}",
                               f"only its owner {topology.owner!r}, admins and the "
                               f"principals in its {TOPOLOGY_USERS} or "
                               f"{TOPOLOGY_READONLY_USERS} may")

    def check_upload(self, call: Call, location: str, began_by: str | None) -> None:
        """Check that ``call`` may use the upload at ``location``: its own upload
        (uploadChunk, finishFileUpload, beginFileDownload of it, a submit of it). The
        refusal names the upload by :func:`upload_name`, never its path.

        Raises:
            Unauthorized: it is another principal's upload, or one whose owner is not
                known, and the caller is not an admin.
        """
        assert METHODS[call.operation].rule in (Rule.UPLOAD, Rule.CODE) \
            or call.operation.startswith("submitTopology"), call.operation
        principal = call.principal
        what = f" with upload {upload_name(location)!r}"
        self._refuse_anonymous(call, what)
        if principal is None or self.may_use_upload(principal, began_by):
            return
        reason = ("it was begun by another principal" if began_by is not None else
                  "it was begun before the daemon restarted, or by the daemon itself, "
                  "and only admins may use it")
        raise Unauthorized(principal, call.operation, what, reason)

    def check_download(self, call: Call, session: str, began_by: str | None) -> None:
        """Check that ``call`` may read the download session ``session``.

        Raises:
            Unauthorized: another principal began it.
        """
        assert METHODS[call.operation].rule is Rule.DOWNLOAD, call.operation
        principal = call.principal
        self._refuse_anonymous(call, f" on download {session!r}")
        if principal is None or self.may_use_download(principal, began_by):
            return
        raise Unauthorized(principal, call.operation, f" on download {session!r}",
                           "only the principal that began it may read it")


def upload_name(location: object) -> str:
    """An upload as refusals name it: the last part of its location (``<id>.zip``),
    never the daemon's path to it (the location beginFileUpload returns is the file's
    absolute path, as Storm's is; only its beginner is told that)."""
    return str(location).rsplit("/", 1)[-1]
