"""A bounded time series of each topology's component figures, so that the page-info
calls can answer per window (Storm's ``600``, ``10800``, ``86400`` seconds and
``:all-time``).

The runner reports cumulative counts since its application started (emitted and
processed per component, and the time a bolt's tasks spent on its tuples:
:class:`~.launcher.ComponentStats`) and a recent mean batch latency; the daemon samples
them (every :data:`SAMPLE_SECS`, and at each page-info query) into a :class:`Series`
per topology. A window's figure is then a difference of two cumulative counts: now,
and the sample at (or just before) the window's start.

Theory of operation. Samples are kept in three tiers whose spacing grows with the span
they cover, so a day of history costs a few hundred samples per topology, not one per
sample period::

    tier   covers       one sample per   at most   a window's start is off by at most
    0        600 s          10 s            62       10 s (under 2% of 600 s)
    1      10800 s         120 s            92      120 s
    2      86400 s         900 s            98      900 s

A window is answered from the finest samples kept of each age. The latest sample is
kept apart (always replaced), so a query's own sample is what its figures end at.

Counts belong to one run of the application (``started_at``): a relaunched application
counts from zero again, so samples of an earlier run are never a baseline. A window that
began before the current run started is the whole run (baseline zero), as Storm's
windowed stats restart with their worker. A window longer than what the daemon has
observed of the run (the daemon restarted while the run went on) starts at the oldest
sample: what was seen, not an estimate of what was not.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Mapping, Protocol

import structlog

log = structlog.get_logger(__name__)

#: How often the daemon samples every topology's figures (a page-info query samples
#: its topology too). Tier 0's spacing: finer samples would be thinned out anyway.
SAMPLE_SECS = 10.0
#: ``(span, spacing)`` of each tier, in seconds, finest first: one per Storm window.
TIERS: tuple[tuple[float, float], ...] = ((600.0, 10.0), (10800.0, 120.0),
                                          (86400.0, 900.0))


class SampledStats(Protocol):
    """What is sampled of one component (``ComponentStats`` has these)."""

    @property
    def emitted(self) -> int: ...
    @property
    def processed(self) -> int: ...
    @property
    def latency_ms(self) -> float: ...
    @property
    def busy_ms(self) -> float: ...


@dataclass(frozen=True)
class Sample:
    at: float                                   # daemon clock, seconds
    run: float                                  # the run's start: counts restart with it
    #: component -> (emitted, processed, latency_ms, busy_ms); all but the latency
    #: cumulative over the run
    counts: Mapping[str, tuple[int, int, float, float]]


@dataclass(frozen=True)
class WindowStats:
    """One component's stats over a window."""

    emitted: int
    processed: int
    #: Mean batch latency over the window, weighted by tuples processed in each sample
    #: interval (the latest reported one when nothing was processed).
    latency_ms: float
    #: Seconds the figures span (shorter than the window when the run, or what the
    #: daemon has seen of it, is younger).
    seconds: float
    #: Milliseconds a bolt's tasks spent on its tuples over the window (0: not measured).
    busy_ms: float = 0.0

    @property
    def execute_ms(self) -> float | None:
        """Mean milliseconds per tuple processed (Storm's execute latency), if
        measured."""
        return self.busy_ms / self.processed if self.processed and self.busy_ms else None

    def capacity(self, executors: int) -> float | None:
        """The share of the window the component's executors spent on its tuples
        (Storm's capacity, here their mean rather than the busiest's), if measured."""
        if not self.busy_ms or self.seconds <= 0 or self.seconds == float("inf") \
                or executors <= 0:
            return None
        return self.busy_ms / (self.seconds * 1000.0 * executors)

    def rate(self, spout: bool) -> float:
        """Tuples per second over the window: emitted for a spout (it processes
        nothing), processed for a bolt."""
        count = self.emitted if spout else self.processed
        return count / self.seconds if self.seconds > 0 else 0.0


@dataclass
class _Tier:
    span: float
    step: float
    samples: deque[Sample] = field(default_factory=deque)

    def add(self, sample: Sample) -> None:
        if self.samples and sample.at - self.samples[-1].at < self.step:
            return
        self.samples.append(sample)
        # Keep one sample at or before the span's start: the baseline of the longest
        # window this tier answers.
        while len(self.samples) > 1 and self.samples[1].at <= sample.at - self.span:
            self.samples.popleft()


