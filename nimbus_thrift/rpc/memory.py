"""The server-wide read-buffer budget (Java THsHa's ``readBufferBytesAllocated``, done
right).

Theory of operation
-------------------
Every byte a connection holds in a read buffer is reserved here first. A frame whose
declared length fits the budget but not what is free *now* is parked: its connection
stops being polled for reading (so nothing spins, unlike Java's THsHa, THRIFT-5494), and
parked frames are admitted strictly in arrival order as memory is released (a large
frame is never starved by a stream of small ones: while anything is parked, new frames
queue behind it).

Bytes are reserved as they arrive (see connection.py), so frames in progress hold only
part of what they declared; a parked frame waits for *all* it still needs, so once
admitted it reads to its end without waiting again. Partly read frames can then wait
on each other: when every reserved byte belongs to a parked frame, nothing will ever
be released, and the head of the queue is admitted over capacity. That overshoot is
at most one frame (no other waiter can be admitted until then, since nothing else
holds memory the head could wait for), so ``reserved`` never exceeds ``capacity`` by
more than the largest frame admitted.

Only the selector thread calls into this object, so it needs no lock; workers' releases
reach it through the selector's completion queue.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol


class Parkable(Protocol):
    #: Bytes this waiter still needs reserved before it can go on.
    need: int
    #: Bytes it holds already (unchanged while parked).
    held: int

    def memory_granted(self) -> None:
        """Called once ``need`` bytes were reserved for it."""


class MemoryBudget:
    """Counts bytes reserved against ``capacity``; parks and admits waiters in order."""

    def __init__(self, capacity: int, peer_share: int | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be positive, not {capacity}")
        self.capacity = capacity
        #: What the frames of one client address may declare in all (see peers.py);
        #: checked by the connections, as a frame is admitted.
        self.peer_share = peer_share if peer_share is not None else capacity
        self.reserved = 0
        self.peak = 0
        #: Times the head of the queue was admitted over capacity to break a wait of
        #: parked frames on each other (see the module docstring).
        self.overcommits = 0
        self._parked: deque[Parkable] = deque()
        self._parked_held = 0

    @property
    def parked(self) -> int:
        """How many waiters are parked."""
        return len(self._parked)

    def free_now(self) -> int:
        """Bytes a new, unqueued reservation may take now: nothing while others wait."""
        if self._parked:
            return 0
        free = self.capacity - self.reserved
        return free if free > 0 else 0   # over capacity after an overcommit

    def try_reserve(self, n: int) -> bool:
        """Reserve ``n`` bytes if they fit now and nobody is waiting ahead."""
        if n < 0:
            raise ValueError(f"cannot reserve a negative amount ({n})")
        if self._parked or self.reserved + n > self.capacity:
            return False
        self.reserved += n
        if self.reserved > self.peak:
            self.peak = self.reserved
        return True

    def force_reserve(self, n: int) -> None:
        """Reserve bytes already received under a limit from :meth:`free_now`."""
        self.reserved += n
        if self.reserved > self.peak:
            self.peak = self.reserved

    def release(self, n: int) -> None:
        """Return ``n`` bytes. Releasing more than is reserved is a bug and raises."""
        if n < 0 or n > self.reserved:
            raise AssertionError(f"release of {n} bytes with {self.reserved} reserved")
        self.reserved -= n

    def park(self, waiter: Parkable) -> None:
        """Queue ``waiter`` until ``waiter.need`` bytes can be reserved for it."""
        self._parked.append(waiter)
        self._parked_held += waiter.held

    def unpark(self, waiter: Parkable) -> None:
        """Forget a waiter that went away (its connection closed, or it timed out)."""
        try:
            self._parked.remove(waiter)
        except ValueError:
            return
        self._parked_held -= waiter.held

    def admit(self) -> list[Parkable]:
        """Grant parked waiters in arrival order while the head fits; return them."""
        admitted: list[Parkable] = []
        parked = self._parked
        while parked and (self.reserved + parked[0].need <= self.capacity
                          or self.reserved == self._parked_held):
            waiter = parked.popleft()
            self._parked_held -= waiter.held
            if self.reserved + waiter.need > self.capacity:
                self.overcommits += 1
            self.force_reserve(waiter.need)
            waiter.need = 0
            waiter.memory_granted()
            admitted.append(waiter)
        return admitted
