"""The Nimbus methods Storm 2.x added to its IDL, one per method with the IDL's
argument names (thin: each is :meth:`NimbusClient.call`). A base of
:class:`~.client.NimbusClient`, kept apart so the client's own module stays about the
transport and the methods users reach for first."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class StormTwoMethods:
    """Storm 2.x's summaries, page info, log levels, blob store and the rest."""

    call: Callable[..., Any]        # NimbusClient.call

    def setLogConfig(self, name: str, config: Any) -> None:
        """setLogConfig (Storm 2.x; declares no exceptions)."""
        return self.call("setLogConfig", name, config)

    def getLogConfig(self, name: str) -> Any:
        """getLogConfig (Storm 2.x; declares no exceptions)."""
        return self.call("getLogConfig", name)

    def debug(self, name: str, component: str, enable: bool,
              samplingPercentage: float) -> None:
        """debug (Storm 2.x). Raises NotAliveException, AuthorizationException."""
        return self.call("debug", name, component, enable, samplingPercentage)

    def setWorkerProfiler(self, id: str, profileRequest: Any) -> None:
        """setWorkerProfiler (Storm 2.x; declares no exceptions)."""
        return self.call("setWorkerProfiler", id, profileRequest)

    def getComponentPendingProfileActions(self, id: str, component_id: str,
                                          action: int) -> list[Any]:
        """getComponentPendingProfileActions (Storm 2.x; declares no
        exceptions)."""
        return self.call("getComponentPendingProfileActions", id, component_id, action)

    def uploadNewCredentials(self, name: str, creds: Any) -> None:
        """uploadNewCredentials (Storm 2.x). Raises NotAliveException,
        InvalidTopologyException, AuthorizationException."""
        return self.call("uploadNewCredentials", name, creds)

    def beginCreateBlob(self, key: str, meta: Any) -> str:
        """beginCreateBlob (Storm 2.x). Raises AuthorizationException,
        KeyAlreadyExistsException."""
        return self.call("beginCreateBlob", key, meta)

    def beginUpdateBlob(self, key: str) -> str:
        """beginUpdateBlob (Storm 2.x). Raises AuthorizationException,
        KeyNotFoundException."""
        return self.call("beginUpdateBlob", key)

    def uploadBlobChunk(self, session: str, chunk: bytes) -> None:
        """uploadBlobChunk (Storm 2.x). Raises AuthorizationException."""
        return self.call("uploadBlobChunk", session, chunk)

    def finishBlobUpload(self, session: str) -> None:
        """finishBlobUpload (Storm 2.x). Raises AuthorizationException."""
        return self.call("finishBlobUpload", session)

    def cancelBlobUpload(self, session: str) -> None:
        """cancelBlobUpload (Storm 2.x). Raises AuthorizationException."""
        return self.call("cancelBlobUpload", session)

    def getBlobMeta(self, key: str) -> Any:
        """getBlobMeta (Storm 2.x). Raises AuthorizationException,
        KeyNotFoundException."""
        return self.call("getBlobMeta", key)

    def setBlobMeta(self, key: str, meta: Any) -> None:
        """setBlobMeta (Storm 2.x). Raises AuthorizationException,
        KeyNotFoundException."""
        return self.call("setBlobMeta", key, meta)

    def beginBlobDownload(self, key: str) -> Any:
        """beginBlobDownload (Storm 2.x). Raises AuthorizationException,
        KeyNotFoundException."""
        return self.call("beginBlobDownload", key)

    def downloadBlobChunk(self, session: str) -> bytes:
        """downloadBlobChunk (Storm 2.x). Raises AuthorizationException."""
        return self.call("downloadBlobChunk", session)

    def deleteBlob(self, key: str) -> None:
        """deleteBlob (Storm 2.x). Raises AuthorizationException,
        KeyNotFoundException, IllegalStateException."""
        return self.call("deleteBlob", key)

    def listBlobs(self, session: str) -> Any:
        """listBlobs (Storm 2.x; declares no exceptions)."""
        return self.call("listBlobs", session)

    def getBlobReplication(self, key: str) -> int:
        """getBlobReplication (Storm 2.x). Raises AuthorizationException,
        KeyNotFoundException."""
        return self.call("getBlobReplication", key)

    def updateBlobReplication(self, key: str, replication: int) -> int:
        """updateBlobReplication (Storm 2.x). Raises AuthorizationException,
        KeyNotFoundException."""
        return self.call("updateBlobReplication", key, replication)

    def createStateInZookeeper(self, key: str) -> None:
        """createStateInZookeeper (Storm 2.x; declares no exceptions)."""
        return self.call("createStateInZookeeper", key)

    def getTopologySummaries(self) -> list[Any]:
        """getTopologySummaries (Storm 2.x). Raises AuthorizationException."""
        return self.call("getTopologySummaries")

    def getTopologySummaryByName(self, name: str) -> Any:
        """getTopologySummaryByName (Storm 2.x). Raises NotAliveException,
        AuthorizationException."""
        return self.call("getTopologySummaryByName", name)

    def getTopologySummary(self, id: str) -> Any:
        """getTopologySummary (Storm 2.x). Raises NotAliveException,
        AuthorizationException."""
        return self.call("getTopologySummary", id)

    def getTopologyInfoByName(self, name: str) -> Any:
        """getTopologyInfoByName (Storm 2.x). Raises NotAliveException,
        AuthorizationException."""
        return self.call("getTopologyInfoByName", name)

    def getTopologyInfoByNameWithOpts(self, name: str, options: Any) -> Any:
        """getTopologyInfoByNameWithOpts (Storm 2.x). Raises NotAliveException,
        AuthorizationException."""
        return self.call("getTopologyInfoByNameWithOpts", name, options)

    def getTopologyInfoWithOpts(self, id: str, options: Any) -> Any:
        """getTopologyInfoWithOpts (Storm 2.x). Raises NotAliveException,
        AuthorizationException."""
        return self.call("getTopologyInfoWithOpts", id, options)

    def getTopologyPageInfo(self, id: str, window: str, is_include_sys: bool) -> Any:
        """getTopologyPageInfo (Storm 2.x). Raises NotAliveException,
        AuthorizationException."""
        return self.call("getTopologyPageInfo", id, window, is_include_sys)

    def getSupervisorPageInfo(self, id: str, host: str, is_include_sys: bool) -> Any:
        """getSupervisorPageInfo (Storm 2.x). Raises NotAliveException,
        AuthorizationException."""
        return self.call("getSupervisorPageInfo", id, host, is_include_sys)

    def getComponentPageInfo(self, topology_id: str, component_id: str, window: str,
                             is_include_sys: bool) -> Any:
        """getComponentPageInfo (Storm 2.x). Raises NotAliveException,
        AuthorizationException."""
        return self.call("getComponentPageInfo",
                         topology_id, component_id, window, is_include_sys)

    def getTopologyHistory(self, user: str) -> Any:
        """getTopologyHistory (Storm 2.x). Raises AuthorizationException."""
        return self.call("getTopologyHistory", user)

    def getOwnerResourceSummaries(self, owner: str) -> list[Any]:
        """getOwnerResourceSummaries (Storm 2.x). Raises AuthorizationException."""
        return self.call("getOwnerResourceSummaries", owner)

    def getSupervisorAssignments(self, node: str) -> Any:
        """getSupervisorAssignments (Storm 2.x). Raises AuthorizationException."""
        return self.call("getSupervisorAssignments", node)

    def sendSupervisorWorkerHeartbeats(self, heartbeats: Any) -> None:
        """sendSupervisorWorkerHeartbeats (Storm 2.x). Raises
        AuthorizationException."""
        return self.call("sendSupervisorWorkerHeartbeats", heartbeats)

    def sendSupervisorWorkerHeartbeat(self, heatbeat: Any) -> None:
        """sendSupervisorWorkerHeartbeat (Storm 2.x). Raises
        AuthorizationException, NotAliveException."""
        return self.call("sendSupervisorWorkerHeartbeat", heatbeat)

    def processWorkerMetrics(self, metrics: Any) -> None:
        """processWorkerMetrics (Storm 2.x; declares no exceptions)."""
        return self.call("processWorkerMetrics", metrics)

    def isRemoteBlobExists(self, blobKey: str) -> bool:
        """isRemoteBlobExists (Storm 2.x). Raises AuthorizationException."""
        return self.call("isRemoteBlobExists", blobKey)