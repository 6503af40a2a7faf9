"""The HTTP side's connection slots (web/limits.py, Slots): a per-address cap, and room
made by evicting the longest-waiting connection, never a busy one (issue 27, item 4)."""

from __future__ import annotations

from nimbus_thrift.nimbus.web.limits import Slots


def test_an_address_at_its_cap_loses_its_own_longest_waiting_connection() -> None:
    slots = Slots(total=10, per_address=2)
    first, none = slots.admit("attacker", "t1")
    second, _ = slots.admit("attacker", "t2")
    assert first is not None and second is not None and none is None
    third, victim = slots.admit("attacker", "t3")
    assert third is not None and victim is first and victim.owner == "t1"
    assert victim.released
    assert slots.count("attacker") == 2 and slots.open == 2
    # Another address is not touched, and has its own cap.
    other, victim = slots.admit("browser", "b1")
    assert other is not None and victim is None


def test_a_full_side_evicts_the_longest_waiting_connection_of_any_address() -> None:
    slots = Slots(total=3, per_address=3)
    browser, _ = slots.admit("browser", "b")
    assert browser is not None
    slots.busy(browser)                   # a request being answered
    waiting = [slots.admit("attacker", f"a{i}")[0] for i in range(2)]
    newcomer, victim = slots.admit("browser", "b2")
    assert newcomer is not None and victim is waiting[0]
    assert slots.open == 3


def test_a_kept_alive_connection_waits_again_as_the_youngest() -> None:
    slots = Slots(total=2, per_address=2)
    browser, _ = slots.admit("browser", "b")
    attacker, _ = slots.admit("attacker", "a")
    assert browser is not None and attacker is not None
    slots.busy(browser)
    slots.waiting(browser)               # answered: waits for its next request
    _, victim = slots.admit("third", "t")
    assert victim is attacker            # opened later, but waiting longer


def test_with_every_slot_busy_the_new_connection_is_refused() -> None:
    slots = Slots(total=2, per_address=1)
    for address in ("a", "b"):
        slot, _ = slots.admit(address, address)
        assert slot is not None
        slots.busy(slot)
    assert slots.admit("c", "c") == (None, None)
    assert slots.admit("a", "a2") == (None, None)     # its own only one is busy
    assert slots.open == 2


def test_release_gives_the_slot_back_once() -> None:
    slots = Slots(total=1, per_address=1)
    slot, _ = slots.admit("a", "a")
    assert slot is not None
    slots.release(slot)
    slots.release(slot)
    assert slots.open == 0 and slots.count("a") == 0
    slots.waiting(slot)                  # a late call on a released slot does nothing
    again, victim = slots.admit("b", "b")
    assert again is not None and victim is None
