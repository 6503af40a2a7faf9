"""``nimbus-thrift logs NAME``: a topology's log, through the daemon's web side
(``GET /api/nimbus-thrift/topology/<id>/log``, the readers of the topology's info
only); ``--follow`` keeps reading it (:mod:`.log_reader`).

The name becomes an id over Thrift (the cluster summary), as every topology command
does; the web UI's address is, in this order: ``--ui`` (or NIMBUS_THRIFT_UI_URL); the
URL a daemon on this machine recorded in its data directory (``nimbus-thrift ui``'s
record: right after --ui-port and ui_port -1) when its port agrees with the daemon's
``ui_port``; else the host the client reached and the daemon's ``ui_port``
(getNimbusConf), https when the client uses TLS. TLS to the web side uses the client's
own files (--tls-ca, --tls-cert, --tls-key): the web side asks for the same
certificates as the Thrift port.
"""

from __future__ import annotations

import ipaddress
import json
import os
import sys
import threading
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import click

from .completion import topology_names
from .connection import connected_client, topology_id
from .log_reader import LogError, LogSource, TopologyGone, component_filter, follow, tail
from .options import client_options
from .stop_signals import stopping_on_signals

#: Lines shown without --lines: tail's.
DEFAULT_LINES = 10


@click.command("logs", short_help="Show a topology's log; --follow keeps reading it.")
@click.argument("name", shell_complete=topology_names)
@click.option("-f", "--follow", "follow_log", is_flag=True,
              help="Keep printing what is added to the log until Ctrl-C (a truncated or "
                   "replaced log is read again from its start).")
@click.option("-c", "--component", metavar="COMPONENT",
              help="Only the lines that name this component (its tuple samples, its "
                   "errors with their traceback, lines its code writes with its name; "
                   "Spark's own lines are left out).")
@click.option("-n", "--lines", type=click.IntRange(0), default=DEFAULT_LINES,
              show_default=True, help="How many of the last lines to print first.")
@click.option("--ui", "ui_url", metavar="URL", envvar="NIMBUS_THRIFT_UI_URL",
              help="The daemon's web UI (env NIMBUS_THRIFT_UI_URL), as 'nimbus-thrift ui' "
                   "prints it on the daemon's machine.  [default: found from the daemon]")
@client_options
def logs_(name: str, follow_log: bool, component: str | None, lines: int,
         ui_url: str | None, target: Any, timeout: float) -> None:
    """Print the last lines of topology NAME's log (its Spark driver's stderr, where
    its code's logging lands), like `tail`; with --follow, keep printing until Ctrl-C.

    Read through the daemon's web UI, with the same rights as the topology's info.
    """
    with connected_client(target, timeout) as client:
        tid = topology_id(client, name)
        if component is not None:
            _check_component(client, tid, name, component)
        base = web_address(client, target, ui_url)
    match = component_filter(component) if component is not None else None
    context = _tls_context(target) if base.startswith("https:") else None
    try:
        # Ctrl-C and SIGTERM end a follow quietly with status 0, from its first ask on.
        with LogSource(base, tid, context, timeout=timeout) as source, \
                (stopping_on_signals() if follow_log else nullcontext()) as stop:
            _show(source, name, lines, match, stop)
    except BrokenPipeError:
        # The reader went away (`logs NAME | head`): nothing more to say to it.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except TopologyGone:
        if follow_log:
            click.echo(f"nimbus-thrift: topology {name} is gone (killed)", err=True)
            return
        raise click.ClickException(f"no topology named {name!r} any more (see "
                                   "'nimbus-thrift list')") from None
    except LogError as exc:
        raise click.ClickException(str(exc)) from None


def _show(source: LogSource, name: str, lines: int, match: Any,
          stop: threading.Event | None) -> None:
    """The last lines, then (given ``stop``) what is added until it is set."""
    last = tail(source, lines, match)
    if last.size == 0 and stop is None:
        raise click.ClickException(
            f"topology {name} has written no log yet (it starts when its Spark driver "
            "does): try again in a moment, or add --follow to wait for it")
    for line in last.lines:
        click.echo(line, nl=False)
    if stop is None:
        if last.partial and (match is None or match(last.partial)):
            click.echo(last.partial)
        return
    if last.partial and match is None:
        click.echo(last.partial, nl=False)
    if last.size == 0:
        click.echo(f"nimbus-thrift: topology {name} has written no log yet; waiting "
                   "for it (Ctrl-C stops)", err=True)
    follow(source, last.end, lambda text: click.echo(text, nl=False), stop,
           lambda note: click.echo(f"nimbus-thrift: {note}", err=True), match,
           pending=last.partial)


def _check_component(client: Any, tid: str, name: str, component: str) -> None:
    topology = client.getUserTopology(tid)
    known = sorted(set(topology.spouts or {}) | set(topology.bolts or {}))
    if component not in known:
        raise click.UsageError(f"topology {name} has no component {component!r} "
                               f"(it has {', '.join(known) or 'none'})")


def _tls_context(target: Any) -> Any:
    from ..client.tls import client_context

    try:
        return client_context(target.tls_cert, target.tls_key, target.tls_ca).context
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None


def web_address(client: Any, target: Any, given: str | None) -> str:
    """The base URL of the web UI of the daemon ``client`` talks to (see the module's
    docstring for the order); a sentence saying what to pass when it cannot be told."""
    if given:
        return given if given.endswith("/") else given + "/"
    conf = json.loads(client.getNimbusConf())
    ui_port = conf.get("nimbus-thrift.ui_port")
    if ui_port == 0:
        raise click.ClickException("the daemon's web UI is off (ui_port 0), and logs are "
                                   "read through it: start the daemon with --ui-port")
    address = str(client.address)
    local = address.startswith("unix:") or _is_loopback(address.rpartition(":")[0])
    if local:
        recorded = _recorded_url(address, ui_port if isinstance(ui_port, int) else -1)
        if recorded is not None:
            return recorded
    if isinstance(ui_port, int) and ui_port > 0:
        if address.startswith("unix:"):
            host = conf.get("nimbus-thrift.ui_host") or conf.get("nimbus-thrift.host") or ""
            if host in ("", "0.0.0.0", "::"):
                host = "127.0.0.1"
        else:
            host = address.rpartition(":")[0]
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        scheme = "https" if target.uses_tls else "http"
        return f"{scheme}://{host}:{ui_port}/"
    raise click.ClickException(
        "cannot tell where the daemon's web UI is (it listens on any free port, ui_port "
        "-1, and no daemon on this machine recorded it): give --ui with the URL the "
        "daemon printed at start ('nimbus-thrift ui' on its machine)")


def _is_loopback(host: str) -> bool:
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _recorded_url(address: str, ui_port: int) -> str | None:
    """The URL a daemon on this machine recorded (``ui.url`` in its data directory:
    the Unix socket's folder, then the data directory the daemon's settings name),
    if its port is the daemon's ``ui_port`` (any, for -1)."""
    from ..nimbus import ConfigError, load_config
    from ..nimbus.web.address import read_bound_url

    folders: list[Path] = []
    if address.startswith("unix:"):
        folders.append(Path(address[len("unix:"):]).parent)
    try:
        folders.append(load_config(None, os.environ, {}).data_dir)
    except ConfigError:
        pass
    for folder in folders:
        url = read_bound_url(folder)
        if url is None:
            continue
        port = url.rstrip("/").rpartition(":")[2]
        if ui_port < 0 or port == str(ui_port):
            return url
    return None