class Series:
    """The sampled figures of one topology (not thread-safe: :class:`TimeSeries` locks)."""

    def __init__(self, tiers: tuple[tuple[float, float], ...] = TIERS):
        self.tiers = [_Tier(span, step) for span, step in tiers]
        self.latest: Sample | None = None

    def add(self, sample: Sample) -> None:
        """Record ``sample``; one older than the latest (the clock stepped back) only
        replaces the latest, the tiers keep their order."""
        latest = self.latest
        self.latest = sample
        if latest is not None and sample.at < latest.at:
            return
        for tier in self.tiers:
            tier.add(sample)

    def __len__(self) -> int:
        return sum(len(t.samples) for t in self.tiers)

    def window(self, seconds: float | None) -> dict[str, WindowStats]:
        """Each component's figures over the last ``seconds`` (None: the whole run),
        ending at the latest sample; empty before the first sample."""
        latest = self.latest
        if latest is None:
            return {}
        start = latest.run if seconds is None else max(latest.run, latest.at - seconds)
        run = [s for s in self._merged() if s.run == latest.run]
        base: Sample | None = None
        if start > latest.run:
            before = [s for s in run if s.at <= start]
            base = before[-1] if before else (run[0] if run else None)
        # Samples inside the window, for the latency's weighting.
        inside = [s for s in run if (base is None or s.at >= base.at) and s.at <= latest.at]
        if not inside or inside[-1] is not latest:
            inside.append(latest)
        since = base.at if base is not None else latest.run
        span = max(0.0, latest.at - since)
        result = {}
        zero = (0, 0, 0.0, 0.0)
        for cid, (emitted, processed, latency, busy) in latest.counts.items():
            e0, p0, _, b0 = base.counts.get(cid, zero) if base is not None else zero
            if e0 > emitted or p0 > processed:     # cannot happen within a run; be safe
                e0 = p0 = 0
                b0 = 0.0
            result[cid] = WindowStats(emitted=emitted - e0, processed=processed - p0,
                                      latency_ms=_weighted_latency(inside, cid, latency),
                                      seconds=span, busy_ms=max(0.0, busy - b0))
        return result

    def recent(self, seconds: float) -> list[Sample]:
        """The current run's samples of the last ``seconds``, oldest first, the
        latest included (the page's rate chart)."""
        latest = self.latest
        if latest is None:
            return []
        kept = [s for s in self._merged()
                if s.run == latest.run and s.at >= latest.at - seconds]
        if not kept or kept[-1] is not latest:
            kept.append(latest)
        return kept

    def _merged(self) -> list[Sample]:
        """Every kept sample, oldest first, each age from the finest tier that still
        covers it."""
        merged: list[Sample] = []
        newer_than = float("inf")
        for tier in self.tiers:           # finest first: each covers older samples
            older = [s for s in tier.samples if s.at < newer_than]
            merged[:0] = older
            if tier.samples:
                newer_than = min(newer_than, tier.samples[0].at)
        return merged


def _weighted_latency(samples: list[Sample], cid: str, latest: float) -> float:
    total = weight = 0.0
    for before, after in zip(samples, samples[1:]):
        done = after.counts.get(cid, (0, 0, 0.0, 0.0))[1] - \
            before.counts.get(cid, (0, 0, 0.0, 0.0))[1]
        if done > 0:
            total += done * after.counts[cid][2]
            weight += done
    return round(total / weight, 3) if weight else latest


class TimeSeries:
    """The series of every topology, by id; thread-safe (the sampler thread and the
    query threads share it)."""

    def __init__(self, tiers: tuple[tuple[float, float], ...] = TIERS):
        self._tiers = tiers
        self._series: dict[str, Series] = {}
        self._lock = threading.Lock()

    def record(self, topology_id: str, at: float, started_at: float,
               components: Mapping[str, SampledStats]) -> None:
        """Sample a topology's figures at ``at``; ``started_at`` is when its run
        started (``-inf`` when not known: every sample is then of one run)."""
        sample = Sample(at, started_at, {cid: (int(f.emitted), int(f.processed),
                                                float(f.latency_ms), float(f.busy_ms))
                                         for cid, f in components.items()})
        with self._lock:
            series = self._series.get(topology_id)
            if series is None:
                series = self._series[topology_id] = Series(self._tiers)
            series.add(sample)

    def window(self, topology_id: str, seconds: float | None) -> dict[str, WindowStats]:
        """Figures of ``topology_id``'s components over the last ``seconds`` (None:
        all time, i.e. the current run); empty if it was never sampled."""
        with self._lock:
            series = self._series.get(topology_id)
            return series.window(seconds) if series is not None else {}

    def samples(self, topology_id: str, seconds: float) -> list[Sample]:
        """``topology_id``'s samples of the last ``seconds`` of its current run,
        oldest first; empty if it was never sampled."""
        with self._lock:
            series = self._series.get(topology_id)
            return series.recent(seconds) if series is not None else []

    def keep_only(self, topology_ids: set[str]) -> None:
        """Forget the series of topologies no longer known (removed ones)."""
        with self._lock:
            for gone in set(self._series) - topology_ids:
                del self._series[gone]

    def __len__(self) -> int:
        with self._lock:
            return len(self._series)


class Sampler:
    """A thread that calls ``sample()`` every ``every`` seconds until stopped."""

    def __init__(self, sample: Callable[[], None], every: float = SAMPLE_SECS):
        self._sample = sample
        self._every = every
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="nimbus-figures",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            try:
                self._sample()
            except Exception:  # noqa: BLE001 - the sampler must outlive one bad pass
                log.exception("figure_sampling_failed")
