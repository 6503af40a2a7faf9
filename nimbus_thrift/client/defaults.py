"""The client's defaults and the methods it may retry: the one home of each, used by
:class:`~nimbus_thrift.client.NimbusClient`, the submit shortcuts and the CLI's flags.

Plain constants, importing nothing: the CLI imports this module at start-up, which
must not pay for thriftpy2 or structlog.
"""

from __future__ import annotations

#: Where the CLI looks for a nimbus given no host: where the daemon listens by default.
#: An address, not "localhost", which may resolve to ::1 first.
DEFAULT_HOST = "127.0.0.1"

#: Seconds one call may take, sending included. Every Nimbus call is short (the
#: slowest moves one upload chunk); 30 s matches the server's own frame-read and
#: write timeouts, so a stuck peer surfaces in the same time on both sides.
DEFAULT_TIMEOUT = 30.0

#: Seconds one connection attempt may take. A live host answers a SYN in
#: milliseconds; a few seconds covers a loaded host or a lost first SYN.
DEFAULT_CONNECT_TIMEOUT = 5.0

#: Connection attempts per connect, so a Nimbus that is restarting (or briefly
#: over its connection limit) is waited for a little instead of failing at once.
DEFAULT_CONNECT_ATTEMPTS = 3

#: Back-off before the second attempt, multiplied by the factor before each further
#: one, never above the cap: with the defaults 0.1 s then 0.2 s (0.3 s in all), and
#: at most 2 s between any two attempts however many are configured.
DEFAULT_BACKOFF_INITIAL = 0.1
DEFAULT_BACKOFF_FACTOR = 2.0
DEFAULT_BACKOFF_MAX = 2.0

#: Seconds a state change sent to several nimbus seeds waits for a leader to be
#: elected (HA mode: every seed answers that none is) before NoLeader. Issue 28's goal
#: is a new leader within 10 s of the old one's death; twice that leaves room for a
#: ZooKeeper session timeout set longer than the goal's.
DEFAULT_LEADER_WAIT = 20.0
#: The pauses between asking the seeds for the leader again while none is elected:
#: 0.1 s, doubling, at most 1 s, so a leader elected in under a second is found
#: within ~0.1-0.2 s of it, and a 10 s election costs about ten rounds of getLeader.
LEADER_BACKOFF_INITIAL = 0.1
LEADER_BACKOFF_FACTOR = 2.0
LEADER_BACKOFF_MAX = 1.0


#: Bytes per uploadChunk: what Storm's StormSubmitter sends.
DEFAULT_CHUNK_SIZE = 307_200

#: Bytes download_file accepts before it stops and removes the partial file: 1 GiB,
#: four times the daemon's default max_upload_bytes (256 MiB), so whatever a default
#: daemon accepted comes back, and a server streaming without end is stopped.
DEFAULT_MAX_DOWNLOAD_BYTES = 1024 ** 3

#: Seconds to wait for a topology to run. A Spark application takes 10 to 60 s to
#: start its JVM, session and first micro-batch; five minutes covers a busy cluster
#: that must first free executors.
DEFAULT_WAIT_TIMEOUT = 300.0
#: Seconds between getTopologyInfo calls while waiting: the daemon's driver writes its
#: status about twice a second, so polling faster shows nothing new.
DEFAULT_POLL_INTERVAL = 0.5

#: Methods that only read, so sending one twice cannot change anything: the only
#: calls retried (once) after the connection is lost mid-call. beginFileDownload and
#: downloadChunk are not among them: they move a server-side download cursor.
READ_ONLY_METHODS = frozenset({
    "getNimbusConf", "getClusterInfo", "getTopologyInfo", "getTopologyConf",
    "getTopology", "getUserTopology", "getLeader", "isTopologyNameAllowed",
    # Storm 2.x's (not listBlobs, beginBlobDownload, downloadBlobChunk: they move a
    # server-side cursor).
    "getTopologySummaries", "getTopologySummaryByName", "getTopologySummary",
    "getTopologyInfoByName", "getTopologyInfoWithOpts", "getTopologyInfoByNameWithOpts",
    "getTopologyPageInfo", "getComponentPageInfo", "getSupervisorPageInfo", "getLogConfig",
    "getTopologyHistory", "getOwnerResourceSummaries", "getComponentPendingProfileActions",
    "getBlobMeta", "getBlobReplication", "isRemoteBlobExists",
})

#: The state changes: in HA mode only the leader carries them out (a follower refuses
#: them, idl.NOT_LEADER_MESSAGE), so a client of several seeds sends them to the
#: leader from the start. A call left out of this set goes to any nimbus and, if it is
#: refused for not being the leader, is sent to the leader all the same.
STATE_CHANGE_METHODS = frozenset({
    "submitTopology", "submitTopologyWithOpts", "killTopology", "killTopologyWithOpts",
    "activate", "deactivate", "rebalance", "beginFileUpload", "uploadChunk",
    "finishFileUpload", "setLogConfig", "debug", "setWorkerProfiler",
    "uploadNewCredentials", "beginCreateBlob", "beginUpdateBlob", "uploadBlobChunk",
    "finishBlobUpload", "cancelBlobUpload", "setBlobMeta", "deleteBlob",
    "updateBlobReplication", "createStateInZookeeper",
})
