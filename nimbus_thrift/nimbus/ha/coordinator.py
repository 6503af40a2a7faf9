"""One nimbus's session with ZooKeeper, under the cluster's root path.

The tree (relative to ``zookeeper_root``)::

    /leader/...          the election's contenders (kazoo's Lock recipe); the first
                         one holds it
    /epoch               written by each new leader; its version is the leader's epoch,
                         checked by every journal write (a former leader's fail)
    /nimbuses/<host:port>  ephemeral: each running nimbus, with what NimbusSummary says
    /log/e-<position>    the journal: one committed state change each, in order
    /parts/<id>/p-<i>    the pieces of an entry larger than one node may hold

kazoo's client runs its own thread; the session's state changes come to listeners
here (connected, suspended: no answers for now, lost: the session expired and every
ephemeral node of ours is gone).
"""

from __future__ import annotations

from collections.abc import Callable

import structlog
from kazoo.client import KazooClient, KazooState
from kazoo.handlers.threading import KazooTimeoutError

log = structlog.get_logger(__name__)

LEADER = "/leader"
EPOCH = "/epoch"
NIMBUSES = "/nimbuses"
LOG = "/log"
PARTS = "/parts"


class CoordinationError(Exception):
    """ZooKeeper cannot be reached or refused what was asked (the message says which)."""


class Coordinator:
    """The session: ``servers`` (``host:port`` each), ``root`` (a path, created if
    missing), ``session_timeout`` (seconds: how long ZooKeeper keeps our session, and
    so our leadership, once it stops hearing from us)."""

    def __init__(self, servers: list[str], root: str, session_timeout: float) -> None:
        if not servers:
            raise CoordinationError("zookeeper_servers is empty")
        self.servers = list(servers)
        self.root = "/" + root.strip("/") if root.strip("/") else ""
        self.session_timeout = session_timeout
        self.client = KazooClient(hosts=",".join(self.servers) + self.root,
                                  timeout=session_timeout)
        self._listeners: list[Callable[[str], None]] = []
        self._stopped = False
        self.client.add_listener(self._on_state)

    def start(self, connect_timeout: float) -> None:
        """Connect and make the tree's parents. Raises CoordinationError."""
        if self.root:
            # The root first, from outside it: a client rooted at a path that does not
            # exist yet cannot make it.
            bare = KazooClient(hosts=",".join(self.servers), timeout=self.session_timeout)
            self._connect(bare, connect_timeout)
            try:
                bare.ensure_path(self.root)
            finally:
                bare.stop()
                bare.close()
        self._connect(self.client, connect_timeout)
        for path in (LEADER, NIMBUSES, LOG, PARTS):
            self.client.ensure_path(path)
        log.info("zookeeper_connected", servers=",".join(self.servers), root=self.root or "/")

    def _connect(self, client: KazooClient, connect_timeout: float) -> None:
        try:
            client.start(timeout=connect_timeout)
        except KazooTimeoutError:
            client.stop()
            client.close()
            if client is self.client:
                self._stopped = True
            raise CoordinationError(
                f"cannot reach ZooKeeper at {','.join(self.servers)} within "
                f"{connect_timeout:g} s (zookeeper_servers)") from None

    def listen(self, listener: Callable[[str], None]) -> None:
        """Call ``listener("connected" | "suspended" | "lost")`` from kazoo's thread (it
        must not block) at each change of the session's state."""
        self._listeners.append(listener)

    def _on_state(self, state: str) -> None:
        name = {KazooState.CONNECTED: "connected", KazooState.SUSPENDED: "suspended",
                KazooState.LOST: "lost"}.get(state, str(state).lower())
        log.info("zookeeper_session", state=name)
        for listener in self._listeners:
            listener(name)

    def stop(self) -> None:
        """End the session (again: nothing)."""
        if self._stopped:
            return
        self._stopped = True
        try:
            self.client.stop()
        finally:
            self.client.close()
