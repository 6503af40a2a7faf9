"""Where the HTTP side is reached: one home for its URL, used by the daemon (logged at
start, ``NimbusDaemon.ui_url``, and written into its data directory while it serves)
and by ``nimbus-thrift ui`` (which reads that file first)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from ..config import NimbusConfig
from ..settings import DEFAULT_UI_PORT

#: Addresses that mean "every interface": a URL names this machine instead.
ANY_ADDRESS = ("", "0.0.0.0", "::")
#: In the data directory while a daemon serves its web UI: the URL it is bound to, so
#: ``nimbus-thrift ui`` names the port in use after --ui-port or ui_port -1 (any free
#: port), which the settings alone cannot say.
UI_URL_FILE = "ui.url"


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


def write_bound_url(data_dir: Path, url: str) -> None:
    """Record ``url`` as the running daemon's, with this process's id (replacing any
    earlier record whole).

    Raises:
        OSError: the file cannot be written.
    """
    path = data_dir / UI_URL_FILE
    partial = path.with_name(path.name + ".part")
    partial.write_text(f"{url}\n{os.getpid()}\n")
    os.replace(partial, path)


def forget_bound_url(data_dir: Path) -> None:
    """Remove the record at stop (a crashed daemon's stays: readers check its process)."""
    try:
        (data_dir / UI_URL_FILE).unlink(missing_ok=True)
    except OSError:
        pass


def read_bound_url(data_dir: Path) -> str | None:
    """The URL the daemon on ``data_dir`` recorded, or None when there is none or its
    process is gone (a crash leaves the record). Asks nothing of the web side: a probe
    connection would be one more for it to serve and close."""
    try:
        url, pid_text = (data_dir / UI_URL_FILE).read_text().split()
        pid = int(pid_text)
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not url.startswith(("http://", "https://")) or pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:     # alive, another user's (a daemon run as another user)
        pass
    return url
