"""Cluster mode's attempts: how often a topology's driver ran, failed and may run again.

A standalone master with ``spark.driver.supervise`` relaunches a driver (the same
driver id) each time it exits non-zero or its worker is lost, without end and without
waiting. So the driver keeps the count itself, in the work directory every host sees:

``supervision.json`` (written by the daemon at each submission; :class:`Supervision`)
    ``{"restart_failed", "max_restarts", "backoff_secs", "backoff_factor",
    "backoff_max_secs", "reset_secs", "submission"}``; missing keys (or file) take the
    daemon's defaults (``DEFAULT_*`` below). ``submission`` names the submission
    (a random token each :class:`Supervision` made without one): the master's
    relaunches keep the file, and so continue its count; a new submission starts one.
``attempts.json`` (written by the drivers, by rename; :class:`AttemptBook`)
    ``{"count": N, "attempts": [the last MAX_KEPT_ATTEMPTS records], "gave_up": null or
    {"driver_id", "submission", "at", "error"}}``, a record being ``{"attempt",
    "driver_id", "submission", "host", "pid", "started_at", "claimed_at", "ended_at",
    "outcome", "error", "restarts", "relaunch_at"}`` (:class:`Attempt`).

Theory of operation. An attempt starts with the record ``running``; a record still
``running`` when the next one starts ended without a word (worker lost, SIGKILL): it
becomes ``died``. ``restarts`` of a record is the failures in a row before it: the
previous record's plus one if that one failed or died (one if it had run
``reset_secs`` since it took the claim: it had recovered), 0 after a stop, an end, or
a record of another submission (the daemon submitted anew; the master's relaunches
have new driver ids, since SPARK-19900, but the same submission). An attempt with
``restarts`` k > 0 waits ``backoff_secs * factor**(k-1)`` (at most
``backoff_max_secs``) before it starts Spark; with k > ``max_restarts`` (or k > 0 and
not ``restart_failed``) it gives up instead: ``gave_up`` set, status ``failed``, exit
0. A failing attempt that leaves no restart gives up itself.

No PySpark here: the daemon imports this module (:func:`read_summary`).
"""

from __future__ import annotations

import json
import secrets
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from .rundir import (_field, _json, _object, RunDir, read_untrusted, report_malformed,
                     write_atomic)

# The daemon's relaunch policy in client mode (nimbus/spark/recovery.py, and the
# max_restarts setting's default): used when supervision.json does not say.
DEFAULT_RESTART_FAILED = True
DEFAULT_MAX_RESTARTS = 3
DEFAULT_BACKOFF_SECS = 5.0
DEFAULT_BACKOFF_FACTOR = 4.0
DEFAULT_BACKOFF_MAX_SECS = 300.0
DEFAULT_RESET_SECS = 600.0

#: Records kept in attempts.json (with the count of all): more than any max_restarts
#: anyone sets, few enough to read at each look of the daemon.
MAX_KEPT_ATTEMPTS = 20
#: An attempt's error as kept there (status.json and the logs have all of it).
MAX_ATTEMPT_ERROR_CHARS = 1000
#: attempts.json: 20 records of ~1.2 KB (an error escaped in JSON at most 6 bytes a
#: character is 6 KB: 20 of those are 120 KB); twice that.
MAX_ATTEMPTS_BYTES = 256 << 10
#: supervision.json: six numbers.
MAX_SUPERVISION_BYTES = 4 << 10

RUNNING = "running"
FAILED = "failed"
DIED = "died"
STOPPED = "stopped"
FINISHED = "finished"
SUPERSEDED = "superseded"
OUTCOMES = (RUNNING, FAILED, DIED, STOPPED, FINISHED, SUPERSEDED)
FAILURES = (FAILED, DIED)

_NUMBER = (int, float)


def new_submission() -> str:
    return secrets.token_hex(8)


