"""The fence of cluster mode: one driver of a topology at any time (``driver.claim``).

With ``spark.driver.supervise`` a standalone master relaunches a driver whose worker it
lost; the lost worker may only have been cut off from the master, its driver still
running and still sharing the work directory (checkpoint, status, logs) with the new
one. Each driver, once it is about to start Spark, writes ``driver.claim`` by rename
with a random token (:func:`write_claim`); the last one written wins. A driver goes
on only while the file holds its token:

- the driver's loop asks at each poll (about twice a second, :class:`DriverFence`);
  a driver that lost the claim stops its query and Spark and exits 0 without writing
  ``status.json`` or ``attempts.json`` (they are the new driver's now);
- the spouts' ``latestOffset`` asks before it offers new offsets (a batch is planned
  only when a spout has new data, so the read costs one per batch, not per trigger):
  a driver without the claim plans no batch; and ``commit`` before it acks;
- the ``foreachBatch`` sink asks before it runs the batch's tail, and raises
  :class:`ClaimLost` without it (the batch is not committed).

What remains: a batch planned before the claim changed runs to its end, until the
loop's next poll stops the query: its tasks' side effects (the bolts' own writes, the
state store's next version) and the JVM's write of its commit log. Spark's metadata
logs are a second fence there: each batch's offsets and commit are created once, and
a driver that finds its batch's file made by another fails ("concurrent update").
On NFS a rename made on another host shows once the attribute cache of this one
expires (``actimeo``, seconds): the claim is seen that much later.

The claim is a fence, not a secret: anyone who can write the work directory can stop
the topology anyway. No PySpark here.
"""

from __future__ import annotations

import json
import secrets
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from .rundir import _field, _json, _object, read_untrusted, write_atomic

#: ``driver.claim``: a token, a driver id, a host name and a few numbers.
MAX_CLAIM_BYTES = 4 << 10
#: A driver whose claim cannot be read (an NFS server away) for this long fails (and is
#: relaunched) rather than run on without knowing it is the one.
CLAIM_UNREADABLE_SECS = 30.0

HELD = "held"
LOST = "lost"           # another token, no file, or a file no driver wrote
UNKNOWN = "unknown"     # could not be read now


@dataclass(frozen=True)
class Claim:
    """``driver.claim``: who may run the topology now."""

    token: str
    attempt: int
    driver_id: str
    host: str
    pid: int
    at: float

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> "Claim":
        """Raises: ValueError: not a claim."""
        raw = _object(_json(text), "the claim")
        return cls(token=_field(raw, "token", (str,)),
                   attempt=_field(raw, "attempt", (int,)),
                   driver_id=_field(raw, "driver_id", (str,), ""),
                   host=_field(raw, "host", (str,), ""), pid=_field(raw, "pid", (int,), 0),
                   at=float(_field(raw, "at", (int, float), 0.0)))


def new_token() -> str:
    return secrets.token_hex(16)


def write_claim(path: Path, claim: Claim) -> None:
    """Take the claim (by rename: a reader sees the old or the new one)."""
    write_atomic(path, claim.to_json())


def read_claim(path: Path) -> Claim:
    """Raises: FileNotFoundError: none. ValueError: not a claim (or a link, a FIFO, over
    :data:`MAX_CLAIM_BYTES`). OSError: it cannot be read."""
    return Claim.from_json(read_untrusted(path, MAX_CLAIM_BYTES))


@dataclass(frozen=True)
class Fence:
    """The question "does ``path`` still hold ``token``?", small enough to be pickled
    into the spouts' data sources (which run in other Python processes)."""

    path: str
    token: str

    def check(self) -> str:
        """:data:`HELD`, :data:`LOST` (another token, no file, a file that is not a
        claim: a driver writes claims by rename only) or :data:`UNKNOWN` (it could not
        be read)."""
        try:
            claim = read_claim(Path(self.path))
        except (FileNotFoundError, ValueError):
            return LOST
        except OSError:
            return UNKNOWN
        return HELD if claim.token == self.token else LOST

    def holds(self) -> bool:
        return self.check() == HELD


class ClaimLost(RuntimeError):
    """Raised before a batch's side effects by a driver that does not hold the claim."""

    def __init__(self, path: str):
        super().__init__(f"{path} no longer names this driver: another one took over")


class ClaimUnreadable(RuntimeError):
    """The claim could not be read for :data:`CLAIM_UNREADABLE_SECS`."""


class DriverFence:
    """The driver's side of the fence: :meth:`poll` at each turn of its loop.

    ``superseded`` becomes true (and stays) once the claim was seen lost; the driver then
    writes nothing more (``status.json``, ``attempts.json``)."""

    def __init__(self, fence: Fence, clock: Callable[[], float] = time.monotonic):
        self.fence = fence
        self.superseded = False
        self._clock = clock
        self._unreadable_since: float | None = None

    def poll(self) -> bool:
        """Whether this driver still holds the claim; False (once, with a line to
        stderr) when another took it.

        Raises:
            ClaimUnreadable: it could not be read for :data:`CLAIM_UNREADABLE_SECS`.
        """
        if self.superseded:
            return False
        state = self.fence.check()
        if state == UNKNOWN:
            now = self._clock()
            if self._unreadable_since is None:
                self._unreadable_since = now
            elif now - self._unreadable_since >= CLAIM_UNREADABLE_SECS:
                raise ClaimUnreadable(f"cannot read {self.fence.path} for "
                                      f"{CLAIM_UNREADABLE_SECS:.0f} s")
            return True
        self._unreadable_since = None
        if state == LOST:
            self.superseded = True
            print(f"spark_main: superseded: {self._holder()}; this driver stops and "
                  "writes nothing more", file=sys.stderr, flush=True)
            return False
        return True

    def _holder(self) -> str:
        try:
            claim = read_claim(Path(self.fence.path))
        except FileNotFoundError:
            return f"{self.fence.path} is gone"
        except (OSError, ValueError) as exc:
            return f"{self.fence.path} is not this driver's claim ({exc})"
        who = f"driver {claim.driver_id} " if claim.driver_id else "a driver "
        return (f"{who}on {claim.host} (pid {claim.pid}, attempt {claim.attempt}) took "
                f"the claim")
