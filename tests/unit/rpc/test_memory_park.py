"""Bytes tier: MemoryBudget's parked total (memory.py), on the budget object alone.

The over-capacity admission that breaks a wait of parked frames on each other fires
when every reserved byte belongs to a parked frame; that needs the budget's count of
bytes held by parked frames to drop when one of them leaves the queue (``unpark``).
"""

from __future__ import annotations

from dataclasses import dataclass

from nimbus_thrift.rpc.memory import MemoryBudget


@dataclass(eq=False)
class Waiter:
    """A parked frame: holds ``held`` bytes already, waits for ``need`` more."""

    held: int
    need: int
    granted: int = 0

    def memory_granted(self) -> None:
        self.granted += 1


def parked_frame(budget: MemoryBudget, held: int, need: int) -> Waiter:
    """What a connection does: reserve the bytes received so far, then park for the rest."""
    budget.force_reserve(held)
    waiter = Waiter(held=held, need=need)
    budget.park(waiter)
    return waiter


def test_after_park_park_unpark_the_parked_frames_holding_everything_are_admitted() -> None:
    budget = MemoryBudget(100)
    first = parked_frame(budget, held=30, need=80)
    second = parked_frame(budget, held=30, need=80)
    budget.force_reserve(10)                # a frame in progress, not parked
    third = parked_frame(budget, held=30, need=70)
    assert (budget.reserved, budget.parked) == (100, 3)
    assert budget.admit() == []             # full; the frame in progress will release

    # The third connection goes away (closed, or its park timed out): it leaves the
    # queue and gives its bytes back, as Connection.close() does.
    budget.unpark(third)
    budget.release(third.held)
    assert (budget.reserved, budget.parked) == (70, 2)
    assert budget.admit() == []             # 70 + 80 does not fit; 10 are not parked
    # The frame in progress is answered and gives its 10 bytes back.
    budget.release(10)
    assert budget.reserved == 60

    # 60 + 80 does not fit in 100, but the 60 reserved are all the two parked frames'
    # and nothing else will ever be released: the head is admitted over capacity.
    assert budget.admit() == [first]
    assert (first.granted, first.need, budget.overcommits) == (1, 0, 1)
    assert budget.reserved == 140
    assert (second.granted, budget.parked) == (0, 1)

    # The first frame reads to its end, is answered and gives everything back: the
    # second, now holding every reserved byte, is admitted the same way.
    budget.release(30 + 80)
    assert budget.admit() == [second]
    assert (second.granted, budget.overcommits, budget.parked) == (1, 2, 0)
    budget.release(30 + 80)
    assert budget.reserved == 0


def test_unpark_of_a_waiter_not_parked_changes_nothing() -> None:
    budget = MemoryBudget(100)
    head = parked_frame(budget, held=50, need=60)
    budget.force_reserve(10)                # a frame in progress, not parked
    stranger = Waiter(held=10, need=5)
    budget.unpark(stranger)                 # already admitted or never parked
    budget.unpark(head)
    budget.release(50)
    assert (budget.reserved, budget.parked, budget.admit()) == (10, 0, [])
    # Parked again alone with everything reserved its own: admitted over capacity.
    budget.release(10)
    again = parked_frame(budget, held=50, need=60)
    assert budget.admit() == [again]
    assert budget.overcommits == 1
