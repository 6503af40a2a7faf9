"""The daemon's time series of component figures (nimbus/timeseries.py): windows over
cumulative counts, runs that restart from zero, bounded tiers, with a fake clock."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from nimbus_thrift.nimbus.state.timeseries import TIERS, Sampler, Series, Sample, TimeSeries

T0 = 1_700_000_000.0


@dataclass(frozen=True)
class Stats:
    emitted: int
    processed: int
    latency_ms: float = 0.0
    busy_ms: float = 0.0


def feed(series: TimeSeries, start: float, until: float, every: float, rate: int,
         run: float | None = None, cid: str = "split", latency: float = 0.0) -> None:
    """Samples every ``every`` s from ``start`` to ``until`` of a component emitting
    and processing ``rate`` tuples/s since ``run`` (default: ``start``)."""
    run = start if run is None else run
    t = start
    while t <= until:
        done = int((t - run) * rate)
        series.record("topo", t, run, {cid: Stats(done, done, latency)})
        t += every


def test_a_window_is_the_difference_of_counts_over_it() -> None:
    series = TimeSeries()
    feed(series, T0, T0 + 3600, 10, rate=5)
    all_time = series.window("topo", None)["split"]
    assert (all_time.emitted, all_time.processed) == (5 * 3600, 5 * 3600)
    ten_min = series.window("topo", 600)["split"]
    assert ten_min.processed == 5 * 600 and ten_min.seconds == 600
    assert ten_min.rate(spout=False) == 5.0
    three_hours = series.window("topo", 10800)["split"]
    # The run is one hour old: a longer window is the whole run.
    assert three_hours.processed == 5 * 3600 and three_hours.seconds == 3600


def test_coarse_tiers_answer_long_windows_within_their_spacing() -> None:
    series = TimeSeries()
    feed(series, T0, T0 + 30_000, 10, rate=2)
    three_hours = series.window("topo", 10800)["split"]
    # Tier 1 keeps one sample per 120 s: the window's start is off by less than that.
    assert 2 * 10800 <= three_hours.processed <= 2 * (10800 + 120)
    assert series.window("topo", 86400)["split"].processed == 2 * 30_000


def test_tiers_stay_bounded_over_days_of_samples() -> None:
    series = Series()
    for i in range(3 * 86400 // 10):
        t = T0 + i * 10
        series.add(Sample(t, T0, {"c": (i, i, 0.0, 0.0)}))
    bound = sum(int(span / step) + 2 for span, step in TIERS)
    assert len(series) <= bound
    assert len(series) > bound - 10          # and the tiers are actually used


def test_a_relaunched_run_counts_from_zero_and_older_samples_are_no_baseline() -> None:
    series = TimeSeries()
    feed(series, T0, T0 + 1000, 10, rate=10)                 # run 1: 10000 tuples
    relaunch = T0 + 1005
    feed(series, relaunch, relaunch + 100, 10, rate=1)       # run 2: counts from 0
    assert series.window("topo", None)["split"].processed == 100
    # The 600 s window started before run 2: it is the whole of run 2, not
    # "100 - 10000" nor run 1's tuples.
    ten_min = series.window("topo", 600)["split"]
    assert ten_min.processed == 100 and ten_min.seconds == 100


def test_a_window_older_than_what_was_observed_starts_at_the_oldest_sample() -> None:
    # The daemon restarted while the run went on: its first sample is at 5000 tuples.
    series = TimeSeries()
    run = T0 - 1000
    feed(series, T0, T0 + 100, 10, rate=5, run=run)
    ten_min = series.window("topo", 600)["split"]
    assert ten_min.processed == 5 * 100 and ten_min.seconds == 100
    assert series.window("topo", None)["split"].processed == 5 * 1100


def test_latency_is_weighted_by_the_tuples_processed() -> None:
    series = TimeSeries()
    series.record("topo", T0, T0, {"c": Stats(0, 0, 0.0)})
    series.record("topo", T0 + 10, T0, {"c": Stats(100, 100, 1000.0)})
    series.record("topo", T0 + 20, T0, {"c": Stats(400, 400, 2000.0)})
    series.record("topo", T0 + 30, T0, {"c": Stats(400, 400, 9000.0)})   # idle
    assert series.window("topo", None)["c"].latency_ms == (100 * 1000 + 300 * 2000) / 400


def test_a_clock_that_steps_back_replaces_the_latest_sample_only() -> None:
    series = Series()
    series.add(Sample(T0, T0, {"c": (0, 0, 0.0, 0.0)}))
    series.add(Sample(T0 + 100, T0, {"c": (100, 100, 0.0, 0.0)}))
    series.add(Sample(T0 + 50, T0, {"c": (120, 120, 0.0, 0.0)}))
    assert series.window(None)["c"].processed == 120
    assert [s.at for s in series.tiers[0].samples] == [T0, T0 + 100]


def test_unknown_topologies_and_removed_ones_have_no_figures() -> None:
    series = TimeSeries()
    assert series.window("nope", None) == {}
    feed(series, T0, T0 + 20, 10, rate=1)
    series.record("other", T0, T0, {"c": Stats(1, 1)})
    series.keep_only({"other"})
    assert series.window("topo", None) == {} and len(series) == 1


def test_the_sampler_samples_until_stopped_and_survives_a_failure() -> None:
    calls: list[int] = []
    twice = threading.Event()

    def sample() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("one bad pass")
        twice.set()

    sampler = Sampler(sample, every=0.01)
    sampler.start()
    assert twice.wait(10)
    sampler.stop()
    count = len(calls)
    assert not sampler._thread.is_alive()     # type: ignore[union-attr]
    assert len(calls) == count


def test_busy_time_gives_execute_latency_and_capacity_over_the_window() -> None:
    series = TimeSeries()
    series.record("topo", T0, T0, {"c": Stats(0, 0, busy_ms=0.0)})
    series.record("topo", T0 + 400, T0, {"c": Stats(1000, 1000, busy_ms=50_000.0)})
    series.record("topo", T0 + 1000, T0, {"c": Stats(3000, 3000, busy_ms=530_000.0)})
    window = series.window("topo", 600)["c"]
    # The last 600 s: 2000 tuples in 480 s of task time, on 2 executors.
    assert (window.processed, window.busy_ms, window.seconds) == (2000, 480_000.0, 600.0)
    assert window.execute_ms == 240.0
    assert window.capacity(executors=2) == 0.4
    unmeasured = series.window("topo", None)["c"]
    assert TimeSeries().window("topo", None) == {}
    assert unmeasured.capacity(executors=0) is None
    series.record("other", T0, T0, {"c": Stats(10, 10)})
    idle = series.window("other", None)["c"]
    assert idle.execute_ms is None and idle.capacity(1) is None


def test_samples_are_the_current_runs_last_seconds_oldest_first() -> None:
    series = TimeSeries()
    assert series.samples("topo", 60) == []
    feed(series, T0, T0 + 300, 10, rate=10)                  # run 1
    relaunch = T0 + 305
    feed(series, relaunch, relaunch + 100, 10, rate=1)       # run 2, 11 samples
    recent = series.samples("topo", 60)
    assert [s.at for s in recent] == [relaunch + t for t in range(40, 101, 10)]
    assert all(s.run == relaunch for s in recent)            # nothing of run 1
    # All of run 2 (its first sample may have been folded into the finest tier's
    # spacing, right after run 1's last), none of run 1.
    whole = series.samples("topo", 3600)
    assert len(whole) >= 10 and {s.run for s in whole} == {relaunch}
    assert whole[-1].at == relaunch + 100
    assert series.samples("other", 60) == []
