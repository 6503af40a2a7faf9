"""Shared pieces for the HTTP side's tests: a handler with a fake launcher whose runs
have figures and errors, the web application over it, and requests to it without
sockets (the fakes tier) or over a real connection (the sockets tier)."""

from __future__ import annotations

import enum
import http.client
import json
import ssl
from pathlib import Path
from typing import Any

from nimbus_thrift.nimbus.security.authz import daemon_principal
from nimbus_thrift.nimbus.launcher import ComponentStats, RunStatus, WorkerNode
from nimbus_thrift.nimbus.web import WebApp
from nimbus_thrift.nimbus.web.messages import HttpError, Request, Response

from support.handler_env import HandlerEnv
from support.nimbus import FakeClock, FakeLauncher, make_zip, request_as, upload, wordcount

#: Who a browser on the daemon's machine is by default: the OS user running the tests,
#: which is also the daemon's (on loopback the kernel names the client's user).
LOCAL = daemon_principal()

#: A traceback as the runner reports an error in user code (W2's figures: the frames
#: in the user's own files).
ERROR_TEXT = ("ValueError: bad word\n"
              "  File \"wordcount/components.py\", line 7, in process\n"
              "    raise ValueError('bad word')")


class Token(enum.Enum):
    """What :meth:`WebEnv.post` sends as the ``x-csrf-token`` besides a given string
    (``""`` included: an empty header) or None (no header)."""

    #: The daemon's own antiForgeryToken, as its page sends it.
    REAL = "real"


class FiguresLauncher(FakeLauncher):
    """A fake launcher whose runs have a start time, a Spark UI (at ``ui_url``; ``""``
    for none), figures and errors."""

    def __init__(self, clock: FakeClock, ui_url: str = "http://127.0.0.1:4040") -> None:
        super().__init__()
        self.clock = clock
        self.ui_url = ui_url
        self.started: dict[str, float] = {}
        self.run_errors: dict[str, tuple[tuple[str, str, int], ...]] = {}

    def launch(self, spec: Any) -> None:
        super().launch(spec)
        self.started[spec.topology_id] = self.clock()

    def status(self, topology_id: str) -> RunStatus:
        base = super().status(topology_id)
        return RunStatus(state=base.state, detail=base.detail,
                         started_at=self.started.get(topology_id), host="127.0.0.1",
                         port=4040, ui_url=self.ui_url,
                         components=base.components,
                         errors=self.run_errors.get(topology_id, ()))

    def nodes(self) -> list[WorkerNode]:
        running = tuple(t for t, s in self.state.items() if s in ("running", "paused"))
        return [WorkerNode("local-box", "box", 0.0, 4, len(running), "4.3.0", running)]


class WebEnv(HandlerEnv):
    """A handler (figures launcher, fake clock) and the web application over it."""

    launcher: FiguresLauncher

    def new_launcher(self) -> FiguresLauncher:
        return FiguresLauncher(self.clock)

    def open(self) -> None:
        super().open()
        self.app = WebApp(self.handler)

    def submit(self, name: str = "wc", principal: str | None = LOCAL,
               conf: dict[str, Any] | None = None) -> str:
        with request_as(principal):
            location = upload(self.handler, make_zip())
            self.handler.submitTopology(name, location, json.dumps(conf or {}), wordcount())
        assert self.handler.background.wait_idle(10)
        return next(t.id for t in self.handler.getClusterInfo().topologies
                    if t.name == name)

    def report(self, topology_id: str, sentences: int = 100, split: int = 100,
               latency: float = 250.0) -> dict[str, ComponentStats]:
        """What the runner says now: cumulative counts since the run started."""
        stats = {
            "sentences": ComponentStats(emitted=sentences, processed=0, rate=10.0,
                                        latency_ms=latency),
            "split": ComponentStats(emitted=split * 6, processed=split, rate=10.0,
                                    latency_ms=latency, busy_ms=split * 5.0),
            "count": ComponentStats(emitted=split * 6, processed=split * 6, rate=60.0,
                                    latency_ms=latency, busy_ms=split * 3.0)}
        self.launcher.stats[topology_id] = stats
        return stats

    def request(self, method: str, target: str, *, principal: str | None = LOCAL,
                body: bytes = b"", headers: dict[str, str] | None = None) -> Response:
        request = Request(method, target, {"host": "127.0.0.1:8080", **(headers or {})},
                          body, "127.0.0.1:50000", principal, "http")
        try:
            return self.app(request)
        except HttpError as error:
            return error.response()

    def get(self, target: str, *, principal: str | None = LOCAL) -> tuple[int, Any]:
        response = self.request("GET", target, principal=principal)
        return response.status, json.loads(response.body)

    def post(self, target: str, *, principal: str | None = LOCAL, body: bytes = b"",
             token: str | Token | None = Token.REAL,
             headers: dict[str, str] | None = None) -> tuple[int, Any]:
        """POST ``target`` with ``token`` as the ``x-csrf-token`` header: the daemon's
        own by default, a given string as is (even ``""``), none with None."""
        sent = dict(headers or {})
        if token is Token.REAL:
            sent["x-csrf-token"] = self.app.csrf_token
        elif token is not None:
            sent["x-csrf-token"] = token
        response = self.request("POST", target, principal=principal, body=body,
                                headers=sent)
        return response.status, json.loads(response.body)


def http_get(address: tuple[str, int], path: str, *, context: ssl.SSLContext | None = None,
             headers: dict[str, str] | None = None, method: str = "GET",
             body: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
    """One request on a new connection: (status, headers in lower case, body)."""
    host, port = address
    conn = (http.client.HTTPSConnection(host, port, context=context, timeout=10)
            if context is not None else http.client.HTTPConnection(host, port, timeout=10))
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return (response.status, {k.lower(): v for k, v in response.getheaders()},
                response.read())
    finally:
        conn.close()
