"""The daemon's HTTP side: a web page, Storm UI's REST API (v1) and Prometheus's
``/metrics``, on ``ui_port``, served from its own thread (never the Thrift selector's).

    limits.py      the bounds (connections, header and body sizes, timeouts)
    messages.py    Request, Response, HttpError (Storm's error JSON)
    http11.py      HTTP/1.1 on one connection, without sockets (h11 + the limits)
    httpserver.py  the asyncio loop on its thread: accept, TLS, read, answer, write
    routes.py      method and path -> function; 404, 405 with Allow
    app.py         the table of every path served
    storm_api.py   Storm's GET paths, from the handler's IDL methods
    actions.py     Storm's POST actions, run as their IDL methods
    csrf.py        the anti-forgery token and same-origin checks for actions
    calls.py       calling the handler as the HTTP request's principal
    history.py     /api/nimbus-thrift/...: rate history, Spark UI link
    metrics.py     /metrics: collectors over the server, the daemon, the HTTP side
    static.py      / and /assets/<name> from assets/
"""

from __future__ import annotations

from .app import WebApp, make_web_server
from .httpserver import HttpServer

__all__ = ["HttpServer", "WebApp", "make_web_server"]
