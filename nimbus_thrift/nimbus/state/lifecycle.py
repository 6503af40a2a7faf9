"""Topology status: the states Storm's Nimbus gives a topology and the events that move
it, as one table.

Theory of operation. A topology is born ACTIVE or INACTIVE (the submit option). Users
toggle it with activate/deactivate. ``rebalance`` parks it in REBALANCING, remembering
the status it came from; when the rebalance wait is over the timer fires ``do_rebalance``,
the new parallelism is applied and the remembered status comes back. ``kill`` is allowed
from every status and parks the topology in KILLED; when the kill wait is over the timer
fires ``remove`` and the topology is forgotten (a second kill only re-arms the wait).
Anything else is refused with a sentence (Storm raises a bare RuntimeException there).

    ACTIVE ⇄ INACTIVE          (activate / deactivate)
    ACTIVE|INACTIVE ─rebalance─► REBALANCING ─do_rebalance─► previous status
    any ─kill─► KILLED ─remove─► (gone)
"""

from __future__ import annotations

import enum


class Status(str, enum.Enum):
    """The IDL's TopologyStatus, as the strings TopologySummary carries."""

    ACTIVE = "ACTIVE"
    INACTIVE = "INACTIVE"
    REBALANCING = "REBALANCING"
    KILLED = "KILLED"


class Event(str, enum.Enum):
    ACTIVATE = "activate"
    DEACTIVATE = "deactivate"
    REBALANCE = "rebalance"
    DO_REBALANCE = "do_rebalance"   # the rebalance wait is over (timer)
    KILL = "kill"
    REMOVE = "remove"               # the kill wait is over (timer)


#: Marker targets: the status remembered before REBALANCING; the topology is deleted.
PREVIOUS = "previous"
GONE = "gone"

S, E = Status, Event
#: (status, event) -> next status, PREVIOUS or GONE. Absent pairs are refused.
TRANSITIONS: dict[tuple[Status, Event], Status | str] = {
    (S.ACTIVE, E.ACTIVATE): S.ACTIVE,
    (S.ACTIVE, E.DEACTIVATE): S.INACTIVE,
    (S.ACTIVE, E.REBALANCE): S.REBALANCING,
    (S.ACTIVE, E.KILL): S.KILLED,
    (S.INACTIVE, E.ACTIVATE): S.ACTIVE,
    (S.INACTIVE, E.DEACTIVATE): S.INACTIVE,
    (S.INACTIVE, E.REBALANCE): S.REBALANCING,
    (S.INACTIVE, E.KILL): S.KILLED,
    (S.REBALANCING, E.DO_REBALANCE): PREVIOUS,
    (S.REBALANCING, E.KILL): S.KILLED,
    (S.KILLED, E.KILL): S.KILLED,
    (S.KILLED, E.REMOVE): GONE,
}
del S, E

#: Why a refused event makes no sense, for the sentence the client gets.
_REASONS = {
    Status.REBALANCING: "wait for the rebalance to finish, or kill it",
    Status.KILLED: "it is being removed",
    Status.ACTIVE: "",
    Status.INACTIVE: "",
}


class TransitionRefused(Exception):
    """An event that the topology's current status does not allow."""

    def __init__(self, name: str, status: Status, event: Event):
        reason = _REASONS.get(status, "")
        super().__init__(f"topology {name!r} is {status.value}: cannot {event.value}"
                         + (f" ({reason})" if reason else ""))
        self.name = name
        self.status = status
        self.event = event


def next_status(name: str, status: Status, event: Event) -> Status | str:
    """Return the target of ``event`` from ``status`` (a Status, PREVIOUS or GONE).

    Raises:
        TransitionRefused: the pair is not in :data:`TRANSITIONS`.
    """
    try:
        return TRANSITIONS[(status, event)]
    except KeyError:
        raise TransitionRefused(name, status, event) from None
