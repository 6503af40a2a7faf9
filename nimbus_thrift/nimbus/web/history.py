"""``/api/nimbus-thrift/...``: what the web page needs beyond Storm's API, under a
prefix of our own so nothing pretends to be Storm's. Per topology: each component's
rate now and over the last minutes (from the daemon's time series, :mod:`..timeseries`),
the Spark UI's address when the launcher knows it, and the launcher's sentence on the
topology (``detail``). And its log (:mod:`.logs`)."""

from __future__ import annotations

from typing import Any, Iterable

from .calls import call_as
from .messages import HttpError, Request, Response

#: Seconds of history the page's charts show by default, and at most (tier 0 of the
#: time series keeps 10 minutes at 10 s spacing).
DEFAULT_HISTORY_SECS = 600
MAX_HISTORY_SECS = 86400


def rate_series(samples: Iterable[Any], spouts: set[str]) -> dict[str, list[list[float]]]:
    """Per component, ``[time, tuples per second]`` between consecutive samples of one
    run (emitted for a spout, processed for a bolt); ``samples`` are timeseries.Sample,
    oldest first."""
    series: dict[str, list[list[float]]] = {}
    previous = None
    for sample in samples:
        if previous is not None and previous.run == sample.run and sample.at > previous.at:
            span = sample.at - previous.at
            for component, counts in sample.counts.items():
                before = previous.counts.get(component)
                if before is None:
                    continue
                index = 0 if component in spouts else 1
                done = max(0, counts[index] - before[index])
                series.setdefault(component, []).append(
                    [round(sample.at, 3), round(done / span, 3)])
        previous = sample
    return series


class NimbusThriftApi:
    def __init__(self, handler: Any):
        self.handler = handler
        self.idl = handler.idl

    def history(self, request: Request, params: dict[str, str]) -> Response:
        text = request.query.get("seconds", str(DEFAULT_HISTORY_SECS))
        if not text.isdigit() or not 0 < int(text) <= MAX_HISTORY_SECS:
            raise HttpError(400, f"seconds {text[:40]!r} is not a whole number from 1 to "
                                 f"{MAX_HISTORY_SECS}")
        # Read as getTopologyInfo: the same authorization (the topology's readers).
        info = call_as(request, self.idl, "getTopologyInfo", self.handler.getTopologyInfo,
                       params["id"])
        rates: dict[str, float] = {}
        for executor in info.executors or []:
            if executor.stats is not None:
                rates[executor.component_id] = \
                    rates.get(executor.component_id, 0.0) + executor.stats.rate
        struct = call_as(request, self.idl, "getTopology", self.handler.getTopology,
                         params["id"])
        spouts = set(struct.spouts or {})
        samples = self._samples(info.id, float(text))
        run = self.handler.run_status(info.id)
        return Response.json({
            "id": info.id, "name": info.name, "sparkUi": run.ui_url or None,
            # The launcher's sentence: sched_status is Storm's word or two.
            "detail": run.detail,
            "seconds": int(text),
            "components": {component: {"type": "spout" if component in spouts else "bolt",
                                       "rate": rate}
                           for component, rate in sorted(rates.items())},
            "history": rate_series(samples, spouts)})

    def _samples(self, topology_id: str, seconds: float) -> list[Any]:
        return list(self.handler.figures.samples(topology_id, seconds))
