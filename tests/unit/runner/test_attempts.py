"""Bytes tier: cluster mode's bookkeeping (runner/attempts.py): the back-off schedule,
failures in a row and when they reset, dead attempts, the bounded book, and the summary
the daemon reads."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from nimbus_thrift.runner import attempts as at
from nimbus_thrift.runner.attempts import (Attempt, AttemptBook, Supervision,
                                           read_attempts, read_summary, read_supervision,
                                           summarize, write_attempts, write_supervision)
from nimbus_thrift.runner.rundir import RunDir


def record(n: int, outcome: str = at.RUNNING, *, submission: str = "s1",
           restarts: int = 0, claimed: float | None = 100.0, ended: float | None = None,
           error: str = "", pid: int = 10) -> Attempt:
    # The master relaunches a driver under a new id (SPARK-19900): one per attempt.
    return Attempt(attempt=n, driver_id=f"driver-1-000{n}", host="h", pid=pid + n,
                   started_at=90.0, outcome=outcome, error=error, restarts=restarts,
                   submission=submission, claimed_at=claimed, ended_at=ended)


S1 = Supervision(submission="s1")


def test_the_backoff_is_the_daemons_schedule_capped() -> None:
    sup = Supervision()
    assert [sup.delay(k) for k in range(6)] == [0.0, 5.0, 20.0, 80.0, 300.0, 300.0]
    assert sup.delay(10_000) == 300.0                        # grown a step at a time
    assert Supervision(backoff_secs=1, backoff_factor=2, backoff_max_secs=5).delay(4) == 5


def test_the_defaults_are_the_daemons() -> None:
    from nimbus_thrift.nimbus.settings import DEFAULT_MAX_RESTARTS
    from nimbus_thrift.nimbus.spark import recovery
    sup = Supervision()
    assert sup.max_restarts == DEFAULT_MAX_RESTARTS and sup.restart_failed
    assert (sup.backoff_secs, sup.backoff_factor, sup.backoff_max_secs, sup.reset_secs) == (
        recovery.RESTART_BACKOFF_SECS, recovery.RESTART_BACKOFF_FACTOR,
        recovery.RESTART_BACKOFF_MAX_SECS, recovery.RESTART_RESET_SECS)


def test_relaunches_allowed_up_to_max_restarts_failures_in_a_row() -> None:
    sup = Supervision(max_restarts=2)
    assert [sup.may_relaunch(k) for k in range(4)] == [True, True, True, False]
    assert not Supervision(restart_failed=False).may_relaunch(1)
    assert Supervision(restart_failed=False).may_relaunch(0)
    assert sup.gave_up_error(3, "E: x") == "gave up after 2 restarts: E: x"
    assert Supervision(restart_failed=False).gave_up_error(1, "E: x") == "E: x"


def test_supervision_file_round_trip_defaults_and_garbage(tmp_path: Path) -> None:
    path = tmp_path / "supervision.json"
    assert read_supervision(path) == Supervision(submission="")
    assert Supervision().submission != Supervision().submission      # one per submission
    mine = Supervision(restart_failed=False, max_restarts=7, backoff_secs=0.5)
    write_supervision(path, mine)
    assert read_supervision(path) == mine
    path.write_text(json.dumps({"max_restarts": 1}))
    assert read_supervision(path) == Supervision(max_restarts=1, submission="")
    for bad in ('{"max_restarts": "3"}', '{"backoff_factor": 0.5}', "[1]", "{",
                '{"max_restarts": -1}'):
        path.write_text(bad)
        assert read_supervision(path) == Supervision(submission=""), bad


def test_failures_in_a_row_chain_through_each_records_restarts() -> None:
    book = AttemptBook()
    assert book.failures_in_row("s1", 600) == 0
    book.start(record(1, at.FAILED, restarts=0, ended=110))
    assert book.failures_in_row("s1", 600) == 1
    book.start(record(2, at.DIED, restarts=1, ended=110))
    assert book.failures_in_row("s1", 600) == 2
    # An attempt that ran reset_secs before failing had recovered: its failure is the first.
    book.start(record(3, at.FAILED, restarts=2, claimed=100, ended=700))
    assert book.failures_in_row("s1", 600) == 1
    # A stop or an end breaks the chain; so does a new submission.
    book.start(record(4, at.STOPPED, restarts=1, ended=710))
    assert book.failures_in_row("s1", 600) == 0
    book.start(record(5, at.FAILED, restarts=0, ended=720))
    assert book.failures_in_row("s1", 600) == 1
    assert book.failures_in_row("s2", 600) == 0
    assert book.last_error() == "" and book.count == 5


def test_an_attempt_never_claimed_ran_nothing() -> None:
    # Failed in its back-off (before Spark): no time ran, whatever its wall time.
    assert record(1, at.DIED, restarts=4, claimed=None, ended=5000).failures_after(600) == 5


def test_running_records_died_when_last_seen() -> None:
    book = AttemptBook()
    book.start(record(1, at.FAILED, ended=110, error="E: one"))
    book.start(record(2, at.RUNNING, restarts=1, claimed=120))
    assert book.mark_died(now=500.0, last_seen={12: 130.0}) == 1
    dead = book.attempts[-1]
    assert (dead.outcome, dead.ended_at) == (at.DIED, 130.0)
    assert "h (pid 12) ended without a word" in dead.error
    assert book.last_error() == dead.error
    assert book.failures_in_row("s1", 600) == 2
    # Never seen (or seen by another pid, or seen before it started): ended at its claim.
    book.start(record(3, at.RUNNING, restarts=2, claimed=140))
    book.mark_died(now=900.0, last_seen={99: 800.0})
    assert book.attempts[-1].ended_at == 140.0 and book.mark_died(now=901.0) == 0


def test_the_book_is_bounded_and_counts_every_attempt(tmp_path: Path) -> None:
    book = AttemptBook()
    for n in range(1, 51):
        book.start(record(n, at.FAILED, restarts=n - 1, ended=110, error="E" * 5000))
    path = tmp_path / "attempts.json"
    book.attempts = [replace(r, error=at.clip_error(r.error)) for r in book.attempts]
    write_attempts(path, book)
    back = read_attempts(path)
    assert back.count == 50 and len(back.attempts) == at.MAX_KEPT_ATTEMPTS
    assert [r.attempt for r in back.attempts] == list(range(31, 51))
    assert back.failures_in_row("s1", 600) == 50      # past what is kept
    assert path.stat().st_size < at.MAX_ATTEMPTS_BYTES
    assert len(back.attempts[-1].error) == at.MAX_ATTEMPT_ERROR_CHARS


@pytest.mark.parametrize("text", ["[]", "{", '{"attempts": [{"attempt": 1}]}',
                                  '{"attempts": [], "count": "1"}',
                                  '{"attempts": [{"attempt": 1, "started_at": 1, '
                                  '"outcome": "lost"}]}', '{"gave_up": {"at": 1}}'])
def test_a_file_that_is_not_attempts_is_none(tmp_path: Path, text: str) -> None:
    path = tmp_path / "attempts.json"
    path.write_text(text)
    assert read_attempts(path) == AttemptBook()


def test_the_summary_of_a_running_attempt_and_of_one_waiting() -> None:
    sup = S1
    assert summarize(AttemptBook(), sup, 0) == at.AttemptsSummary()
    book = AttemptBook()
    book.start(record(1, at.FAILED, ended=110, error="E: boom"))
    waiting = replace(record(2, restarts=1, claimed=None), relaunch_at=200.0)
    book.start(waiting)
    summary = summarize(book, sup, now=150.0)
    assert (summary.attempts, summary.failures_in_row, summary.last_failure) == (
        2, 1, "E: boom")
    assert summary.relaunch_at == 200.0 and summary.current == waiting
    assert summarize(book, sup, now=201.0).relaunch_at is None
    book.attempts[-1] = replace(waiting, claimed_at=201.0)
    assert summarize(book, sup, now=150.0).relaunch_at is None     # Spark is up


def test_the_summary_after_the_drivers_gave_up(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path)
    write_supervision(run_dir.supervision, S1)
    book = AttemptBook()
    book.start(record(1, at.FAILED, restarts=3, ended=110, error="E: last"))
    book.gave_up = {"driver_id": "driver-1-0001", "submission": "s1", "at": 111.0,
                    "error": "gave up after 3 restarts: E: last"}
    write_attempts(run_dir.attempts, book)
    summary = read_summary(run_dir, now=120.0)
    assert summary.gave_up and summary.gave_up_error.startswith("gave up after 3")
    assert summary.failures_in_row == 4 and summary.current is None
    # A new submission has not failed (yet); its first attempt clears the give-up.
    again = Supervision(submission="s2")
    assert summarize(book, again, 130.0) == at.AttemptsSummary(
        attempts=1, last_failure="E: last")
    book.start(record(2, submission="s2"))
    assert not summarize(book, again, 130.0).gave_up and book.gave_up is None
