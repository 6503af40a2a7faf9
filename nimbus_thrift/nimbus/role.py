"""This nimbus's part among several (issue 28): whether it leads, and who does. One
nimbus alone (the default) always leads; in HA mode the election says
(nimbus/ha/node.py implements :class:`Role` on ZooKeeper).

The service asks it at each state change (a follower refuses, naming the leader, before
doing anything), for ``getLeader`` and ``ClusterSummary.nimbuses``, and before its own
background work that changes state (timers, sweeps), which only the leader does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class NimbusPeer:
    """A running nimbus: where clients reach it, since when, which version."""

    host: str
    port: int
    started_at: float
    version: str


class Role(Protocol):
    def leading(self) -> bool:
        """True while this nimbus may change state."""

    def refusal(self) -> str:
        """What a state change sent here is answered with while it does not lead
        (idl.NOT_LEADER_MESSAGE or NO_LEADER_MESSAGE)."""

    def leader(self) -> NimbusPeer | None:
        """The leading nimbus, or None while there is none."""

    def nimbuses(self) -> list[NimbusPeer]:
        """Every running nimbus, the leader included."""