@dataclass(frozen=True)
class Supervision:
    """supervision.json: whether and when a failed driver is relaunched, for which
    submission (a new token unless given: one per submission the daemon writes; a
    file without one reads as "", as does no file)."""

    restart_failed: bool = DEFAULT_RESTART_FAILED
    max_restarts: int = DEFAULT_MAX_RESTARTS
    backoff_secs: float = DEFAULT_BACKOFF_SECS
    backoff_factor: float = DEFAULT_BACKOFF_FACTOR
    backoff_max_secs: float = DEFAULT_BACKOFF_MAX_SECS
    reset_secs: float = DEFAULT_RESET_SECS
    submission: str = field(default_factory=new_submission)

    def delay(self, restarts: int) -> float:
        """Seconds an attempt with ``restarts`` failures in a row before it waits (0 for
        none): the rule of rpc/backoff.py's Backoff (which runner/ may not import),
        grown a step at a time so a huge count is no float overflow."""
        if restarts <= 0:
            return 0.0
        wait = self.backoff_secs
        for _ in range(restarts - 1):
            if wait >= self.backoff_max_secs:
                break
            wait *= self.backoff_factor
        return float(max(0.0, min(wait, self.backoff_max_secs)))

    def may_relaunch(self, failures: int) -> bool:
        """Whether a driver with ``failures`` in a row behind it may run again."""
        return failures <= 0 or self.restart_failed and failures <= self.max_restarts

    def gave_up_error(self, failures: int, error: str) -> str:
        """status.json's error when ``failures`` in a row end the topology."""
        if not self.restart_failed:
            return error
        return f"gave up after {failures - 1} restarts: {error}"

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> "Supervision":
        """Raises: ValueError: not supervision (a wrong type, a negative number)."""
        raw = _object(_json(text), "the supervision")
        d = cls()
        result = cls(
            restart_failed=_field(raw, "restart_failed", (bool,), d.restart_failed),
            max_restarts=_field(raw, "max_restarts", (int,), d.max_restarts),
            backoff_secs=float(_field(raw, "backoff_secs", _NUMBER, d.backoff_secs)),
            backoff_factor=float(_field(raw, "backoff_factor", _NUMBER, d.backoff_factor)),
            backoff_max_secs=float(_field(raw, "backoff_max_secs", _NUMBER,
                                          d.backoff_max_secs)),
            reset_secs=float(_field(raw, "reset_secs", _NUMBER, d.reset_secs)),
            submission=_field(raw, "submission", (str,), ""))
        if min(result.max_restarts, result.backoff_secs, result.backoff_max_secs,
               result.reset_secs) < 0 or result.backoff_factor < 1:
            raise ValueError(f"negative numbers or a factor below 1 in {raw}")
        return result


def read_supervision(path: Path) -> Supervision:
    """The policy in ``path``; the defaults when it is missing or not supervision
    (reported, rate-limited)."""
    try:
        return Supervision.from_json(read_untrusted(path, MAX_SUPERVISION_BYTES))
    except FileNotFoundError:
        return Supervision(submission="")
    except (OSError, ValueError) as exc:
        report_malformed(path, exc)
        return Supervision(submission="")


def write_supervision(path: Path, supervision: Supervision) -> None:
    write_atomic(path, supervision.to_json())


