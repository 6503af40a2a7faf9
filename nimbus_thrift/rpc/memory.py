"""The server-wide read-buffer budget (Java THsHa's ``readBufferBytesAllocated``, done
right).

Theory of operation
-------------------
Every byte a connection holds in a read buffer is reserved here first. A frame whose
declared length fits the budget but not what is free *now* is parked: its connection
stops being polled for reading (so nothing spins, unlike Java's THsHa, THRIFT-5494), and
parked frames are admitted in arrival order as memory is released (in each of the two
queues below; a large frame is never starved by a stream of small ones).

Bytes are reserved as they arrive (see connection.py), so frames in progress hold only
part of what they declared; a parked frame waits for *all* it still needs, so once
admitted it reads to its end without waiting again. Partly read frames can then wait
on each other: when every reserved byte belongs to a parked frame, nothing will ever
be released, and the head of the queue is admitted over capacity. That overshoot is
at most one frame (no other waiter can be admitted until then, since nothing else
holds memory the head could wait for), so ``reserved`` never exceeds ``capacity`` by
more than the largest frame admitted.

Small frames have a room of their own (issue 27): frames of more than
:data:`SMALL_FRAME` bytes ("large") may together hold at most ``capacity - small_reserve``,
so the last :data:`SMALL_RESERVE_SHARE`-th of the budget is only ever taken by small
frames, and a good client's 1 KB call never waits behind an attacker's megabytes
(five addresses each holding 16 nearly complete 1 MiB frames had filled a 64 MiB budget:
a good client's call took a median 9 s). Large bytes are counted apart (``large``); what
is not large is small, or not yet known (a header read's speculative bytes, which are
therefore kept within what the large room has free: they may turn out large).

Two queues, each in arrival order. Small frames park behind small frames only, and are
admitted first: what they wait for is little and soon released. Large frames park
behind any parked frame. So that a stream of small frames cannot starve a parked large
one, small frames take no more than the reserve while a large frame is parked (beyond
it, they park too). The overcommit rule above holds for both queues (the small head
first): it only applies when every reserved byte belongs to a parked frame, so at most
one frame is over the budget at a time. A large frame larger than the large room is
admitted when no other large frame holds memory (else it could never be).

The per-peer share (``peer_share``) is checked by the connections: a small frame's
length against its address's count (peers.PeerShare), a large frame's against its read
group's (:class:`ReadGroup`, one per IPv4 /24, IPv6 /64 or local user: peers.read_group).

Only the selector thread calls into this object, so it needs no lock; workers' releases
reach it through the selector's completion queue.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

from .peers import read_group

#: Frames up to this declared length are "small": they may use the reserve. A read
#: buffer's first growth (connection.GROWTH_MIN) and a header read's speculative bytes
#: (connection.SCRATCH_SIZE) are this size too, so a small frame is read in one step;
#: every control-plane call of Nimbus but a chunk upload is smaller.
SMALL_FRAME = 64 * 1024
#: The share of the budget kept for small frames: 1/8 (8 MiB of a 64 MiB budget: 128
#: small frames of the largest size at once, 8,000 calls of 1 KB).
SMALL_RESERVE_SHARE = 8


class Parkable(Protocol):
    #: Bytes this waiter still needs reserved before it can go on.
    need: int
    #: Bytes it holds already (unchanged while parked).
    held: int
    #: Of them, the bytes counted as a large frame's.
    large_held: int

    def memory_granted(self) -> None:
        """Called once ``need`` bytes were reserved for it."""


class ReadGroup:
    """The declared bytes of the large frames of one group of client addresses
    (peers.py's :func:`~.peers.read_group`), checked against the budget's
    ``peer_share``; shared by the group's connections, forgotten when the last leaves."""

    __slots__ = ("key", "declared", "members")

    def __init__(self, key: str) -> None:
        self.key = key
        self.declared = 0     # declared lengths of its frames read or being handled
        self.members = 0      # connections that joined it and have not left

    def __repr__(self) -> str:
        return f"<ReadGroup {self.key} declared={self.declared} members={self.members}>"


class MemoryBudget:
    """Counts bytes reserved against ``capacity``; parks and admits waiters in order
    (small frames in a queue of their own, see the module docstring)."""

    def __init__(self, capacity: int, peer_share: int | None = None,
                 small_reserve: int | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be positive, not {capacity}")
        self.capacity = capacity
        #: What the frames of one group of client addresses may declare in all (see
        #: peers.py); checked by the connections, as a frame is admitted.
        self.peer_share = peer_share if peer_share is not None else capacity
        #: Bytes only small frames may take (see the module docstring).
        self.small_reserve = capacity // SMALL_RESERVE_SHARE if small_reserve is None \
            else min(max(0, small_reserve), capacity)
        #: What large frames may hold together.
        self.large_room = capacity - self.small_reserve
        self.reserved = 0
        #: Of ``reserved``, the bytes held by large frames.
        self.large = 0
        self.peak = 0
        #: Times the head of the queue was admitted over capacity to break a wait of
        #: parked frames on each other (see the module docstring).
        self.overcommits = 0
        self._parked: deque[Parkable] = deque()        # small frames
        self._parked_large: deque[Parkable] = deque()
        self._parked_held = 0
        #: The read groups with a connection in them, by key.
        self._groups: dict[str, ReadGroup] = {}

    @property
    def parked(self) -> int:
        """How many waiters are parked."""
        return len(self._parked) + len(self._parked_large)

    @property
    def parked_large(self) -> int:
        """How many of them are large frames."""
        return len(self._parked_large)

    def free_now(self) -> int:
        """Bytes a new, unqueued reservation of a frame not yet known small or large
        may take now: nothing while others wait, and no more than the large room has
        free (the bytes may turn out to be a large frame's)."""
        if self._parked or self._parked_large:
            return 0
        free = self.capacity - self.reserved
        if self.large and self.large_room - self.large < free:
            # (With no large frame held, one may take the large room alone.)
            free = self.large_room - self.large
        return free if free > 0 else 0   # over capacity after an overcommit

    def try_reserve(self, n: int) -> bool:
        """Reserve ``n`` bytes for a small frame if they fit now and no small frame is
        waiting ahead (while a large frame waits, only within the reserve)."""
        if n < 0:
            raise ValueError(f"cannot reserve a negative amount ({n})")
        if self._parked or not self._small_fits(n):
            return False
        self.reserved += n
        if self.reserved > self.peak:
            self.peak = self.reserved
        return True

    def try_reserve_large(self, n: int, own: int = 0) -> bool:
        """Reserve ``n`` bytes for a large frame that holds ``own`` large bytes already,
        if they fit the large room now and nobody is waiting ahead."""
        if n < 0:
            raise ValueError(f"cannot reserve a negative amount ({n})")
        if self._parked or self._parked_large or not self._large_fits(n, own):
            return False
        self.force_reserve(n)
        self.large += n
        return True

    def force_reserve(self, n: int) -> None:
        """Reserve bytes already received under a limit from :meth:`free_now`."""
        self.reserved += n
        if self.reserved > self.peak:
            self.peak = self.reserved

    def count_large(self, n: int) -> None:
        """``n`` bytes already reserved turned out to be a large frame's."""
        self.large += n

    def release(self, n: int) -> None:
        """Return ``n`` bytes. Releasing more than is reserved is a bug and raises."""
        if n < 0 or n > self.reserved:
            raise AssertionError(f"release of {n} bytes with {self.reserved} reserved")
        self.reserved -= n

    def release_large(self, n: int) -> None:
        """``n`` released bytes (or about to be) were a large frame's."""
        if n < 0 or n > self.large:
            raise AssertionError(f"release of {n} large bytes with {self.large} counted")
        self.large -= n

    def _small_fits(self, n: int) -> bool:
        if self.reserved + n > self.capacity:
            return False
        # While a large frame waits, small frames keep to the reserve, so they cannot
        # keep it waiting for ever.
        return not self._parked_large or \
            self.reserved - self.large + n <= self.small_reserve

    def _large_fits(self, n: int, own: int) -> bool:
        if self.reserved + n > self.capacity:
            return False
        # One larger than the whole large room can only ever be admitted alone in it.
        return self.large + n <= self.large_room or self.large == own

    def park(self, waiter: Parkable, large: bool = False) -> None:
        """Queue ``waiter`` until ``waiter.need`` bytes can be reserved for it
        (``large``: in the large frames' queue, and counted as large once admitted)."""
        (self._parked_large if large else self._parked).append(waiter)
        self._parked_held += waiter.held

    def unpark(self, waiter: Parkable) -> None:
        """Forget a waiter that went away (its connection closed, or it timed out)."""
        for queue in (self._parked, self._parked_large):
            try:
                queue.remove(waiter)
            except ValueError:
                continue
            self._parked_held -= waiter.held
            return

    def admit(self) -> list[Parkable]:
        """Grant parked waiters while the head of a queue fits, small frames first,
        each queue in arrival order; return them."""
        admitted: list[Parkable] = []
        small, large = self._parked, self._parked_large
        while small or large:
            if small and self._small_fits(small[0].need):
                waiter = small.popleft()
            elif large and self._large_fits(large[0].need, large[0].large_held):
                waiter = large.popleft()
                self.large += waiter.need
            elif self.reserved == self._parked_held:
                # Every reserved byte belongs to a parked frame: none will be released,
                # so the oldest goes on over the budget (the small one first: it is done
                # soonest).
                queue = small if small else large
                waiter = queue.popleft()
                if queue is large:
                    self.large += waiter.need
                if self.reserved + waiter.need > self.capacity:
                    self.overcommits += 1
            else:
                break
            self._parked_held -= waiter.held
            self.force_reserve(waiter.need)
            waiter.need = 0
            waiter.memory_granted()
            admitted.append(waiter)
        return admitted

    # ------------------------------------------------------------- read groups

    def join_group(self, host: str) -> ReadGroup:
        """The read group of client address ``host`` (peers.read_group), with one more
        member; :meth:`leave_group` when the connection closes."""
        key = read_group(host)
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = ReadGroup(key)
        group.members += 1
        return group

    def leave_group(self, group: ReadGroup) -> None:
        """A member of ``group`` closed; the group is forgotten with its last member."""
        group.members -= 1
        if group.members <= 0 and self._groups.get(group.key) is group:
            del self._groups[group.key]
