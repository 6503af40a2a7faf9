"""Standby drivers: Spark applications the launcher starts before any submit, warms up
and keeps idle, so that a submit with the same Spark settings takes one and runs its
first batch seconds after the call instead of starting a JVM (issue 18).

This module is the pool and its state machine, without processes: a standby is any
:class:`StandbyProcess` (the Spark one is :class:`.standby_app.StandbyApp`; tests use
fakes), so the rules below are tested as a table.

Theory of operation. The pool keeps ``wanted`` standbys, all started with one *key*
(the Spark settings a submit must have to take one: :func:`.submit.standby_key`).
Each goes through::

    WARMING --ready--> READY --take--> TAKEN   (a topology's now: leaves the pool)
       |  |              |                  ^
       |  +--------------|------take--------+  (none ready: one still warming)
       +---died/stop-----+---died/stop--> GONE (leaves the pool)

- A launch takes a READY standby, else a WARMING one: that one cuts its warm-up
  short and runs the topology in the session it has, which is never later than a
  cold start would be (it began earlier) and leaves the cores to one JVM instead of
  two.

- A standby that dies before it is taken is a failure: the next one starts after a
  back-off that grows 4 times per failure in a row (``backoff`` up to
  :data:`~.recovery.RESTART_BACKOFF_MAX_SECS`, as a topology's relaunch), and is reset
  once one gets READY. A warm-up that fails
  every time (no Java, a broken installation) so costs a JVM start every 5 minutes,
  not a loop.
- A take delays the replacement by ``replace_delay``: on 2 cores a warm-up started at
  once takes a core from the first batch of the topology that took the standby.
- A new standby starts only when ``room()`` says its memory is free
  (:mod:`.memory`: the launcher counts topologies and standbys against the budget);
  :meth:`StandbyPool.shed` stops one to make room for a topology that starts cold.
"""

from __future__ import annotations

import enum
import threading
import time
from dataclasses import dataclass
from typing import Callable, Generic, Hashable, Mapping, Protocol, TypeVar

import structlog

from .recovery import RESTART_BACKOFF_SECS, relaunch_backoff

log = structlog.get_logger(__name__)

#: A taken standby is replaced this long after the take: the topology's first batch
#: takes 1-3 s on a standby, and a warm-up would take a core from it.
REPLACE_DELAY_SECS = 10.0


class Phase(enum.Enum):
    WARMING = "warming"
    READY = "ready"
    TAKEN = "taken"
    GONE = "gone"


class Event(enum.Enum):
    READY = "ready"          # its status says the warm-up is done
    DIED = "died"            # its process is gone
    STOP = "stop"            # the pool stops it (close, shed)
    TAKE = "take"            # a launch takes it


#: Every transition there is; anything else is a bug (:class:`StandbyError`).
TRANSITIONS: Mapping[tuple[Phase, Event], Phase] = {
    (Phase.WARMING, Event.READY): Phase.READY,
    (Phase.WARMING, Event.DIED): Phase.GONE,
    (Phase.WARMING, Event.STOP): Phase.GONE,
    (Phase.READY, Event.DIED): Phase.GONE,
    (Phase.READY, Event.STOP): Phase.GONE,
    (Phase.READY, Event.TAKE): Phase.TAKEN,
    (Phase.WARMING, Event.TAKE): Phase.TAKEN,
}


class StandbyError(Exception):
    """A transition the table does not allow (a bug of the caller)."""


def next_phase(phase: Phase, event: Event) -> Phase:
    """The phase after ``event``.

    Raises:
        StandbyError: the table has no such transition.
    """
    try:
        return TRANSITIONS[(phase, event)]
    except KeyError:
        raise StandbyError(f"a {phase.value} standby cannot take event "
                           f"{event.value!r}") from None


class StandbyProcess(Protocol):
    """One standby application as the pool sees it."""

    key: Hashable

    def probe(self) -> Phase:
        """WARMING, READY (waiting for a hand-off) or GONE (its process is dead)."""
        ...

    def stop(self) -> None:
        """Stop it for good (it holds nothing worth a graceful stop), or clean up
        after it if it died."""
        ...


P = TypeVar("P", bound=StandbyProcess)


@dataclass
class Standby(Generic[P]):
    process: P
    phase: Phase = Phase.WARMING

    def apply(self, event: Event) -> None:
        self.phase = next_phase(self.phase, event)