@dataclass(frozen=True)
class Attempt:
    """One driver's run (see the module's docstring)."""

    attempt: int
    driver_id: str
    host: str
    pid: int
    started_at: float
    outcome: str = RUNNING
    error: str = ""
    restarts: int = 0
    submission: str = ""                # supervision.json's when it started
    claimed_at: float | None = None     # took the claim and started Spark
    ended_at: float | None = None
    relaunch_at: float | None = None    # its back-off's end (restarts > 0)

    def ran_secs(self) -> float:
        """How long it ran Spark (0 if it never did or has not ended)."""
        if self.claimed_at is None or self.ended_at is None:
            return 0.0
        return max(0.0, self.ended_at - self.claimed_at)

    def failures_after(self, reset_secs: float) -> int:
        """Failures in a row once this (ended) attempt is done."""
        if self.outcome not in FAILURES:
            return 0
        return 1 if self.ran_secs() >= reset_secs else self.restarts + 1

    @classmethod
    def from_dict(cls, raw: Any) -> "Attempt":
        raw = _object(raw, "an attempt")
        outcome = _field(raw, "outcome", (str,))
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome {outcome[:20]!r} is not one of {OUTCOMES}")

        def when(name: str) -> float | None:
            value = _field(raw, name, _NUMBER + (type(None),), None)
            return None if value is None else float(value)
        return cls(attempt=_field(raw, "attempt", (int,)),
                   driver_id=_field(raw, "driver_id", (str,), ""),
                   host=_field(raw, "host", (str,), ""), pid=_field(raw, "pid", (int,), 0),
                   started_at=float(_field(raw, "started_at", _NUMBER)), outcome=outcome,
                   error=_field(raw, "error", (str,), ""),
                   restarts=_field(raw, "restarts", (int,), 0),
                   submission=_field(raw, "submission", (str,), ""),
                   claimed_at=when("claimed_at"), ended_at=when("ended_at"),
                   relaunch_at=when("relaunch_at"))


