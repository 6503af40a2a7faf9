"""The HTTP side's application: every path it serves, in one table, and the objects
that answer them. Built by :func:`make_web_server` for a running daemon."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterable
from typing import Any, Callable

from ...rpc.tls import PrincipalFromCert
from . import csrf
from .actions import Actions
from .history import NimbusThriftApi
from .httpserver import HttpServer
from .limits import HttpLimits
from .logs import TopologyLogs
from .messages import Request, Response
from .metrics import MetricsEndpoint
from .routes import Route, Router
from .static import StaticFiles
from .storm_api import StormApi


class WebApp:
    """Routes requests to the Storm API, the actions, /metrics and the page's files."""

    def __init__(self, handler: Any, *, server: Callable[[], Any] = lambda: None,
                 http_counters: Callable[[], Any] = lambda: None,
                 static: StaticFiles | None = None, csrf_token: str | None = None,
                 host_names: Iterable[str] = ()):
        self.csrf_token = csrf_token or csrf.new_token()
        config = handler.config
        self.host_names = csrf.host_names(config.host, config.ui_host, socket.gethostname(),
                                          socket.getfqdn(), *host_names)
        storm = StormApi(handler, self.csrf_token)
        actions = Actions(handler, self.csrf_token)
        ours = NimbusThriftApi(handler)
        logs = TopologyLogs(handler)
        files = static or StaticFiles()
        self.metrics = MetricsEndpoint(handler, server, http_counters)
        topology = "/api/v1/topology/:id"
        self.router = Router([
            Route("GET", "/", files.index),
            Route("GET", "/assets/:name", files.asset),
            Route("GET", "/metrics", self.metrics.scrape),
            Route("GET", "/api/v1/cluster/configuration", storm.cluster_configuration),
            Route("GET", "/api/v1/cluster/summary", storm.cluster_summary),
            Route("GET", "/api/v1/nimbus/summary", storm.nimbus_summary),
            Route("GET", "/api/v1/supervisor/summary", storm.supervisor_summary),
            Route("GET", "/api/v1/topology/summary", storm.topology_summary),
            Route("GET", topology, storm.topology),
            Route("GET", topology + "/component/:component", storm.component),
            Route("GET", "/api/v1/topology-workers/:id", storm.topology_workers),
            Route("POST", topology + "/activate", actions.activate),
            Route("POST", topology + "/deactivate", actions.deactivate),
            Route("POST", topology + "/rebalance/:wait", actions.rebalance),
            Route("POST", topology + "/kill/:wait", actions.kill),
            Route("GET", "/api/nimbus-thrift/topology/:id/history", ours.history),
            Route("GET", "/api/nimbus-thrift/topology/:id/log", logs.log),
        ])

    def __call__(self, request: Request) -> Response:
        csrf.check_host(request, self.host_names)
        route, params = self.router.resolve(request)
        return route.handler(request, params)


def make_web_server(handler: Any, server: Callable[[], Any], *, host: str, port: int,
                    ssl_context: ssl.SSLContext | None,
                    principal_from_cert: PrincipalFromCert | None = None,
                    identify_local_peers: bool = False,
                    limits: HttpLimits | None = None) -> HttpServer:
    """The daemon's HTTP side (not started): its page, Storm's REST API and /metrics
    for ``handler`` and the Thrift ``server`` (a callable: the daemon's current one);
    principals as the Thrift side's (``principal_from_cert``, ``identify_local_peers``:
    see httpserver.py)."""
    http: HttpServer | None = None
    app = WebApp(handler, server=server, http_counters=lambda: http.counters if http else None)
    http = HttpServer(app, host=host, port=port, ssl_context=ssl_context,
                      principal_from_cert=principal_from_cert,
                      identify_local_peers=identify_local_peers, limits=limits)
    return http
