"""The Nimbus service's blob store calls (Storm 2.x): beginCreateBlob, beginUpdateBlob,
uploadBlobChunk, finishBlobUpload, cancelBlobUpload, getBlobMeta, setBlobMeta,
beginBlobDownload, downloadBlobChunk, deleteBlob, listBlobs, getBlobReplication,
updateBlobReplication, isRemoteBlobExists (:class:`BlobCalls`); and the placement
of a topology's blobs in its work directory (:class:`TopologyBlobs`, which the
topologies' calls use too).

Each call passes its :data:`.authz.METHODS` rule (USER) first, then the blob's own ACL
as Storm's ``BlobStoreAclHandler`` checks it: READ to download or read the replication,
WRITE to update, delete or change the replication, ADMIN to change the ACL, any right
to read the metadata; admins (and the daemon itself) pass every ACL. A session belongs
to the principal that began it. A topology's ``topology.blobstore.map`` is checked at
submit (:meth:`TopologyBlobs.check_map`).

Placement (:mod:`.placement`) copies a topology's blobs into its work directory, each
only while the topology's owner may READ it (:meth:`TopologyBlobs._owner_may_read`, on
the blob's row of that moment), from the map of the stored conf. It happens:

- before each launch: at submit and at every start of the daemon
  (:meth:`TopologyBlobs.materialise`, called by the launching side of the service);
- after a new version of a key (finishBlobUpload) and after a change of its ACL
  (setBlobMeta), in every topology whose stored map names the key
  (:meth:`TopologyBlobs.place_key`): a READ revoked reaches a running topology at once.

A blob refused or gone is removed from the work directory and is an error on the
topology naming the blob (getTopologyInfo's errors, the web page), logged; the other
blobs and topologies are placed as usual.

Errors: the IDL's KeyNotFoundException, KeyAlreadyExistsException,
IllegalStateException and AuthorizationException where the method declares them;
anything else a client got wrong (an unknown session, a key Storm would refuse) is a
TApplicationException INTERNAL_ERROR with one sentence, as Storm's RuntimeException.
"""

from __future__ import annotations

import functools
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Mapping, TypeVar

import structlog

from ...idl import NIMBUS_COMPONENT
from ...topology.validate import InvalidTopology
from ..security.authz import Authorizer, Call, Unauthorized
from ..service.access import Access
from ..service.wire_errors import client_errors as _client_errors
from ..service.wire_errors import storm_errors
from ..state.locks import KeyedLocks
from ..state.store import Blob, Store
from .acl import (ADMIN, ALL, READ, WRITE, Ace, AclType, BadAcl, BlobError, BlobInUse,
                  KeyExists, KeyNotFound, acl_from_json, allowed, check_key,
                  normalize_acl, rights_text)
from .placement import parse_blob_map, topologies_using
from .store import BlobStore

log = structlog.get_logger(__name__)

#: What getBlobReplication and updateBlobReplication report: one daemon, one copy.
REPLICATION = 1

F = TypeVar("F", bound=Callable[..., Any])


def _blob_errors(func: F) -> F:
    """Answer the blob store's errors with the IDL exceptions the method declares;
    what it does not declare stays a BlobError (INTERNAL_ERROR, by client_errors)."""
    @functools.wraps(func)
    def wrapper(self: Any, *args: Any) -> Any:
        try:
            return func(self, *args)
        except KeyNotFound as exc:
            raise self._declared(func.__name__, "KeyNotFoundException", exc) from None
        except KeyExists as exc:
            raise self._declared(func.__name__, "KeyAlreadyExistsException", exc) from None
        except BlobInUse as exc:
            raise self._declared(func.__name__, "IllegalStateException", exc) from None
        except BadAcl as exc:
            raise self._declared(func.__name__, "AuthorizationException", exc) from None
    return wrapper  # type: ignore[return-value]


