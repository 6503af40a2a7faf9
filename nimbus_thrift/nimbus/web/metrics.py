"""``GET /metrics``: the daemon in Prometheus's text format, computed at scrape time
by this daemon's own collectors (never the process-wide registry: several daemons may
run in one process).

Who sees what: a scrape is authorized as ``getClusterInfo`` (USER: a refusal is a 403,
as the REST API's); the series per topology (its components' figures, errors, restarts,
batches) are only those of the topologies the caller may read (TOPOLOGY_READ), while
the daemon-wide ones (the server's, the HTTP side's, topologies counted by status) stay.

Every name starts with ``nimbus_thrift_``; counters end in ``_total``, units are in the
name (``_seconds``, ``_bytes``). docs/operations.md lists them all; :data:`NAMES` is that list
(tests check the two agree with what a scrape shows).
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import structlog
from prometheus_client import generate_latest
from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                    HistogramMetricFamily, Metric)
from prometheus_client.registry import Collector

from ...rpc.methodstats import BUCKETS, OUTCOMES
from ..state.lifecycle import Status
from .calls import call_as
from .messages import Request, Response

log = structlog.get_logger(__name__)

PREFIX = "nimbus_thrift_"
#: prometheus_client's content type for the text format (version 0.0.4).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: The launcher's run states (launcher.RunStatus.state), each always present.
RUN_STATES = ("unscheduled", "starting", "running", "paused", "stopping", "stopped",
              "finished", "failed", "unknown")

#: The Thrift server's counters (rpc/metrics.py MetricsSnapshot): field -> (name
#: without the prefix, kind, help).
SERVER_FIGURES: dict[str, tuple[str, str, str]] = {
    "connections_open": ("connections_open", "gauge", "Thrift connections open."),
    "connections_accepted": ("connections_accepted", "counter",
                             "Thrift connections accepted."),
    "connections_refused": ("connections_refused", "counter",
                            "Thrift connections refused (max_connections, per peer)."),
    "connections_refused_per_peer": ("connections_refused_per_peer", "counter",
                                     "Of those, refused over max_connections_per_peer."),
    "bytes_reserved": ("read_buffer_reserved_bytes", "gauge",
                       "Bytes of the read budget reserved by frames being read."),
    "bytes_reserved_peak": ("read_buffer_reserved_peak_bytes", "gauge",
                            "The most bytes of the read budget ever reserved at once."),
    "read_buffer_budget": ("read_buffer_budget_bytes", "gauge",
                           "The read budget (max_read_buffer_bytes)."),
    "frames_parked": ("frames_parked", "gauge", "Frames waiting for read-budget memory."),
    "frames_refused": ("frames_refused", "counter", "Frames refused (bad or too long)."),
    "requests_in_flight": ("requests_in_flight", "gauge",
                           "Requests handed to the workers, not yet answered."),
    "requests_completed": ("requests_completed", "counter", "Requests answered."),
    "requests_failed": ("requests_failed", "counter",
                        "Requests answered with a TApplicationException or a close."),
    "requests_overloaded": ("requests_overloaded", "counter",
                            "Requests refused because the worker queue was full."),
    "queue_depth": ("worker_queue_depth", "gauge", "Requests waiting for a worker."),
    "timeouts": ("timeouts", "counter", "Thrift connections closed by a deadline."),
    "unsent_reply_bytes": ("unsent_reply_bytes", "gauge",
                           "Reply bytes held for clients that have not taken them."),
    "read_budget_overcommits": ("read_budget_overcommits", "counter",
                                "Frames admitted over the read budget's capacity."),
    "tls_handshakes": ("tls_handshakes", "counter", "TLS handshakes completed."),
    "tls_handshakes_failed": ("tls_handshakes_failed", "counter",
                              "TLS handshakes refused, broken or timed out."),
}

#: Per topology and component (labels topology, component): the launcher's
#: ComponentStats field -> (name, kind, help, scale).
COMPONENT_FIGURES: dict[str, tuple[str, str, str, float]] = {
    "emitted": ("component_emitted", "counter",
                "Tuples the component emitted in the topology's current run.", 1.0),
    "processed": ("component_processed", "counter",
                  "Tuples the component processed in the current run.", 1.0),
    "rate": ("component_tuples_per_second", "gauge",
             "Tuples per second, recent (emitted by a spout, processed by a bolt).", 1.0),
    "latency_ms": ("component_batch_latency_seconds", "gauge",
                   "Mean micro-batch duration, recent.", 0.001),
    "busy_ms": ("component_busy_seconds", "counter",
                "Seconds the component's tasks spent on its tuples (0: not measured).",
                0.001),
}


def _counter_name(name: str) -> str:
    return name + "_total"


#: Every metric name a scrape may show (counters with their ``_total``).
NAMES: tuple[str, ...] = tuple(sorted(
    [PREFIX + (_counter_name(n) if k == "counter" else n)
     for n, k, _ in SERVER_FIGURES.values()]
    + [PREFIX + (_counter_name(n) if k == "counter" else n)
       for n, k, _, _ in COMPONENT_FIGURES.values()]
    + [PREFIX + n for n in (
        "requests_total", "request_duration_seconds", "topologies",
        "topologies_by_run_state", "uploads_in_progress", "downloads_in_progress",
        "inbox_bytes", "component_errors", "http_connections_open",
        "topology_restarts_total", "topology_batches_total",
        "topology_last_batch_seconds", "launcher_failures_total",
        "http_connections_accepted_total", "http_connections_refused_total",
        "http_requests_total", "http_timeouts_total", "http_bad_requests_total")]))


def _family(kind: str, name: str, help_text: str, labels: list[str] | None = None
            ) -> CounterMetricFamily | GaugeMetricFamily:
    if kind == "counter":
        return CounterMetricFamily(PREFIX + name, help_text, labels=labels)
    return GaugeMetricFamily(PREFIX + name, help_text, labels=labels)


class ServerCollector(Collector):
    """The Thrift server: its counters and, per IDL method, calls by outcome and a
    latency histogram."""

    def __init__(self, server: Callable[[], Any]):
        self._server = server

    def collect(self) -> Iterator[Metric]:
        server = self._server()
        if server is None:
            return
        snapshot = server.metrics()
        for field, (name, kind, help_text) in SERVER_FIGURES.items():
            family = _family(kind, name, help_text)
            family.add_metric([], getattr(snapshot, field))
            yield family
        calls = CounterMetricFamily(PREFIX + "requests", "Thrift calls by IDL method "
                                    "and outcome (ok, declared exception, failed).",
                                    labels=["method", "outcome"])
        latency = HistogramMetricFamily(PREFIX + "request_duration_seconds",
                                        "Seconds per Thrift call, by IDL method.",
                                        labels=["method"])
        for method, figures in sorted(server.method_metrics().items()):
            for outcome in OUTCOMES:
                calls.add_metric([method, outcome], figures.outcomes.get(outcome, 0))
            cumulative = 0
            buckets = []
            bounds = [*(repr(float(b)) for b in BUCKETS), "+Inf"]
            for bound, count in zip(bounds, figures.bucket_counts):
                cumulative += count
                buckets.append((bound, cumulative))
            latency.add_metric([method], buckets, figures.seconds_sum)
        yield calls
        yield latency


class DaemonCollector(Collector):
    """The daemon's state and, per topology and component, the launcher's figures (the
    ones ``nimbus-thrift info`` shows) of the topologies ``readable`` says yes to
    (every one by default)."""

    def __init__(self, handler: Any, readable: Callable[[str], bool] = lambda _: True):
        self._handler = handler
        self._readable = readable

    def collect(self) -> Iterator[Metric]:
        handler = self._handler
        topologies = GaugeMetricFamily(PREFIX + "topologies", "Topologies by status.",
                                       labels=["status"])
        by_run = GaugeMetricFamily(PREFIX + "topologies_by_run_state",
                                   "Topologies by what their launcher reports (failed: "
                                   "left failed after its restarts).", labels=["state"])
        listing = handler.store.listing()
        stored_errors = handler.store.error_counts()
        statuses = {s.value: 0 for s in Status}
        runs = dict.fromkeys(RUN_STATES, 0)
        families = {field: _family(kind, name, help_text, ["topology", "component"])
                    for field, (name, kind, help_text, _) in COMPONENT_FIGURES.items()}
        errors = GaugeMetricFamily(PREFIX + "component_errors",
                                   "Errors on record for the component (the daemon "
                                   "keeps the latest ones).",
                                   labels=["topology", "component"])
        restarts = CounterMetricFamily(
            PREFIX + "topology_restarts", "Times the launcher relaunched the topology "
            "after a failure.", labels=["topology"])
        batches = CounterMetricFamily(
            PREFIX + "topology_batches", "Micro-batches the topology's current run "
            "completed.", labels=["topology"])
        last_batch = GaugeMetricFamily(
            PREFIX + "topology_last_batch_seconds", "Seconds the last completed "
            "micro-batch took.", labels=["topology"])
        for row in listing:
            statuses[row.status] = statuses.get(row.status, 0) + 1
            run = handler.run_status(row.id)
            runs[run.state] = runs.get(run.state, 0) + 1
            if not self._readable(row.id):
                continue            # counted above; its own series are its readers'
            restarts.add_metric([row.id], run.restarts)
            if run.batches is not None:
                batches.add_metric([row.id], run.batches)
            if run.last_batch_secs is not None:
                last_batch.add_metric([row.id], run.last_batch_secs)
            for component, stats in sorted(run.components.items()):
                for field, (_, _, _, scale) in COMPONENT_FIGURES.items():
                    families[field].add_metric([row.id, component],
                                               float(getattr(stats, field)) * scale)
            counted = dict(stored_errors.get(row.id, {}))
            for component, _, _ in run.errors:
                counted[component] = counted.get(component, 0) + 1
            for component, count in sorted(counted.items()):
                errors.add_metric([row.id, component], count)
        for status, count in sorted(statuses.items()):
            topologies.add_metric([status], count)
        for state, count in sorted(runs.items()):
            by_run.add_metric([state], count)
        yield topologies
        yield by_run
        yield from families.values()
        yield errors
        yield restarts
        yield batches
        yield last_batch
        failures = CounterMetricFamily(PREFIX + "launcher_failures",
                                       "Launcher calls that raised, by call.",
                                       labels=["call"])
        for call, count in sorted(dict(handler.launcher_failures).items()):
            failures.add_metric([call], count)
        yield failures
        transfers = handler.transfers
        uploads = handler.store.open_upload_count()
        for name, help_text, value in (
                ("uploads_in_progress", "Code uploads begun and not finished.", uploads),
                ("downloads_in_progress", "Code downloads open.",
                 len(transfers.downloads.sessions)),
                ("inbox_bytes", "Bytes of uploads in the inbox (open and complete).",
                 transfers.inbox_bytes)):
            family = GaugeMetricFamily(PREFIX + name, help_text)
            family.add_metric([], value)
            yield family


class HttpCollector(Collector):
    """The HTTP side itself (httpserver.HttpCounters)."""

    def __init__(self, counters: Callable[[], Any]):
        self._counters = counters

    def collect(self) -> Iterator[Metric]:
        counters = self._counters()
        if counters is None:
            return
        for field, kind, help_text in (
                ("connections_open", "gauge", "HTTP connections open."),
                ("connections_accepted", "counter", "HTTP connections accepted."),
                ("connections_refused", "counter",
                 "HTTP connections closed at once: over the connection limit."),
                ("requests", "counter", "HTTP requests answered."),
                ("timeouts", "counter", "HTTP connections closed by a deadline."),
                ("bad_requests", "counter",
                 "HTTP requests refused as malformed or over a size limit.")):
            family = _family(kind, "http_" + field, help_text)
            family.add_metric([], getattr(counters, field))
            yield family


class _Scrape:
    """What one scrape shows: the collectors' families, in order (``generate_latest``
    asks only for ``collect()``)."""

    def __init__(self, *collectors: Collector):
        self._collectors = collectors

    def collect(self) -> Iterator[Metric]:
        for collector in self._collectors:
            yield from collector.collect()


class MetricsEndpoint:
    """``GET /metrics`` for ``handler``'s daemon, its Thrift ``server`` and its HTTP
    side's ``http_counters`` (callables: the current ones, or None)."""

    def __init__(self, handler: Any, server: Callable[[], Any],
                 http_counters: Callable[[], Any]):
        self._handler = handler
        self._server = ServerCollector(server)
        self._http = HttpCollector(http_counters)

    def scrape(self, request: Request, params: dict[str, str]) -> Response:
        """Raises HttpError 403 for a caller who may not call getClusterInfo."""
        handler = self._handler
        readable = call_as(request, handler.idl, "getClusterInfo", handler.metrics_scope)
        shown = _Scrape(self._server, DaemonCollector(handler, readable), self._http)
        return Response(200, generate_latest(shown),
                        [("Content-Type", CONTENT_TYPE), ("Cache-Control", "no-store")])
