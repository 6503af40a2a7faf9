"""Unit tier: GcPauses (tuning.py) freezes what survives a full collection, so the next
one scans only what is new, and scans everything again once FULL_SCAN_EVERY_SECS
passed, so a garbage cycle among frozen objects is found then."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from nimbus_thrift.tuning import GcPauses


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def pauses() -> Iterator[tuple[GcPauses, Clock]]:
    clock = Clock()
    policy = GcPauses(full_scan_every=600.0, clock=clock)
    policy.install()
    try:
        yield policy, clock
    finally:
        policy.uninstall()
    assert gc.get_freeze_count() == 0        # everything given back


def cycle() -> weakref.ref[Node]:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_survivors_of_a_full_collection_are_frozen(pauses) -> None:
    kept = [Node() for _ in range(100)]
    gc.collect()
    assert gc.get_freeze_count() >= len(kept)
    scanned = {id(obj) for obj in gc.get_objects()}     # the frozen are not listed
    assert not any(id(node) in scanned for node in kept)


def test_a_frozen_cycle_is_found_at_the_next_full_scan(pauses) -> None:
    _, clock = pauses
    holder = [cycle()]
    ref = holder[0]
    strong = ref()                 # alive through the first full collection: frozen
    gc.collect()
    del strong
    gc.collect()                   # scans only what is new: the frozen cycle stays
    assert ref() is not None
    clock.now += 600.0
    gc.collect()                   # the full scan: everything unfrozen first
    assert ref() is None


def test_a_young_cycle_is_collected_as_ever(pauses) -> None:
    ref = cycle()
    gc.collect()
    assert ref() is None


def test_uninstalled_the_collector_is_as_it_was() -> None:
    policy = GcPauses()
    policy.install()
    policy.uninstall()
    ref = cycle()
    strong = ref()
    gc.collect()
    assert gc.get_freeze_count() == 0
    del strong
    gc.collect()
    assert ref() is None
