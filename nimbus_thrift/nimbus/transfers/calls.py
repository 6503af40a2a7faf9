"""The Nimbus service's file transfers: beginFileUpload, uploadChunk, finishFileUpload,
beginFileDownload, downloadChunk. Each checks its caller first (a transfer belongs to
the principal that began it; a topology's code to those who may read the topology),
then :mod:`.transfers` does the work. A base of the handler, which sets ``transfers``
with the rest of its state."""

from __future__ import annotations

from ..security.authz import Call, upload_name
from ..service.queries import NimbusQueries
from .uploads import TransferError, Transfers
from ..service.wire_errors import client_errors as _client_errors


class TransferCalls(NimbusQueries):
    """The transfer IDL methods (state from the handler's ``__init__``)."""

    transfers: Transfers

    @_client_errors
    def beginFileUpload(self) -> str:
        with self._gate("beginFileUpload") as call:
            self.authz.check(call)
            location = self.transfers.begin_upload(owner=call.principal)
            call.subject["upload"] = location
            return location

    @_client_errors
    def uploadChunk(self, location: str, chunk: bytes) -> None:
        with self._gate("uploadChunk", upload=location) as call:
            self._check_own_upload(call, location)
            self.transfers.upload_chunk(location, chunk or b"")

    @_client_errors
    def finishFileUpload(self, location: str) -> None:
        with self._gate("finishFileUpload", upload=location) as call:
            self._check_own_upload(call, location)
            self.transfers.finish_upload(location)

    def _check_own_upload(self, call: Call, location: str) -> None:
        up = self.transfers.find(location)
        if up is not None:          # else the transfer call says it does not exist
            self.authz.check_upload(call, location, self.transfers.began_by(up.id))

    @_client_errors
    def beginFileDownload(self, file: str) -> str:
        with self._gate("beginFileDownload", file=file) as call:
            rec = self.store.topology(file) if isinstance(file, str) else None
            if rec is not None:
                call.subject["topology_id"] = rec.id
                self.authz.check(call, self._acl(rec))
                upload = self.store.upload(rec.code_upload)
            else:
                upload = self.transfers.completed(file) if isinstance(file, str) else None
                if upload is not None:
                    self.authz.check_upload(call, file, self.transfers.began_by(upload.id))
            if upload is None or upload.state != "complete":
                raise TransferError(f"{upload_name(file)!r} is neither a topology id nor "
                                    "the location of a finished upload")
            session = self.transfers.begin_download(upload, owner=call.principal)
            call.subject["download"] = session
            return session

    @_client_errors
    def downloadChunk(self, id: str) -> bytes:
        with self._gate("downloadChunk", download=id) as call:
            exists, began_by = self.transfers.download_owner(id)
            if exists:              # else the transfer call says it does not exist
                self.authz.check_download(call, id, began_by)
            return self.transfers.download_chunk(id)