class BlobCalls:
    """The blob store IDL methods.

    Args:
        idl: the loaded IDL module (the exceptions each method declares).
        access: the gate.
        authz: who may call what (and who is an admin, passing every blob's ACL).
        store: the daemon's state (which topologies map a blob).
        blobs: the blob store itself.
        placement: places a key's new version, or checks its new ACL, in the
            topologies that map it.
    """

    def __init__(self, idl: ModuleType, access: Access, authz: Authorizer, store: Store,
                 blobs: BlobStore, placement: TopologyBlobs):
        self.idl = idl
        self._access = access
        self._authz = authz
        self._store = store
        self._blobs = blobs
        self._placement = placement

    def _declared(self, method: str, name: str, exc: BlobError) -> Exception:
        """The IDL exception ``name`` carrying ``exc``'s message if ``method`` declares
        it, else ``exc`` itself."""
        result = getattr(self.idl.Nimbus, f"{method}_result", None)
        spec = getattr(result, "thrift_spec", None) or {}
        cls = getattr(self.idl, name)
        if any(len(field) > 2 and field[2] is cls for field in spec.values()):
            log.info("request_refused", error=str(exc))
            return cls(msg=str(exc))
        return exc

    # --- ACL checks -----------------------------------------------------------------
    def _checked(self, call: Call, key: Any, mask: int, *, any_of: bool = False) -> Blob:
        """The blob ``key`` if ``call``'s principal has every right of ``mask`` (or
        one of them, ``any_of``) in its ACL; admins and the daemon always do.

        Raises:
            Unauthorized, KeyNotFound, BlobError (an invalid key).
        """
        call.subject["blob"] = key
        blob = self._blobs.get(key)
        principal = call.principal
        if principal is None or self._authz.is_admin(principal):
            return blob
        have = allowed(acl_from_json(blob.acl), principal)
        ok = bool(have & mask) if any_of else (have & mask) == mask
        if not ok:
            need = ("one of " if any_of else "") + rights_text(mask)
            raise Unauthorized(principal, call.operation, f" on blob {key!r}",
                               f"it needs {need} in the blob's ACL, which gives it "
                               f"{rights_text(have) or 'nothing'}")
        return blob

    def _check_session(self, call: Call, session: Any, began_by: str | None,
                       what: str, *, admins: bool) -> None:
        """An upload is its beginner's and admins' (as code uploads); a download its
        beginner's alone (admins begin their own, as code downloads)."""
        principal = call.principal
        if principal is None or principal == began_by \
                or (admins and self._authz.is_admin(principal)):
            return
        raise Unauthorized(principal, call.operation, f" on {what} {session!r}",
                           "only the principal that began it" + (" (and admins)" if admins
                                                                 else "") + " may use it")

    def _acl_of(self, meta: Any) -> list[Ace]:
        """The ACL of a SettableBlobMeta (Storm requires the list; None is empty)."""
        entries = getattr(meta, "acl", None) or []
        out = []
        for entry in entries:
            try:
                kind = AclType(entry.type)
            except ValueError:
                raise BlobError(f"access control type {entry.type!r} is neither USER (2) "
                                "nor OTHER (1)") from None
            access = entry.access if isinstance(entry.access, int) else 0
            out.append(Ace(kind, entry.name or None, access))
        return out

    def _meta(self, blob: Blob) -> Any:
        idl = self.idl
        acl = [idl.AccessControl(type=int(e.type), name=e.name, access=e.access)
               for e in acl_from_json(blob.acl)]
        return idl.ReadableBlobMeta(
            settable=idl.SettableBlobMeta(acl=acl, replication_factor=REPLICATION),
            version=blob.version)

    # --- uploads --------------------------------------------------------------------
    @_client_errors
    @_blob_errors
    def beginCreateBlob(self, key: str, meta: Any) -> str:
        with self._access.gate("beginCreateBlob", blob=key) as call:
            self._authz.check(call)
            # As Storm: the creator gets every right whatever the ACL says.
            acl = normalize_acl(self._acl_of(meta), call.principal, ALL)
            session = self._blobs.begin_create(key, acl, owner=call.principal)
            call.subject["session"] = session
            return session

    @_client_errors
    @_blob_errors
    def beginUpdateBlob(self, key: str) -> str:
        with self._access.gate("beginUpdateBlob", blob=key) as call:
            self._authz.check(call)
            self._checked(call, key, WRITE)
            session = self._blobs.begin_update(key, owner=call.principal)
            call.subject["session"] = session
            return session

    def _own_upload(self, call: Call, session: Any) -> None:
        up = self._blobs.upload(session)
        if up is not None:           # else the blob store says it does not exist
            call.subject["blob"] = up.key
            self._check_session(call, session, up.owner, "blob upload", admins=True)

    @_client_errors
    @_blob_errors
    def uploadBlobChunk(self, session: str, chunk: bytes) -> None:
        with self._access.gate("uploadBlobChunk", session=session) as call:
            self._authz.check(call)
            self._own_upload(call, session)
            self._blobs.upload_chunk(session, chunk or b"")

    @_client_errors
    @_blob_errors
    def finishBlobUpload(self, session: str) -> None:
        with self._access.gate("finishBlobUpload", session=session) as call:
            self._authz.check(call)
            self._own_upload(call, session)
            blob = self._blobs.finish(session)
            call.subject["version"] = blob.version
        # Every topology mapping the key sees the new version before this returns.
        self._placement.place_key(blob.key)

    @_client_errors
    @_blob_errors
    def cancelBlobUpload(self, session: str) -> None:
        with self._access.gate("cancelBlobUpload", session=session) as call:
            self._authz.check(call)
            self._own_upload(call, session)
            self._blobs.cancel(session)

    # --- metadata -------------------------------------------------------------------
    @_client_errors
    @_blob_errors
    def getBlobMeta(self, key: str) -> Any:
        with self._access.gate("getBlobMeta", blob=key) as call:
            self._authz.check(call)
            return self._meta(self._checked(call, key, ALL, any_of=True))

    @_client_errors
    @_blob_errors
    def setBlobMeta(self, key: str, meta: Any) -> None:
        with self._access.gate("setBlobMeta", blob=key) as call:
            self._authz.check(call)
            self._checked(call, key, ADMIN)
            acl = normalize_acl(self._acl_of(meta), call.principal, ADMIN)
            self._blobs.set_acl(key, acl)
        # After the commit: a READ revoked is checked now, in every topology mapping it.
        self._placement.place_key(key)

    @_client_errors
    @_blob_errors
    def isRemoteBlobExists(self, blobKey: str) -> bool:
        with self._access.gate("isRemoteBlobExists", blob=blobKey) as call:
            self._authz.check(call)
            try:
                self._checked(call, blobKey, ALL, any_of=True)
            except KeyNotFound:
                return False
            except BlobError:         # not a valid key: no blob can have it
                return False
            return True

    @_client_errors
    @_blob_errors
    def getBlobReplication(self, key: str) -> int:
        with self._access.gate("getBlobReplication", blob=key) as call:
            self._authz.check(call)
            self._checked(call, key, READ)
            return REPLICATION

    @_client_errors
    @_blob_errors
    def updateBlobReplication(self, key: str, replication: int) -> int:
        # One daemon keeps one copy: the request is checked and acknowledged, and the
        # answer is the replication there is, as Storm's local store would have it.
        with self._access.gate("updateBlobReplication", blob=key) as call:
            self._authz.check(call)
            self._checked(call, key, WRITE)
            call.subject["requested"] = replication
            return REPLICATION

    # --- downloads and listing ------------------------------------------------------
    @_client_errors
    @_blob_errors
    def beginBlobDownload(self, key: str) -> Any:
        with self._access.gate("beginBlobDownload", blob=key) as call:
            self._authz.check(call)
            blob = self._checked(call, key, READ)
            session = self._blobs.begin_download(blob, owner=call.principal)
            call.subject["session"] = session
            return self.idl.BeginDownloadResult(version=blob.version, session=session,
                                                data_size=blob.bytes)

    @_client_errors
    @_blob_errors
    def downloadBlobChunk(self, session: str) -> bytes:
        with self._access.gate("downloadBlobChunk", session=session) as call:
            self._authz.check(call)
            exists, began_by = self._blobs.download_owner(session)
            if exists:
                self._check_session(call, session, began_by, "blob download",
                                    admins=False)
            return self._blobs.download_chunk(session)

    @storm_errors      # declares no AuthorizationException: a refusal is a sentence
    @_blob_errors
    def listBlobs(self, session: str) -> Any:
        # Every key is listed to every user, as Storm does; contents and ACLs are not.
        with self._access.gate("listBlobs") as call:
            self._authz.check(call)
            keys, session = self._blobs.list_page(session)
            return self.idl.ListBlobsResult(keys=keys, session=session)

    @_client_errors
    @_blob_errors
    def deleteBlob(self, key: str) -> None:
        with self._access.gate("deleteBlob", blob=key) as call:
            self._authz.check(call)
            self._checked(call, key, WRITE)
            users = topologies_using(key, ((rec.id, rec.conf)
                                           for rec in self._store.topologies()))
            if users:
                raise BlobInUse(f"blob {key!r} is used by topology {users[0]} (its "
                                "topology.blobstore.map); kill it first"
                                + (f" and {len(users) - 1} more" if len(users) > 1 else ""))
            self._blobs.delete(key)