class StandbyPool(Generic[P]):
    """Keeps ``wanted`` standbys of ``key`` (see the module docstring).

    Args:
        wanted: standbys to keep (0: none, the pool does nothing).
        key: the key of the standbys ``spawn`` starts.
        spawn: starts one standby. May raise; that counts as a failure.
        room: whether one more standby's memory is free now, given how many are
            alive (called with the pool's lock held: it must not call the pool).
        clock: monotonic seconds.
        backoff: the first wait after a standby died untaken
            (:func:`.recovery.relaunch_backoff`).
        replace_delay: see :data:`REPLACE_DELAY_SECS`.
    """

    def __init__(self, wanted: int, key: Hashable, spawn: Callable[[], P], *,
                 room: Callable[[int], bool] = lambda held: True,
                 clock: Callable[[], float] = time.monotonic,
                 backoff: float = RESTART_BACKOFF_SECS,
                 replace_delay: float = REPLACE_DELAY_SECS):
        self.wanted = wanted
        self.key = key
        self.spawn = spawn
        self.room = room
        self.clock = clock
        self.schedule = relaunch_backoff(backoff)
        self.replace_delay = replace_delay
        self.standbys: list[Standby[P]] = []
        self.failures = 0                   # standbys dead untaken, in a row
        self.next_start = clock()           # no start before this
        self.closed = False
        self._lock = threading.Lock()

    # --- queries --------------------------------------------------------------------
    def phases(self) -> list[Phase]:
        with self._lock:
            return [s.phase for s in self.standbys]

    def held(self) -> int:
        """Standbys alive (warming or ready): what they hold counts as memory in use."""
        with self._lock:
            return len(self.standbys)

    # --- the monitor ----------------------------------------------------------------
    def check(self) -> None:
        """Notice standbys that got ready or died, then start what is missing when the
        back-off and the memory allow (the launcher's monitor calls this)."""
        with self._lock:
            for standby in list(self.standbys):
                self._probe(standby)
            now = self.clock()
            while (not self.closed and len(self.standbys) < self.wanted
                   and now >= self.next_start and self.room(len(self.standbys))):
                try:
                    process = self.spawn()
                except Exception as exc:  # noqa: BLE001 - counted, retried later
                    log.warning("standby_start_failed", error=str(exc))
                    self._failed(now)
                    return
                self.standbys.append(Standby(process))
                log.info("standby_started", standbys=len(self.standbys))

    def _probe(self, standby: Standby[P]) -> None:
        seen = standby.process.probe()
        if seen is Phase.GONE:
            standby.apply(Event.DIED)
            self.standbys.remove(standby)
            self._failed(self.clock())
            self._clean(standby)
            log.warning("standby_died", failures=self.failures,
                        next_in=round(self.next_start - self.clock(), 1))
        elif seen is Phase.READY and standby.phase is Phase.WARMING:
            standby.apply(Event.READY)
            self.failures = 0
            log.info("standby_ready")

    def _failed(self, now: float) -> None:
        self.failures += 1
        wait = self.schedule.delay(self.failures - 1)
        self.next_start = max(self.next_start, now + wait)

    def retarget(self, key: Hashable, spawn: Callable[[], P], wanted: int) -> None:
        """Keep ``wanted`` standbys of ``key``, started by ``spawn``, from now on; those
        of another key are stopped. Under run_as_user a standby is one OS user's
        process: the launcher keeps them for the user who launched last."""
        with self._lock:
            if key == self.key and wanted == self.wanted:
                return
            self.key, self.spawn, self.wanted = key, spawn, wanted
            for standby in list(self.standbys):
                self._stop(standby)
            self.failures = 0
            self.next_start = self.clock()

    # --- launches -------------------------------------------------------------------
    def take(self, key: Hashable) -> tuple[P, Phase] | None:
        """A standby of ``key``, now the caller's (it leaves the pool), with the phase
        it was taken in: a ready one, else one still warming; None when there is none
        alive, or the settings differ (the launch starts cold)."""
        with self._lock:
            if self.closed or key != self.key:
                return None
            for standby in list(self.standbys):
                self._probe(standby)
            if not self.standbys:
                return None
            standby = max(self.standbys, key=lambda s: s.phase is Phase.READY)
            phase = standby.phase
            standby.apply(Event.TAKE)
            self.standbys.remove(standby)
            self.next_start = max(self.next_start, self.clock() + self.replace_delay)
            return standby.process, phase

    def shed(self) -> bool:
        """Stop one standby (a warming one first: it has less done) to free its
        memory for a topology; False when there is none."""
        with self._lock:
            if not self.standbys:
                return False
            standby = min(self.standbys, key=lambda s: s.phase is Phase.READY)
            self._stop(standby)
            return True

    def close(self) -> None:
        """Stop every standby; the pool starts none after this."""
        with self._lock:
            self.closed = True
            for standby in list(self.standbys):
                self._stop(standby)

    def _stop(self, standby: Standby[P]) -> None:
        standby.apply(Event.STOP)
        self.standbys.remove(standby)
        self._clean(standby)

    def _clean(self, standby: Standby[P]) -> None:
        """Stop what is left of a standby that left the pool untaken (a dead one's
        directory and zombie too)."""
        try:
            standby.process.stop()
        except Exception as exc:  # noqa: BLE001 - logged; the others still stop
            log.error("standby_stop_failed", error=str(exc))