@dataclass
class AttemptBook:
    """attempts.json: the count of attempts, the last :data:`MAX_KEPT_ATTEMPTS`, and
    whether the last driver gave up (``gave_up``: ``{"driver_id", "submission", "at",
    "error"}``)."""

    count: int = 0
    attempts: list[Attempt] = field(default_factory=list)
    gave_up: dict[str, Any] | None = None

    def last(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None

    def failures_in_row(self, submission: str, reset_secs: float) -> int:
        """The failures in a row a new attempt of ``submission`` has behind it (call
        :meth:`mark_died` first: a record still ``running`` counts as none)."""
        last = self.last()
        if last is None or last.submission != submission:
            return 0
        return last.failures_after(reset_secs)

    def last_error(self) -> str:
        """The error of the last failed or dead attempt ("" if none)."""
        for record in reversed(self.attempts):
            if record.outcome in FAILURES:
                return record.error
        return ""

    def mark_died(self, now: float, last_seen: dict[int, float] | None = None) -> int:
        """Every record still ``running`` ended without a word: ``died``, ended when it
        was last seen (``last_seen``: pid -> epoch seconds, from its status.json), else
        when it took the claim or started. Returns how many."""
        marked = 0
        for index, record in enumerate(self.attempts):
            if record.outcome != RUNNING:
                continue
            seen = (last_seen or {}).get(record.pid)
            start = record.claimed_at or record.started_at
            ended = seen if seen is not None and start <= seen <= now else start
            error = (f"the driver on {record.host or 'an unknown host'} (pid {record.pid}) "
                     "ended without a word: its worker was lost, or it was killed")
            self.attempts[index] = replace(record, outcome=DIED, ended_at=ended,
                                           error=error)
            marked += 1
        return marked

    def start(self, record: Attempt) -> None:
        """Add a new attempt (its number is the count's next), dropping the oldest past
        :data:`MAX_KEPT_ATTEMPTS`; a new attempt clears ``gave_up``."""
        self.count = max(self.count, record.attempt)
        self.attempts.append(record)
        del self.attempts[:-MAX_KEPT_ATTEMPTS]
        self.gave_up = None

    def update(self, record: Attempt) -> bool:
        """Replace the record of the same attempt, host and pid; False if it is gone."""
        for index, old in enumerate(self.attempts):
            if (old.attempt, old.host, old.pid) == \
                    (record.attempt, record.host, record.pid):
                self.attempts[index] = record
                return True
        return False

    def to_json(self) -> str:
        return json.dumps({"count": self.count,
                           "attempts": [asdict(r) for r in self.attempts],
                           "gave_up": self.gave_up}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> "AttemptBook":
        """Raises: ValueError: not attempts."""
        raw = _object(_json(text), "the attempts")
        records = _field(raw, "attempts", (list,), [])
        gave_up = _field(raw, "gave_up", (dict, type(None)), None)
        if gave_up is not None:
            _field(gave_up, "error", (str,))
        return cls(count=_field(raw, "count", (int,), 0),
                   attempts=[Attempt.from_dict(r) for r in records[-MAX_KEPT_ATTEMPTS:]],
                   gave_up=gave_up)


def read_attempts(path: Path) -> AttemptBook:
    """The attempts in ``path``; none when it is missing or not attempts (reported,
    rate-limited: a driver then starts a new book)."""
    try:
        return AttemptBook.from_json(read_untrusted(path, MAX_ATTEMPTS_BYTES))
    except FileNotFoundError:
        return AttemptBook()
    except (OSError, ValueError) as exc:
        report_malformed(path, exc)
        return AttemptBook()


def write_attempts(path: Path, book: AttemptBook) -> None:
    write_atomic(path, book.to_json())


def clip_error(error: str) -> str:
    return error if len(error) <= MAX_ATTEMPT_ERROR_CHARS else \
        error[:MAX_ATTEMPT_ERROR_CHARS - 3] + "..."


@dataclass(frozen=True)
class AttemptsSummary:
    """What the daemon shows of a cluster-mode topology's attempts (:func:`summarize`).

    ``attempts``: attempts so far; ``failures_in_row``: failures in a row behind the
    current attempt (while one runs) or behind the next one; ``last_failure``: the last
    failed or dead attempt's error; ``gave_up``: the drivers gave up (the error says
    after how many restarts); ``relaunch_at``: epoch seconds at which the current
    attempt ends its back-off and starts Spark, None when none waits; ``current``: the
    attempt still ``running``, None if none is."""

    attempts: int = 0
    failures_in_row: int = 0
    last_failure: str = ""
    gave_up: bool = False
    gave_up_error: str = ""
    relaunch_at: float | None = None
    current: Attempt | None = None


def summarize(book: AttemptBook, supervision: Supervision, now: float) -> AttemptsSummary:
    """The summary of ``book`` for the submission ``supervision`` names (pure).

    Attempts of an earlier submission count as attempts (their errors stay errors),
    not as failures in a row or a give-up of this one: after a new submission, until
    its driver starts, nothing has failed yet. A ``gave_up`` that names no submission
    applies. A record ``running`` is taken at its word: only the next attempt learns
    that it died."""
    last = book.last()
    ours = last is not None and last.submission == supervision.submission
    current = last if last is not None and last.outcome == RUNNING else None
    failures = 0
    if last is not None and ours:
        failures = last.restarts if current else last.failures_after(supervision.reset_secs)
    relaunch_at = None
    if current is not None and current.claimed_at is None and \
            current.relaunch_at is not None and current.relaunch_at > now:
        relaunch_at = current.relaunch_at
    gave_up = book.gave_up is not None and \
        book.gave_up.get("submission", supervision.submission) == supervision.submission
    return AttemptsSummary(attempts=book.count, failures_in_row=failures,
                           last_failure=book.last_error(), gave_up=gave_up,
                           gave_up_error=_gave_up_error(book) if gave_up else "",
                           relaunch_at=relaunch_at, current=current)


def _gave_up_error(book: AttemptBook) -> str:
    return str(book.gave_up.get("error", "")) if book.gave_up else ""


def read_summary(run_dir: RunDir, now: float) -> AttemptsSummary:
    """:func:`summarize` of ``run_dir``'s attempts.json and supervision.json, read as
    untrusted input (a malformed file is none, reported at most once a minute)."""
    return summarize(read_attempts(run_dir.attempts), read_supervision(run_dir.supervision),
                     now)
