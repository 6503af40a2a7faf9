"""Who leads: an election on ZooKeeper (kazoo's Lock recipe, Curator's LeaderLatch in
Storm), this nimbus's entry among the running ones, and the epoch that fences a
former leader.

Theory of operation. Each nimbus contends with its ``host:port`` as identifier; the
contender holding the lock leads. A new leader first writes ``/epoch``: the node's new
version is its epoch, and every journal write checks that version in the same
ZooKeeper transaction (replication.py), so once a new leader has written it, nothing a
former one still sends can land. Only then does it catch up on the journal
(``on_gained``), and only after that does :attr:`Leadership.leading` say yes: state
changes are refused until this nimbus has every change its predecessor made.

When the session is suspended (no answer from ZooKeeper for now) the leader stops
taking state changes at once (the journal could not take them anyway); when it is lost
(expired: the lock node and every ephemeral node are gone, another nimbus may already
lead) this nimbus steps down (``on_lost``) and contends again once it reconnects.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

import structlog
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from ..role import NimbusPeer
from .coordinator import EPOCH, LEADER, NIMBUSES, Coordinator

#: How often who leads and who runs is read again, at most (a watch fires at once).
REFRESH_SECS = 2.0
#: How long stopping waits for ZooKeeper to forget this nimbus before it goes anyway.
STOP_WAIT_SECS = 1.0

log = structlog.get_logger(__name__)


def address_of(peer: NimbusPeer) -> str:
    """``host:port``, an IPv6 host in brackets: its identifier in the election and its
    node's name under /nimbuses."""
    host = f"[{peer.host}]" if ":" in peer.host else peer.host
    return f"{host}:{peer.port}"


