"""The Nimbus service's file transfers: beginFileUpload, uploadChunk, finishFileUpload,
beginFileDownload, downloadChunk. Each checks its caller first (a transfer belongs to
the principal that began it; a topology's code to those who may read the topology),
then :mod:`.uploads` does the work."""

from __future__ import annotations

from types import ModuleType

from ..security.authz import Authorizer, Call, upload_name
from ..service.access import Access, acl_of
from ..service.wire_errors import client_errors as _client_errors
from ..state.store import Store
from .uploads import TransferError, Transfers


class TransferCalls:
    """The transfer IDL methods.

    Args:
        idl: the loaded IDL module.
        access: the gate.
        authz: who may call what.
        store: the daemon's state (a topology's code upload).
        transfers: the uploads and downloads themselves.
    """

    def __init__(self, idl: ModuleType, access: Access, authz: Authorizer, store: Store,
                 transfers: Transfers):
        self.idl = idl
        self._access = access
        self._authz = authz
        self._store = store
        self._transfers = transfers

    @_client_errors
    def beginFileUpload(self) -> str:
        with self._access.gate("beginFileUpload") as call:
            self._authz.check(call)
            location = self._transfers.begin_upload(owner=call.principal)
            call.subject["upload"] = location
            return location

    @_client_errors
    def uploadChunk(self, location: str, chunk: bytes) -> None:
        with self._access.gate("uploadChunk", upload=location) as call:
            self._check_own_upload(call, location)
            self._transfers.upload_chunk(location, chunk or b"")

    @_client_errors
    def finishFileUpload(self, location: str) -> None:
        with self._access.gate("finishFileUpload", upload=location) as call:
            self._check_own_upload(call, location)
            self._transfers.finish_upload(location)

    def _check_own_upload(self, call: Call, location: str) -> None:
        up = self._transfers.find(location)
        if up is not None:          # else the transfer call says it does not exist
            self._authz.check_upload(call, location, self._transfers.began_by(up.id))

    @_client_errors
    def beginFileDownload(self, file: str) -> str:
        with self._access.gate("beginFileDownload", file=file) as call:
            rec = self._store.topology(file) if isinstance(file, str) else None
            if rec is not None:
                call.subject["topology_id"] = rec.id
                self._authz.check(call, acl_of(rec))
                upload = self._store.upload(rec.code_upload)
            else:
                upload = self._transfers.completed(file) if isinstance(file, str) else None
                if upload is not None:
                    self._authz.check_upload(call, file, self._transfers.began_by(upload.id))
            if upload is None or upload.state != "complete":
                raise TransferError(f"{upload_name(file)!r} is neither a topology id nor "
                                    "the location of a finished upload")
            session = self._transfers.begin_download(upload, owner=call.principal)
            call.subject["download"] = session
            return session

    @_client_errors
    def downloadChunk(self, id: str) -> bytes:
        with self._access.gate("downloadChunk", download=id) as call:
            exists, began_by = self._transfers.download_owner(id)
            if exists:              # else the transfer call says it does not exist
                self._authz.check_download(call, id, began_by)
            return self._transfers.download_chunk(id)
