"""The topology status table (nimbus_thrift.nimbus.state.lifecycle): every (status, event) pair,
checked against the table the module docstring draws."""

from __future__ import annotations

import itertools

import pytest

from nimbus_thrift.nimbus.state.lifecycle import (GONE, PREVIOUS, TRANSITIONS, Event, Status,
                                            TransitionRefused, next_status)

S, E = Status, Event

# Written out from the module docstring, independently of TRANSITIONS:
#   ACTIVE <-> INACTIVE (activate / deactivate; both idempotent)
#   ACTIVE|INACTIVE -rebalance-> REBALANCING -do_rebalance-> previous status
#   any -kill-> KILLED (a second kill re-arms) -remove-> gone
EXPECTED: dict[tuple[Status, Event], Status | str] = {
    (S.ACTIVE, E.ACTIVATE): S.ACTIVE,
    (S.ACTIVE, E.DEACTIVATE): S.INACTIVE,
    (S.INACTIVE, E.ACTIVATE): S.ACTIVE,
    (S.INACTIVE, E.DEACTIVATE): S.INACTIVE,
    (S.ACTIVE, E.REBALANCE): S.REBALANCING,
    (S.INACTIVE, E.REBALANCE): S.REBALANCING,
    (S.REBALANCING, E.DO_REBALANCE): PREVIOUS,
    (S.ACTIVE, E.KILL): S.KILLED,
    (S.INACTIVE, E.KILL): S.KILLED,
    (S.REBALANCING, E.KILL): S.KILLED,
    (S.KILLED, E.KILL): S.KILLED,
    (S.KILLED, E.REMOVE): GONE,
}

ALL_PAIRS = list(itertools.product(Status, Event))


def test_every_pair_is_covered_here() -> None:
    assert len(ALL_PAIRS) == 24
    assert set(TRANSITIONS) <= set(ALL_PAIRS)


def test_table_is_the_documented_one() -> None:
    assert TRANSITIONS == EXPECTED


@pytest.mark.parametrize("status,event", ALL_PAIRS,
                         ids=[f"{s.value}-{e.value}" for s, e in ALL_PAIRS])
def test_each_pair(status: Status, event: Event) -> None:
    if (status, event) in EXPECTED:
        assert next_status("wc", status, event) == EXPECTED[(status, event)]
        return
    with pytest.raises(TransitionRefused) as info:
        next_status("wc", status, event)
    refused = info.value
    assert (refused.name, refused.status, refused.event) == ("wc", status, event)
    message = str(refused)
    assert message.startswith(f"topology 'wc' is {status.value}: cannot {event.value}")


def test_kill_allowed_from_every_status() -> None:
    assert all(next_status("t", s, E.KILL) == S.KILLED for s in Status)


def test_timer_events_only_from_their_parking_status() -> None:
    assert [s for s in Status if (s, E.DO_REBALANCE) in TRANSITIONS] == [S.REBALANCING]
    assert [s for s in Status if (s, E.REMOVE) in TRANSITIONS] == [S.KILLED]


def test_refusals_say_why_for_parked_statuses() -> None:
    with pytest.raises(TransitionRefused) as info:
        next_status("my topo", S.REBALANCING, E.ACTIVATE)
    assert str(info.value) == ("topology 'my topo' is REBALANCING: cannot activate "
                               "(wait for the rebalance to finish, or kill it)")
    with pytest.raises(TransitionRefused) as info:
        next_status("t", S.KILLED, E.REBALANCE)
    assert str(info.value) == "topology 't' is KILLED: cannot rebalance (it is being removed)"
    with pytest.raises(TransitionRefused) as info:
        next_status("t", S.ACTIVE, E.REMOVE)
    assert str(info.value) == "topology 't' is ACTIVE: cannot remove"


def test_status_values_are_the_idl_strings() -> None:
    assert [s.value for s in Status] == ["ACTIVE", "INACTIVE", "REBALANCING", "KILLED"]
    assert Status("KILLED") is S.KILLED
