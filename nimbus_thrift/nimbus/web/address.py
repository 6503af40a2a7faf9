"""Where the HTTP side is reached: one home for its URL, used by the daemon (logged at
start, ``NimbusDaemon.ui_url``) and by ``nimbus-thrift ui``."""

from __future__ import annotations

import socket

from ..config import NimbusConfig
from ..settings import DEFAULT_UI_PORT

#: Addresses that mean "every interface": a URL names this machine instead.
ANY_ADDRESS = ("", "0.0.0.0", "::")


def ui_url(config: NimbusConfig, *, bound_host: str | None = None,
           bound_port: int | None = None) -> str | None:
    """The URL of the web UI (None when ``ui_port`` is 0): https with a TLS
    certificate configured, the bound address when known, else the configured one
    (``ui_port`` -1, any free port, is then unknown: the default port is shown)."""
    if config.ui_port == 0:
        return None
    scheme = "https" if config.tls_cert_file is not None else "http"
    host = bound_host if bound_host is not None else config.ui_bind_host
    if host in ANY_ADDRESS:
        host = socket.getfqdn()
    if ":" in host:
        host = f"[{host}]"
    port = bound_port if bound_port is not None else \
        (config.ui_port if config.ui_port > 0 else DEFAULT_UI_PORT)
    return f"{scheme}://{host}:{port}/"
