"""Storm UI's POST actions: ``/api/v1/topology/:id/activate``, ``/deactivate``,
``/rebalance/:wait-time`` and ``/kill/:wait-time``. Each is checked against cross-site
requests (:mod:`.csrf`) and then runs as its IDL method (activate, deactivate,
rebalance, killTopologyWithOpts) with the request's principal: the same authorization,
audit and state change as a Thrift client's call."""

from __future__ import annotations

import json
from typing import Any

from . import csrf
from .calls import call_as
from .messages import HttpError, Request, Response

#: The IDL's i32: a wait time beyond it cannot be sent on to the handler.
I32_MAX = 2**31 - 1


def wait_secs(text: str) -> int:
    """A ``:wait-time`` path segment as seconds.

    Raises:
        HttpError: 400, not a whole number from 0 to 2^31-1.
    """
    if not text.isdigit() or int(text) > I32_MAX:
        raise HttpError(400, f"wait-time {text[:40]!r} is not a whole number of seconds "
                             f"from 0 to {I32_MAX}")
    return int(text)


class Actions:
    def __init__(self, handler: Any, csrf_token: str):
        self.handler = handler
        self.idl = handler.idl
        self.csrf_token = csrf_token

    def _name_of(self, request: Request, topology_id: str) -> str:
        # The IDL's actions take a name; the REST API names topologies by id.
        summary = call_as(request, self.idl, "getTopologySummary",
                          self.handler.getTopologySummary, topology_id)
        return str(summary.name)

    def _run(self, request: Request, topology_id: str, operation: str, storm_name: str,
             *args: Any) -> Response:
        csrf.check(request, self.csrf_token)
        name = self._name_of(request, topology_id)
        call_as(request, self.idl, operation, getattr(self.handler, operation), name, *args)
        return Response.json({"topologyOperation": storm_name, "topologyId": topology_id,
                              "status": "success"})

    def activate(self, request: Request, params: dict[str, str]) -> Response:
        return self._run(request, params["id"], "activate", "activate")

    def deactivate(self, request: Request, params: dict[str, str]) -> Response:
        return self._run(request, params["id"], "deactivate", "deactivate")

    def kill(self, request: Request, params: dict[str, str]) -> Response:
        wait = wait_secs(params["wait"])
        return self._run(request, params["id"], "killTopologyWithOpts", "kill",
                         self.idl.KillOptions(wait_secs=wait))

    def rebalance(self, request: Request, params: dict[str, str]) -> Response:
        wait = wait_secs(params["wait"])
        workers, executors = rebalance_options(request.body)
        options = self.idl.RebalanceOptions(wait_secs=wait, num_workers=workers,
                                            num_executors=executors)
        return self._run(request, params["id"], "rebalance", "rebalance", options)


def rebalance_options(body: bytes) -> tuple[int | None, dict[str, int] | None]:
    """Storm's optional body ``{"rebalanceOptions": {"numWorkers": 2, "executors":
    {"spout": 4}}}`` as (num_workers, num_executors); counts may be strings of digits,
    as Storm's UI sends them.

    Raises:
        HttpError: 400, the body is not that shape.
    """
    if not body.strip():
        return None, None
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise HttpError(400, f"the request body is not JSON: {exc}") from None
    options = data.get("rebalanceOptions") if isinstance(data, dict) else None
    if options is None:
        return None, None
    if not isinstance(options, dict):
        raise HttpError(400, "rebalanceOptions must be an object")
    workers = options.get("numWorkers")
    executors = options.get("executors")
    if executors is not None and not isinstance(executors, dict):
        raise HttpError(400, "rebalanceOptions.executors must map component ids to counts")
    return (_count("rebalanceOptions.numWorkers", workers) if workers is not None else None,
            {str(c): _count(f"rebalanceOptions.executors.{c}", n)
             for c, n in executors.items()} if executors else None)


def _count(what: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)) \
            or not str(value).isdigit() or int(value) > I32_MAX:
        raise HttpError(400, f"{what} must be a whole number, not {value!r}"[:200])
    return int(value)
