"""A client of several nimbus seeds (an HA cluster): reads go to the first seed that
answers, state changes to the leader, and the client follows the leader when it moves.

::

    read (getClusterInfo, ...)       the seed reads went to last, else each seed in order
      |                                (one connection attempt each per round, rounds
      |                                with the client's back-off): NoNimbusAnswered
      | ConnectionLost, a pure getter: once more, on that seed or the next that answers
      | refused "not the leader": it is a state change after all, sent as one (below)
      v
    state change (submit, kill, ...) the leader last seen, if it still takes a
      |                                connection; else getLeader on each seed in order
      |                                until one names a leader that takes one (a seed
      |                                that knows none does not end the search: Storm's
      |                                NimbusClient stopped there); no leader yet: ask
      |                                again after 0.1 s, 0.2 s, ... 1 s, within
      |                                leader_wait: NoLeader
      | refused naming the leader:   sent there, once (LeaderChanged if refused again)
      | refused, no leader elected:  ask the seeds again after a pause, within leader_wait
      v

Why sending a refused call again is safe: a follower refuses a state change before
carrying out any of it (the daemon's contract, idl.NOT_LEADER_MESSAGE).

An operation of several calls (an upload and the submit of what it uploaded; a blob's
chunks and their finish) runs in :meth:`SeedRouter.on_leader`: every call of it, reads
included, goes to one leader, so the upload and the submit meet on the same daemon and
the submit's own reads see it. If the leader refuses one of them, or dies before the
operation's commit (a submit, a blob upload's finish) was sent, the whole operation
runs again on the new leader, once: a fresh upload leaves the first one to expire.

The socket work is each address's transport's (:class:`.transport.FramedTransport`);
tests give fakes (``connect``), a fake ``sleep`` and ``clock``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

import structlog

from dataclasses import replace

from ..rpc.backoff import Backoff
from .defaults import (LEADER_BACKOFF_FACTOR, LEADER_BACKOFF_INITIAL, LEADER_BACKOFF_MAX,
                       READ_ONLY_METHODS, STATE_CHANGE_METHODS)
from .errors import (BadReply, ConnectionLost, LeaderChanged, NimbusTimeout,
                     NimbusUnavailable, NoLeader, NoNimbusAnswered, ServerError)
from .options import ClientOptions
from .seeds import Address, LeaderRefusal, leader_refusal, seed_text
from .transport import FramedTransport

log = structlog.get_logger(__name__)

T = TypeVar("T")

#: The calls after which an operation is not run again when its leader dies: they
#: may have taken effect (a submit, a blob version made visible), and a second run
#: would be refused for what the first did (the name taken, the key existing).
COMMIT_METHODS = frozenset({"submitTopology", "submitTopologyWithOpts", "finishBlobUpload"})

#: While no leader is elected: how long to wait before asking the seeds again.
LEADER_BACKOFF = Backoff(LEADER_BACKOFF_INITIAL, LEADER_BACKOFF_FACTOR, LEADER_BACKOFF_MAX)


class Transport(Protocol):
    """One connection to one nimbus (:class:`.transport.FramedTransport`)."""

    @property
    def connected(self) -> bool: ...

    def ensure_connected(self) -> None: ...

    def exchange(self, service: Any, method: str, seqid: int, frame: bytes) -> Any: ...

    def discard(self) -> None: ...


class SeedRouter:
    """Routes each call of a client of several seeds (see the module docstring).

    Not thread-safe by itself: its owner holds a lock for each whole call. An
    operation's leader (:meth:`on_leader`) is the calling thread's own.

    Args:
        seeds: the addresses, in the order they are tried.
        connect: makes the transport of an address (one connection attempt per
            ``ensure_connected``: the rounds are counted here).
        service: the IDL service (for the replies' types).
        encode: ``encode(method)`` is ``(seqid, frame)`` of a call without arguments
            (getLeader), numbered as the owner numbers its calls.
        rounds, round_delays: connection rounds over every seed before
            NoNimbusAnswered, and the seconds between them.
        leader_wait: seconds a state change waits for a leader.
    """

    def __init__(self, seeds: Sequence[Address], connect: Callable[[Address], Transport], *,
                 service: Any, encode: Callable[[str], tuple[int, bytes]], rounds: int,
                 round_delays: Sequence[float], leader_wait: float,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.seeds = list(seeds)
        self._connect = connect
        self._service = service
        self._encode = encode
        self._rounds = rounds
        self._round_delays = list(round_delays)
        self._leader_wait = leader_wait
        self._sleep = sleep
        self._clock = clock
        self._transports: dict[Address, Transport] = {}
        self.reader: Address | None = None      # where reads went last
        self.leader: Address | None = None      # the leader last seen
        self._local = threading.local()         # .op: the running operation's _Op

    @property
    def _default_port(self) -> int:
        return self.seeds[0][1]

    def transport(self, address: Address) -> Transport:
        """The transport of ``address``, made on first use (a leader need not be a
        seed)."""
        if address not in self._transports:
            self._transports[address] = self._connect(address)
        return self._transports[address]

    @property
    def connected(self) -> bool:
        return any(t.connected for t in self._transports.values())

    def discard(self) -> None:
        """Close every connection."""
        for transport in self._transports.values():
            transport.discard()

    # ----------------------------------------------------------------- reads

    def connect(self) -> Address:
        """Connect to a seed for reads: the one reads went to last, else the first in
        order that takes a connection, for ``rounds`` rounds.

        Raises:
            NoNimbusAnswered: none did; the message names every seed and why.
            TlsError: a certificate was refused (never retried).
        """
        order = self._order(self.reader)
        reasons: dict[str, str] = {}
        started = self._clock()
        for n in range(self._rounds):
            for address in order:
                try:
                    self.transport(address).ensure_connected()
                except NimbusUnavailable as exc:
                    reasons[seed_text(address)] = exc.reason
                    continue
                self.reader = address
                return address
            if n < self._rounds - 1:
                self._sleep(self._round_delays[n])
        raise NoNimbusAnswered(*self.seeds[0], reasons, self._rounds,
                               self._clock() - started)

    def call(self, method: str, seqid: int, frame: bytes) -> Any:
        """Send one encoded call where it belongs and return the reply; raises what
        the transport raises, and NoNimbusAnswered, NoLeader, LeaderChanged."""
        op = getattr(self._local, "op", None)
        if op is not None:
            return op.send(self, method, seqid, frame)
        if method in STATE_CHANGE_METHODS:
            return self.on_leader(lambda: self.call(method, seqid, frame), what=method,
                                  commits=None)
        retried = False
        while True:
            address = self.connect()
            try:
                return self.transport(address).exchange(self._service, method, seqid, frame)
            except ConnectionLost as lost:
                # As a client of one nimbus does: a pure getter once more, here on the
                # same seed if it takes a connection again, else the next.
                if method not in READ_ONLY_METHODS:
                    raise
                if retried:
                    raise ConnectionLost(lost.host, lost.port, method, lost.reason,
                                         retried=True) from lost
                retried = True
                log.info("nimbus_call_retried", nimbus=seed_text(address), method=method,
                         reason=lost.reason)
            except ServerError as exc:
                refusal = leader_refusal(exc, self._default_port)
                if refusal is None:
                    raise
                # A state change this client did not know as one: to the leader.
                return self.on_leader(lambda: self.call(method, seqid, frame),
                                      what=method, refused=refusal, commits=None)

    # ----------------------------------------------------------------- the leader

    def on_leader(self, run: Callable[[], T], *, what: str,
                  refused: LeaderRefusal | None = None, restart: bool = True,
                  commits: frozenset[str] | None = COMMIT_METHODS) -> T:
        """``run()`` with every call it makes sent to one leader; run again on the next
        leader, once, if that leader refuses a call for not being the leader, or dies
        before a commit was sent. Within an operation already running, ``run()`` is
        part of it.

        Args:
            what: the operation, for the errors (``"submitTopology"``, ``"upload"``).
            refused: a refusal that already named the leader (or said none is).
            restart: whether ``run`` may run again after its second call (False for
                an upload from a stream that cannot be read twice).
            commits: the calls after which a lost leader ends the operation (they
                may have taken effect); None: every call (one call sent by itself).

        Raises:
            NoLeader: no leader within ``leader_wait``.
            LeaderChanged: refused again after following the leader once.
            and what ``run`` raises.
        """
        if getattr(self._local, "op", None) is not None:
            return run()
        deadline = self._clock() + self._leader_wait
        followed: Address | None = None
        named = refused.leader if refused is not None else None
        waits = 0
        if refused is not None and refused.leader is None:
            waits = self._pause(what, deadline, waits, {})
        while True:
            leader = self._locate(what, deadline, named)
            op = _Op(leader, commits)
            self._local.op = op
            try:
                return run()
            except ServerError as exc:
                refusal = leader_refusal(exc, self._default_port)
                if refusal is None:
                    raise
                self.leader = None
                again = restart or op.calls <= 1
                if not again or (refusal.leader is not None and followed is not None):
                    raise LeaderChanged(exc.host, exc.port, what,
                                        refusal.leader and seed_text(refusal.leader),
                                        followed and seed_text(followed)) from None
                if refusal.leader is None:
                    # An election under way: asked again until the deadline (waiting
                    # for one is not following a leader that moved).
                    log.info("nimbus_no_leader", nimbus=exc.address, method=exc.method)
                    waits = self._pause(what, deadline, waits,
                                        {exc.address: refusal.message})
                    named = None
                    continue
                log.info("nimbus_leader_followed", refused_by=exc.address,
                         leader=seed_text(refusal.leader), method=exc.method)
                followed = named = refusal.leader
            except (NimbusUnavailable, ConnectionLost) as exc:
                # The leader died: before a commit, all that was sent went to a daemon
                # that is gone, and the operation can start over on the next leader.
                self.leader = None
                if op.committed or followed is not None or not (restart or op.calls <= 1):
                    raise
                log.info("nimbus_leader_lost", nimbus=exc.address, operation=what,
                         reason=str(exc))
                followed = leader
                named = None
            finally:
                self._local.op = None

    def _pause(self, what: str, deadline: float, waits: int,
               reasons: dict[str, str]) -> int:
        """Wait before asking for the leader again; NoLeader if that would pass
        ``deadline``."""
        delay = LEADER_BACKOFF.delay(waits)
        if self._clock() + delay > deadline:
            waited = self._clock() - (deadline - self._leader_wait)
            raise NoLeader(*self.seeds[0], what, reasons, waits + 1, waited)
        self._sleep(delay)
        return waits + 1

    def _locate(self, what: str, deadline: float, named: Address | None) -> Address:
        """A connected leader: ``named``, else the one last seen, else the first a seed
        names (asking every seed, again after a pause while none knows one).

        Raises:
            NoLeader: none by ``deadline``.
            NoNimbusAnswered: no seed took a connection in ``rounds`` rounds.
        """
        for candidate in (named, self.leader):
            if candidate is None:
                continue
            try:
                self.transport(candidate).ensure_connected()
            except NimbusUnavailable:
                self.leader = None
                continue
            self.leader = candidate
            return candidate
        reasons: dict[str, str] = {}
        started = self._clock()
        silent = waits = 0
        while True:
            leader, answered = self._ask_seeds(reasons)
            if leader is not None:
                self.leader = leader
                return leader
            silent = 0 if answered else silent + 1
            if silent >= self._rounds:
                raise NoNimbusAnswered(*self.seeds[0], reasons, silent,
                                       self._clock() - started)
            waits = self._pause(what, deadline, waits, reasons)

    def _ask_seeds(self, reasons: dict[str, str]) -> tuple[Address | None, bool]:
        """getLeader on each seed in order until one names a leader that takes a
        connection: ``(that leader, True)``; else ``(None, whether any seed
        answered)``, with why in ``reasons``."""
        answered = False
        for address in self._order(self.reader):
            transport = self.transport(address)
            text = seed_text(address)
            try:
                transport.ensure_connected()
                seqid, frame = self._encode("getLeader")
                summary = transport.exchange(self._service, "getLeader", seqid, frame)
            except NimbusUnavailable as exc:
                reasons[text] = exc.reason
                continue
            except (NimbusTimeout, ConnectionLost, BadReply) as exc:
                reasons[text] = str(exc)
                continue
            except ServerError as exc:
                # "No leader", in whatever words: the next seed may know one.
                answered = True
                reasons[text] = exc.server_message
                continue
            answered = True
            leader = _leader_of(summary)
            if leader is None:
                reasons[text] = "no leader is elected"
                continue
            try:
                self.transport(leader).ensure_connected()
            except NimbusUnavailable as exc:
                reasons[text] = f"names {seed_text(leader)} the leader: {exc.reason}"
                continue
            return leader, True
        return None, answered

    def _order(self, first: Address | None) -> list[Address]:
        if first is None or first not in self.seeds:
            return list(self.seeds)
        return [first] + [s for s in self.seeds if s != first]


class _Op:
    """An operation running on one leader: where its calls go, how many were sent,
    and whether a commit was (``commits`` None: every call is one)."""

    def __init__(self, leader: Address, commits: frozenset[str] | None) -> None:
        self.leader = leader
        self.commits = commits
        self.calls = 0
        self.committed = False

    def send(self, router: SeedRouter, method: str, seqid: int, frame: bytes) -> Any:
        transport = router.transport(self.leader)
        retried = False
        while True:
            transport.ensure_connected()
            self.calls += 1
            self.committed = self.committed or self.commits is None \
                or method in self.commits
            try:
                return transport.exchange(router._service, method, seqid, frame)
            except ConnectionLost:
                if method not in READ_ONLY_METHODS or retried:
                    raise
                retried = True


def _leader_of(summary: Any) -> Address | None:
    """The leader a getLeader reply names; None for a summary without an address or
    one that says it is no leader."""
    host = getattr(summary, "host", None)
    port = getattr(summary, "port", None)
    if not host or not isinstance(port, int) or not 0 < port < 65536 \
            or getattr(summary, "isLeader", None) is False:
        return None
    return str(host), port


def seed_router(seeds: Sequence[Address], options: ClientOptions, service: Any,
                encode: Callable[[str], tuple[int, bytes]]) -> SeedRouter:
    """The router of a :class:`~nimbus_thrift.client.NimbusClient` of several seeds:
    a :class:`.transport.FramedTransport` per address, with ``options`` but for the
    address and one connection attempt each, because the router counts its rounds
    over every seed (a dead seed costs one attempt per round, not
    ``connect_attempts``)."""
    def connect(address: Address) -> Transport:
        return FramedTransport(replace(options, host=address[0], port=address[1],
                                       connect_attempts=1))

    return SeedRouter(seeds, connect, service=service, encode=encode,
                      rounds=options.connect_attempts, round_delays=options.backoff_delays,
                      leader_wait=options.leader_wait)
