"""Fakes tier: the workers' side of max_unsent_reply_bytes (rpc/completion.py's HandBack). A reply
the socket did not take waits in the outcome queue for the selector; while the
replies queued there and those the selector holds are past the cap, the next worker
with one waits, instead of the queue growing without bound. No sockets: the waits are
driven directly, as the selector's booking would."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from nimbus_thrift.rpc.completion import HandBack, held_size
from nimbus_thrift.rpc.inline import InlinePolicy
from nimbus_thrift.rpc.memory import MemoryBudget

WAIT = 5.0


@pytest.fixture
def c() -> Iterator[HandBack]:
    """A HandBack with a cap of 100 bytes (its wake-up socket closed afterwards)."""
    comp = HandBack(dispatcher=None, policy=InlinePolicy(),  # type: ignore[arg-type]
                    budget=MemoryBudget(10), max_unsent_reply_bytes=100)
    yield comp
    comp.wakeup.close()


def queue_in_thread(c: HandBack, size: int) -> tuple[threading.Thread, threading.Event]:
    queued = threading.Event()

    def run() -> None:
        with c.lock:
            c._wait_for_room(size)
        queued.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, queued


def test_a_worker_waits_while_queued_and_held_replies_are_past_the_cap(c):
    with c.lock:
        c._wait_for_room(80)            # nothing queued: never waits
    assert c.queued_unsent == 80
    thread, queued = queue_in_thread(c, 50)
    # 80 + 50 > 100: the second reply waits for the selector.
    assert not queued.wait(0.3)
    assert c.queued_unsent == 80
    c.booked_unsent(80)                 # the selector took the first off the queue
    assert queued.wait(WAIT)
    thread.join(WAIT)
    assert c.queued_unsent == 50


def test_held_replies_count_against_the_same_cap(c):
    with c.lock:
        c._wait_for_room(10)
    c.unsent_bytes = 95                 # the selector holds replies for slow readers
    thread, queued = queue_in_thread(c, 10)
    assert not queued.wait(0.3)
    c.unsent_bytes = 0                  # it closed them
    c.booked_unsent(10)
    assert queued.wait(WAIT)
    thread.join(WAIT)


def test_one_reply_larger_than_the_cap_never_waits(c):
    c.unsent_bytes = 500
    with c.lock:
        c._wait_for_room(1000)
    assert c.queued_unsent == 1000


def test_waiting_workers_give_up_when_the_selector_is_gone(c):
    with c.lock:
        c._wait_for_room(90)
    thread, queued = queue_in_thread(c, 90)
    assert not queued.wait(0.3)
    with c.lock:
        c.shut()                        # what Lifetime.finish does
    assert queued.wait(WAIT)
    thread.join(WAIT)


def test_held_size_counts_whole_buffers_behind_views():
    big = b"x" * 1000
    assert held_size([memoryview(big)[900:], b"abc"]) == 1003