class Leadership:
    """This nimbus's part in the election. ``on_gained()`` runs on the election's
    thread once the epoch is written (it catches up; leading starts when it returns),
    then ``on_leading()`` (what a leader does first: its own state changes are taken
    by then); ``on_lost()`` when leadership ends for any reason but :meth:`stop`."""

    def __init__(self, coordinator: Coordinator, me: NimbusPeer,
                 on_gained: Callable[[], object], on_lost: Callable[[], None],
                 on_leading: Callable[[], None] = lambda: None) -> None:
        self._zk = coordinator
        self.me = me
        self._on_gained = on_gained
        self._on_leading = on_leading
        self._on_lost = on_lost
        self._election = coordinator.client.Election(LEADER, address_of(me))
        self._leading = False
        #: The version of /epoch this nimbus wrote when it gained leadership.
        self.epoch: int | None = None
        self._end = threading.Event()         # ends the current term
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        #: (the leader's address, the running nimbuses) as last read (see leader()).
        self._seen: tuple[str | None, list[NimbusPeer]] = (None, [me])
        self._wake = threading.Event()
        coordinator.listen(self._on_session)

    # --- what others ask --------------------------------------------------------------
    @property
    def leading(self) -> bool:
        """True while this nimbus leads and may change state."""
        return self._leading

    def leader(self) -> str | None:
        """The leader's ``host:port`` as the election last said, or None while there is
        none. Never waits for ZooKeeper (calls and refusals ask it): kept up to date by
        the watcher thread, the last known value while ZooKeeper cannot be asked."""
        if self.epoch is not None:
            return address_of(self.me)      # this nimbus's own term: known here first
        return self._seen[0]

    def nimbuses(self) -> list[NimbusPeer]:
        """Every running nimbus (this one included), as last registered (see
        :meth:`leader`)."""
        return self._seen[1]

    def refresh(self) -> None:
        """Ask ZooKeeper who contends and who runs now (the watcher thread's step;
        blocks while ZooKeeper does not answer)."""
        client = self._zk.client
        # The watch first, then the read: a change after the read fires it, so no
        # change is missed between the two.
        client.get_children(LEADER, watch=self._changed)
        contenders = self._election.contenders()
        entries = []
        for name in sorted(client.get_children(NIMBUSES, watch=self._changed)):
            try:
                data, _ = client.get(f"{NIMBUSES}/{name}")
                raw = json.loads(data)
                entries.append(NimbusPeer(str(raw["host"]), int(raw["port"]),
                                           float(raw["started_at"]), str(raw["version"])))
            except (NoNodeError, ValueError, KeyError, TypeError):
                continue        # gone meanwhile, or not ours to read
        self._seen = (contenders[0] if contenders else None, entries)

    def _changed(self, _event: object) -> None:
        self._wake.set()            # kazoo's thread: must not block

    def _watch(self) -> None:
        while not self._stopping.is_set():
            try:
                self.refresh()
            except KazooException as exc:
                log.debug("nimbuses_unknown", error=str(exc), effect="last known kept")
            # A watch fires at each change; the pause bounds a missed one.
            self._wake.wait(REFRESH_SECS)
            self._wake.clear()

    # --- running ----------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._contend, name="nimbus-election",
                                        daemon=True)
        self._thread.start()
        try:
            self.refresh()          # known before the first call asks
        except KazooException:
            pass
        threading.Thread(target=self._watch, name="nimbus-peers", daemon=True).start()

    def stop(self) -> None:
        """Leave the election (a leader steps down without ``on_lost``) and deregister."""
        self._stopping.set()
        self._leading = False
        self._end.set()
        self._wake.set()
        self._election.cancel()
        if self._thread is not None:
            self._thread.join(timeout=self._zk.session_timeout + 5)
        try:
            # Not waiting past a moment: ZooKeeper may be gone, and the node is
            # ephemeral anyway (it goes with the session).
            self._zk.client.delete_async(f"{NIMBUSES}/{address_of(self.me)}").get(
                timeout=STOP_WAIT_SECS)
        except (KazooException, KazooTimeoutError):
            pass

    def _register(self) -> None:
        data = json.dumps({"host": self.me.host, "port": self.me.port,
                           "started_at": self.me.started_at,
                           "version": self.me.version}).encode()
        path = f"{NIMBUSES}/{address_of(self.me)}"
        try:
            self._zk.client.create(path, data, ephemeral=True)
        except NodeExistsError:
            # Our own from a session that has not expired yet (a fast restart): ours
            # now. A second live daemon on the same address cannot bind it anyway.
            self._zk.client.delete(path)
            self._zk.client.create(path, data, ephemeral=True)

    def _contend(self) -> None:
        while not self._stopping.is_set():
            try:
                # Again after a lost session: its ephemeral node went with it.
                self._register()
                self._election.run(self._term)
            except KazooException as exc:
                log.warning("election_interrupted", error=str(exc), effect="contending again")
            if not self._stopping.is_set():
                self._stopping.wait(1.0)     # the session is being re-established

    def _term(self) -> None:
        """Runs while this nimbus holds the lock."""
        self._end.clear()
        stat = self._zk.client.set(EPOCH, address_of(self.me).encode()) \
            if self._zk.client.exists(EPOCH) else None
        if stat is None:
            self._zk.client.create(EPOCH, address_of(self.me).encode())
            stat = self._zk.client.exists(EPOCH)
        self.epoch = stat.version
        self._wake.set()
        log.info("leadership_gained", nimbus=address_of(self.me), epoch=self.epoch)
        started = time.monotonic()
        try:
            self._on_gained()
        except Exception:
            log.exception("leadership_take_over_failed", effect="stepping down")
            self.epoch = None
            self._on_lost()
            return
        if self._end.is_set():
            self.epoch = None
            self._on_lost()
            return
        self._leading = True
        log.info("leading", nimbus=address_of(self.me), epoch=self.epoch,
                 caught_up_secs=round(time.monotonic() - started, 3))
        try:
            self._on_leading()
        except Exception:  # noqa: BLE001 - it leads all the same; the log says what failed
            log.exception("leading_start_failed")
        self._end.wait()
        self._leading = False
        self.epoch = None
        self._seen = (None, self._seen[1])     # another may lead by now: ask again
        self._wake.set()
        if not self._stopping.is_set():
            log.warning("leadership_lost", nimbus=address_of(self.me))
            self._on_lost()

    def _on_session(self, state: str) -> None:
        if state == "suspended":
            self._leading = False          # no state change until ZooKeeper answers
        elif state == "lost":
            self._leading = False
            self._end.set()
        elif state == "connected" and self.epoch is not None and not self._end.is_set():
            self._leading = True           # the session, and so the lock, survived
