"""The back-off schedule every retry in the package uses (nimbus_thrift.rpc.backoff), and
the delays between a client's connection attempts made from it."""

from __future__ import annotations

import pytest

from nimbus_thrift.rpc.backoff import Backoff, backoff_delays


def test_each_wait_is_factor_times_the_last_up_to_the_cap() -> None:
    schedule = Backoff(initial=0.1, factor=2.0, cap=0.5)
    assert [schedule.delay(n) for n in range(5)] == pytest.approx([0.1, 0.2, 0.4, 0.5, 0.5])
    assert schedule.delays(5) == [schedule.delay(n) for n in range(5)]


def test_no_waits_for_no_retries() -> None:
    assert Backoff(5.0, 4.0, 300.0).delays(0) == []
    assert Backoff(5.0, 4.0, 300.0).delays(-1) == []


def test_waits_are_floats_even_from_whole_numbers() -> None:
    assert [type(d) for d in Backoff(0, 2, 0).delays(2)] == [float, float]
    assert Backoff(5, 4, 300).delays(5) == [5.0, 20.0, 80.0, 300.0, 300.0]


def test_backoff_doubles_up_to_the_cap():
    assert backoff_delays(1, 0.1, 2.0, 2.0) == []
    assert backoff_delays(3, 0.1, 2.0, 2.0) == pytest.approx([0.1, 0.2])
    assert backoff_delays(7, 0.1, 2.0, 0.5) == pytest.approx([0.1, 0.2, 0.4, 0.5, 0.5, 0.5])


def test_a_long_run_of_failures_stays_at_the_cap() -> None:
    # 2.0 ** 1024 overflows a float: a child that crash-loops for hours must still get
    # the cap, not an OverflowError in the supervisor's loop.
    schedule = Backoff(0.1, 2.0, 10.0)
    assert schedule.delay(1_024) == 10.0
    assert schedule.delay(100_000) == 10.0
    assert Backoff(5.0, 4.0, 300.0).delay(600) == 300.0