class TopologyBlobs:
    """The blobs of topologies: a submit's ``topology.blobstore.map`` checked, and
    each mapped blob placed in the topology's work directory while its owner may
    read it.

    Args:
        authz: who is an admin (admins pass every blob's ACL).
        store: the daemon's state (the topologies, their stored confs and owners).
        blobs: the blob store (its blobs, and the copies in work directories).
        locks: the topologies' locks (a placement holds its topology's, so a removal
            deleting the directory waits).
        topologies_dir: the topologies' work directories.
        daemon_principal: the daemon's own principal (what it submits is its, and it
            reads every blob).
        clock: epoch seconds (when a problem is recorded).
    """

    def __init__(self, authz: Authorizer, store: Store, blobs: BlobStore,
                 locks: KeyedLocks, topologies_dir: Path, daemon_principal: str,
                 clock: Callable[[], float]):
        self._authz = authz
        self._store = store
        self._blobs = blobs
        self._locks = locks
        self._topologies_dir = topologies_dir
        self._daemon_principal = daemon_principal
        self._clock = clock

    def check_map(self, call: Call, conf: Mapping[str, Any]) -> None:
        """At submit: ``topology.blobstore.map`` is well formed, names blobs that exist,
        and the submitter may READ each (the topology will).

        Raises:
            InvalidTopology: a malformed map, or a key that does not exist.
            Unauthorized: the submitter may not read one of them.
        """
        try:
            mappings = parse_blob_map(conf)
        except ValueError as exc:
            raise InvalidTopology(str(exc)) from None
        for mapping in mappings:
            try:
                self._readable(call, mapping.key)
            except KeyNotFound:
                raise InvalidTopology(f"topology.blobstore.map names blob "
                                      f"{mapping.key!r}, which does not exist (create it "
                                      "with 'nimbus-thrift blob create')") from None

    def _readable(self, call: Call, key: str) -> None:
        blob = self._blobs.get(check_key(key))
        principal = call.principal
        if principal is None or self._authz.is_admin(principal):
            return
        if not allowed(acl_from_json(blob.acl), principal) & READ:
            raise Unauthorized(principal, call.operation, f" with blob {key!r}",
                               "topology.blobstore.map names it, and its ACL does not "
                               "give the submitter READ")

    def _owner_may_read(self, owner: str, blob: Blob) -> bool:
        """Whether a topology of ``owner`` may have ``blob`` placed: READ in the blob's
        ACL as stored now, as at submit; admins pass every ACL, and so does the daemon's
        own user (what the daemon submits outside a request is its; it reads every
        blob's file on disk anyway)."""
        return (owner == self._daemon_principal or self._authz.is_admin(owner)
                or bool(allowed(acl_from_json(blob.acl), owner) & READ))

    def materialise(self, topology_id: str, conf: Mapping[str, Any]) -> None:
        """Place the blobs of ``conf``'s ``topology.blobstore.map`` in the topology's
        work directory before its launch (at submit and at every start of the daemon).
        ``conf`` is the stored conf (the topology's record), the owner the stored row's:
        nothing is read from the work directory. A blob that cannot be placed, or that
        the owner may no longer read, is an error on the topology, not a failure."""
        rec = self._store.topology(topology_id)
        if rec is None:                     # removed meanwhile: nothing to place
            return
        try:
            mappings = parse_blob_map(conf)
        except ValueError as exc:          # stored before submits checked the map
            problems = [str(exc)]
        else:
            problems = self._blobs.work_dirs.place(self._topologies_dir / topology_id,
                                                  mappings, rec.owner,
                                                  self._owner_may_read)
        self._problems(topology_id, problems)

    def place_key(self, key: str) -> None:
        """Place the current version of ``key`` (after a new version or an ACL change)
        in every topology whose stored map names it, checking each owner's READ now,
        each under its topology's lock (a removal deleting the directory waits)."""
        for rec in self._store.topologies():
            try:
                mapping = next((m for m in parse_blob_map(rec.conf) if m.key == key), None)
            except ValueError:
                continue                    # said at its launch
            if mapping is None:
                continue
            work_dir = self._topologies_dir / rec.id
            with self._locks.hold(rec.id):
                if self._store.topology(rec.id) is None or not work_dir.is_dir():
                    continue
                problems = self._blobs.work_dirs.place(work_dir, [mapping], rec.owner,
                                                      self._owner_may_read)
            self._problems(rec.id, problems)

    def _problems(self, topology_id: str, problems: list[str]) -> None:
        """Log each problem of a placement and record it as an error of the topology."""
        for problem in problems:
            log.warning("topology_blob_missing", topology=topology_id, problem=problem)
            if self._store.topology(topology_id) is not None:
                self._store.add_error(topology_id, NIMBUS_COMPONENT, problem,
                                     int(self._clock()))
