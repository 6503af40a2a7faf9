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

Only the selector thread calls into this object, so it needs no lock; workers' releases
reach it through the selector's completion queue.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol


class Parkable(Protocol):
    #: Bytes this waiter still needs reserved before it can go on.
    need: int

    def memory_granted(self) -> None:
        """Called once ``need`` bytes were reserved for it."""


class MemoryBudget:
    """Counts bytes reserved against ``capacity``; parks and admits waiters in order."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be positive, not {capacity}")
        self.capacity = capacity
        self.reserved = 0
        self.peak = 0
        self._parked: deque[Parkable] = deque()

    @property
    def parked(self) -> int:
        """How many waiters are parked."""
        return len(self._parked)

    def free_now(self) -> int:
        """Bytes a new, unqueued reservation may take now: nothing while others wait."""
        if self._parked:
            return 0
        return self.capacity - self.reserved

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

    def unpark(self, waiter: Parkable) -> None:
        """Forget a waiter that went away (its connection closed)."""
        try:
            self._parked.remove(waiter)
        except ValueError:
            pass

    def admit(self) -> list[Parkable]:
        """Grant parked waiters in arrival order while the head fits; return them."""
        admitted: list[Parkable] = []
        parked = self._parked
        while parked and self.reserved + parked[0].need <= self.capacity:
            waiter = parked.popleft()
            self.force_reserve(waiter.need)
            waiter.need = 0
            waiter.memory_granted()
            admitted.append(waiter)
        return admitted
