"""The ``nimbus-thrift`` command: parse, validate, call one library function.

User mistakes are one sentence and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import click
import structlog

from . import logs, render
from .client.defaults import DEFAULT_HOST, DEFAULT_TIMEOUT, DEFAULT_WAIT_TIMEOUT
from .idl import NIMBUS_PORT
from .rpc.options import (DEFAULT_FIRST_REQUEST_TIMEOUT, DEFAULT_FRAME_READ_TIMEOUT,
                          DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_FRAME_SIZE,
                          DEFAULT_MAX_READ_BUFFER_BYTES, DEFAULT_MAX_UNSENT_REPLY_BYTES,
                          DEFAULT_MIN_FRAME_RATE, DEFAULT_PARK_TIMEOUT,
                          DEFAULT_SEND_BUFFER_SIZE, DEFAULT_WORKER_QUEUE_SIZE,
                          DEFAULT_WORKER_THREADS, OptionError)
from .tuning import tune_allocator


def _logging_options(func: Any) -> Any:
    func = click.option("--log-level", type=click.Choice(logs.LEVELS), default="info",
                        show_default=True, envvar="NIMBUS_THRIFT_LOG_LEVEL")(func)
    func = click.option("--log-format", type=click.Choice(["auto", "console", "json"]),
                        default="auto", show_default=True, envvar="NIMBUS_THRIFT_LOG_FORMAT",
                        help="auto: console on a terminal, JSON otherwise.")(func)
    return func


@click.group()
@click.version_option(package_name="nimbus-thrift")
def main() -> None:
    """nimbus-thrift: a Storm-Nimbus-like service on a half-sync/half-async Thrift server.

    Start the daemon with `nimbus` (`warm-up` first makes topologies start sooner);
    `submit`, `list`, `info`, `kill`, `activate`, `deactivate`, `rebalance`, `conf`,
    `set-log-level` and `blob` talk to a running one: through the local daemon's Unix
    socket when it exists and no host or port is given, else over TCP (--host/--port),
    with TLS given --tls-cert, --tls-key or --tls-ca. Each setting also comes from
    NIMBUS_THRIFT_HOST, ..._PORT, ..._TLS_CERT, ..._TLS_KEY, ..._TLS_CA, ..._UNIX_SOCKET,
    or from ~/.config/nimbus-thrift/client.yaml (keys host, port, tls_cert, tls_key,
    tls_ca, unix_socket); flags win over the environment, which wins over the file.
    """


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(0, 65535), default=9090, show_default=True)
@click.option("--workers", type=click.IntRange(1), default=DEFAULT_WORKER_THREADS,
              show_default=True, help="Worker threads running handlers.")
@click.option("--queue-size", type=click.IntRange(1), default=DEFAULT_WORKER_QUEUE_SIZE,
              show_default=True, help="Requests waiting for a worker before 'overloaded'.")
@click.option("--max-frame-size", type=click.IntRange(1), default=DEFAULT_MAX_FRAME_SIZE,
              show_default=True)
@click.option("--max-read-buffer-bytes", type=click.IntRange(1),
              default=DEFAULT_MAX_READ_BUFFER_BYTES, show_default=True,
              help="Bytes all connections together may hold in read buffers.")
@click.option("--max-read-buffer-bytes-per-peer", type=click.IntRange(1), default=None,
              help="Bytes one client address's frames may declare at once [default: a "
                   "quarter of --max-read-buffer-bytes, at least one --max-frame-size].")
@click.option("--max-connections", type=click.IntRange(1), default=DEFAULT_MAX_CONNECTIONS,
              show_default=True)
@click.option("--idle-timeout", type=click.FloatRange(0, min_open=True),
              default=DEFAULT_IDLE_TIMEOUT, show_default=True)
@click.option("--frame-read-timeout", type=click.FloatRange(0, min_open=True),
              default=DEFAULT_FRAME_READ_TIMEOUT, show_default=True)
@click.option("--max-connections-per-peer", type=click.IntRange(1), default=None,
              help="Connections one client address may hold [default: a quarter of "
                   "--max-connections, at least 64].")
@click.option("--first-request-timeout", type=click.FloatRange(0, min_open=True),
              default=DEFAULT_FIRST_REQUEST_TIMEOUT, show_default=True,
              help="Seconds a new connection has to deliver its first request.")
@click.option("--park-timeout", type=click.FloatRange(0, min_open=True),
              default=DEFAULT_PARK_TIMEOUT, show_default=True,
              help="Seconds a frame may wait for read-buffer memory before it is refused.")
@click.option("--min-frame-rate", type=click.IntRange(1), default=DEFAULT_MIN_FRAME_RATE,
              show_default=True, help="Bytes/s a frame in progress must average.")
@click.option("--max-unsent-reply-bytes", type=click.IntRange(1),
              default=DEFAULT_MAX_UNSENT_REPLY_BYTES, show_default=True,
              help="Reply bytes held for clients that do not read them.")
@click.option("--send-buffer-size", type=click.IntRange(1), default=DEFAULT_SEND_BUFFER_SIZE,
              show_default=True, help="SO_SNDBUF of accepted sockets.")
@click.option("--processes", type=click.IntRange(1), default=1, show_default=True,
              help="Serve from this many forked processes on the one port (SIGHUP "
                   "restarts them one by one).")
@_logging_options
def demo(host: str, port: int, workers: int, queue_size: int, max_frame_size: int,
         max_read_buffer_bytes: int, max_read_buffer_bytes_per_peer: int | None,
         max_connections: int, idle_timeout: float,
         frame_read_timeout: float, max_connections_per_peer: int | None,
         first_request_timeout: float, park_timeout: float, min_frame_rate: int,
         max_unsent_reply_bytes: int, send_buffer_size: int | None, processes: int,
         log_level: str, log_format: Any) -> None:
    """Serve the demo service (idl/demo.thrift: Echo, and Calculator multiplexed)."""
    from . import make_server
    from .demo import CalculatorHandler, EchoHandler, demo_thrift, reload_on_hangup

    logs.configure(log_level, log_format)
    tune_allocator()
    module = demo_thrift()
    echo = EchoHandler()
    stop = _on_stop_signals()
    try:
        server = make_server(
            module.Echo, echo, host=host, port=port,
            services={"Echo": (module.Echo, echo),
                      "Calculator": (module.Calculator, CalculatorHandler())},
            worker_threads=workers, worker_queue_size=queue_size,
            max_frame_size=max_frame_size, max_read_buffer_bytes=max_read_buffer_bytes,
            max_read_buffer_bytes_per_peer=max_read_buffer_bytes_per_peer,
            max_connections=max_connections, idle_timeout=idle_timeout,
            frame_read_timeout=frame_read_timeout,
            max_connections_per_peer=max_connections_per_peer,
            first_request_timeout=first_request_timeout, park_timeout=park_timeout,
            min_frame_rate=min_frame_rate, max_unsent_reply_bytes=max_unsent_reply_bytes,
            send_buffer_size=send_buffer_size, processes=processes)
        bound_host, bound_port = server.start()
        reload_on_hangup(server)
    except OptionError as exc:
        raise click.UsageError(str(exc)) from None
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror or exc}") \
            from None
    click.echo(f"serving idl/demo.thrift on {bound_host}:{bound_port} "
               f"(Echo; Echo and Calculator multiplexed); Ctrl-C or SIGTERM stops", err=True)
    _wait(stop)
    server.stop(grace=10.0)


def _on_stop_signals() -> "threading.Event":
    """Make SIGINT and SIGTERM set the returned event. Installed *before* the server
    starts, so a signal right after the banner still stops it gracefully."""
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    return stop


def _wait(stop: "threading.Event") -> None:
    while not stop.wait(3600):
        pass


# --- the daemon ---------------------------------------------------------------------------

@main.command()
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path),
              envvar="NIMBUS_THRIFT_CONFIG",
              help="YAML file of settings (keys as the flags, e.g. data_dir: /srv/nimbus).")
@click.option("--host", help="Address to listen on.  [default: 127.0.0.1]")
@click.option("--port", type=int, help=f"Port to listen on.  [default: {NIMBUS_PORT}, as Storm]")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path),
              help="State, uploads, work directories.  [default: ~/.local/share/nimbus-thrift]")
@click.option("--launcher", help="What runs topologies: 'spark', 'none' or "
                                 "module:factory.  [default: spark]")
@click.option("--spark-master", help="Spark master for topologies.  [default: local[*]]")
@click.option("--workers", "worker_threads", type=int, help="RPC worker threads.  [default: 64]")
@click.option("--max-frame-size", type=int, help="Largest request frame in bytes.  "
                                                 "[default: 1048576, as Storm]")
@click.option("--max-upload-bytes", type=int, help="Largest code upload.  [default: 256 MiB]")
@click.option("--tls-cert", "tls_cert_file", type=click.Path(dir_okay=False),
              help="The daemon's certificate (PEM); with --tls-key the port speaks TLS only.")
@click.option("--tls-key", "tls_key_file", type=click.Path(dir_okay=False),
              help="The key of --tls-cert (PEM, unencrypted).")
@click.option("--tls-client-ca", "tls_client_ca_file", type=click.Path(dir_okay=False),
              help="CA certificate(s) (PEM): every client must present a certificate "
                   "signed by one; its common name is the caller's principal.")
@click.option("--insecure", is_flag=True, default=None,
              help="Allow listening on a non-loopback address without mutual TLS.")
@click.option("--ui-port", type=click.IntRange(-1, 65535),
              help="Port of the web UI, Storm's REST API and /metrics; 0 turns them off, "
                   "-1 takes any free port.  [default: 8080, as Storm's ui.port]")
@click.option("--unix-socket", help="Unix socket for local users (their OS user is their "
                                    "principal); '' for none.  [default: "
                                    "<data dir>/nimbus.sock]")
@click.option("--log-level", type=click.Choice(logs.LEVELS), help="[default: info]")
@click.option("--log-format", type=click.Choice(["auto", "console", "json"]),
              help="auto: console on a terminal, JSON otherwise.  [default: auto]")
def nimbus(config_file: Path | None, **flags: Any) -> None:
    """Run the nimbus daemon in the foreground until SIGTERM or Ctrl-C.

    Settings come from defaults, then the --config file, then NIMBUS_THRIFT_<SETTING>
    environment variables (NIMBUS_THRIFT_DATA_DIR, ...), then these flags.
    """
    from .nimbus import ConfigError, DaemonError, NimbusDaemon, load_config

    try:
        config = load_config(config_file, os.environ, flags)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    logs.configure(config.log_level, config.log_format)  # type: ignore[arg-type]
    tune_allocator("bounded")
    daemon = NimbusDaemon(config)
    stop = _on_stop_signals()
    try:
        host, port = daemon.start()
    except DaemonError as exc:
        raise click.ClickException(str(exc)) from None
    except OSError as exc:
        raise click.ClickException(
            f"cannot listen on {config.host}:{config.port}: {exc.strerror or exc}") from None
    click.echo(f"nimbus listening on {host}:{port} (data in {config.data_dir}, "
               f"launcher {config.launcher}); Ctrl-C or SIGTERM stops", err=True)
    if daemon.ui_url is not None:
        click.echo(f"web UI, REST API and /metrics at {daemon.ui_url}", err=True)
    _wait(stop)
    daemon.stop(grace=10.0)


@main.command()
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path),
              envvar="NIMBUS_THRIFT_CONFIG", help="The daemon's YAML settings file.")
def ui(config_file: Path | None) -> None:
    """Print the URL of the daemon's web UI (from its settings: ui_port, ui_host, TLS)."""
    from .nimbus import ConfigError, load_config
    from .nimbus.web.address import ui_url

    try:
        config = load_config(config_file, os.environ, {})
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    url = ui_url(config)
    if url is None:
        raise click.ClickException("the web UI is off (ui_port is 0)")
    if config.ui_port < 0:
        raise click.ClickException("ui_port is -1 (any free port): the URL is in the "
                                   "daemon's log (ui_listening url=...)")
    click.echo(url)


@main.command("warm-up")
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path),
              envvar="NIMBUS_THRIFT_CONFIG", help="The daemon's YAML settings file.")
@click.option("--spark-master", help="Spark master to run it on.  [default: local[*]]")
@click.option("--timeout", type=click.FloatRange(0, min_open=True), default=600.0,
              show_default=True, help="Seconds to give up after.")
def warm_up(config_file: Path | None, spark_master: str | None, timeout: float) -> None:
    """Make the Spark driver's class archive before the first submit.

    Topologies start 4-6 s sooner once it exists; without this the first launch on a
    machine makes it. Runs a small built-in topology once (about a minute on 2 cores)
    with the daemon's settings (spark_cache_dir, spark_master); does nothing if the
    archive is there. scripts/setup.sh runs it.
    """
    from .nimbus import ConfigError, load_config
    from .nimbus.launcher import LauncherError
    from .nimbus.spark.warmup import WarmUpError, warm_up as run

    try:
        config = load_config(config_file, os.environ, {"spark_master": spark_master})
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    logs.configure("warning", "console")
    try:
        result = run(config, timeout=timeout,
                     progress=lambda line: click.echo(f"warm-up: {line}", err=True))
    except (WarmUpError, LauncherError) as exc:
        raise click.ClickException(f"warm-up failed: {exc}") from None
    took = f" in {result.seconds:.0f} s" if result.seconds else ""
    where = f": {result.archive}" if result.archive else ""
    click.echo(f"warm-up: {result.detail}{took}{where}", err=True)


# --- commands that talk to a running nimbus -------------------------------------------

def _connection_options(func: Any) -> Any:
    """--host, --port, the TLS files and --unix-socket, merged with the environment and
    client.yaml into one ClientSettings that the command receives as ``target``."""

    @functools.wraps(func)
    def command(*args: Any, host: str | None, port: int | None, tls_cert: str | None,
                tls_key: str | None, tls_ca: str | None, unix_socket: str | None,
                **kwargs: Any) -> Any:
        from .client.settings import ClientSettingsError, load_client_settings

        try:
            target = load_client_settings({"host": host, "port": port, "tls_cert": tls_cert,
                                           "tls_key": tls_key, "tls_ca": tls_ca,
                                           "unix_socket": unix_socket})
        except ClientSettingsError as exc:
            raise click.UsageError(str(exc)) from None
        return func(*args, target=target, **kwargs)

    path = click.Path(dir_okay=False)
    command = click.option("--unix-socket", type=path,
                           help="Connect to the daemon's Unix socket at this path instead "
                                "of TCP (env NIMBUS_THRIFT_UNIX_SOCKET).")(command)
    command = click.option("--tls-ca", type=path,
                           help="CA certificate (PEM) the server's certificate must be "
                                "signed by; TLS (env NIMBUS_THRIFT_TLS_CA).")(command)
    command = click.option("--tls-key", type=path,
                           help="The key of --tls-cert (PEM) (env NIMBUS_THRIFT_TLS_KEY)."
                           )(command)
    command = click.option("--tls-cert", type=path,
                           help="This client's certificate (PEM), for a daemon that "
                                "requires one; TLS (env NIMBUS_THRIFT_TLS_CERT).")(command)
    command = click.option("--port", type=click.IntRange(1, 65535),
                           help=f"Port of the nimbus (env NIMBUS_THRIFT_PORT).  "
                                f"[default: {NIMBUS_PORT}]")(command)
    command = click.option("--host",
                           help="Where the nimbus runs (env NIMBUS_THRIFT_HOST).  [default: "
                                "the local daemon's socket if it exists and no --port is "
                                f"given, else {DEFAULT_HOST}]")(command)
    return command


def _client_options(func: Any) -> Any:
    func = click.option("--timeout", type=click.FloatRange(0, min_open=True),
                        default=DEFAULT_TIMEOUT, show_default=True,
                        help="Seconds to wait for each reply.")(func)
    return _connection_options(func)


def _json_option(func: Any) -> Any:
    return click.option("--json", "as_json", is_flag=True,
                        help="Print JSON for scripts instead of a table.")(func)


@contextmanager
def _nimbus(target: Any, timeout: float) -> Iterator[Any]:
    """A connected client of ``target`` (ClientSettings); every failure becomes one
    sentence and exit status 1."""
    from thriftpy2.thrift import TApplicationException

    from .client.client import NimbusClient
    from .client.errors import NimbusClientError

    if not structlog.is_configured():
        logs.configure("warning")  # the client's retries are debug lines: not for people
    try:
        client = NimbusClient(**target.client_args(), timeout=timeout)
    except ValueError as exc:      # a certificate file that cannot be used
        raise click.ClickException(str(exc)) from None
    try:
        with client:
            yield client
    except NimbusClientError as exc:
        raise click.ClickException(str(exc)) from None
    except TApplicationException as exc:
        raise click.ClickException(f"nimbus at {client.address} refused: {exc.message}") \
            from None
    except Exception as exc:
        # The IDL's exceptions (NotAliveException, ...) all carry one field: msg.
        msg = getattr(exc, "msg", None)
        if msg is None:
            raise
        raise click.ClickException(msg) from None


def _topology_id(client: Any, name: str) -> str:
    for summary in client.getClusterInfo().topologies:
        if summary.name == name:
            return str(summary.id)
    raise click.ClickException(f"no topology named {name!r} (see 'nimbus-thrift list')")


def _echo_json(value: Any) -> None:
    click.echo(json.dumps(render.jsonable(value), indent=2, sort_keys=True))


@main.command("list")
@_client_options
@_json_option
def list_(target: Any, timeout: float, as_json: bool) -> None:
    """List the topologies."""
    with _nimbus(target, timeout) as client:
        summary = client.getClusterInfo()
    if as_json:
        _echo_json(summary.topologies)
    else:
        click.echo(render.topologies_table(summary))


@main.command()
@click.argument("name")
@_client_options
@_json_option
def info(name: str, target: Any, timeout: float, as_json: bool) -> None:
    """Show one topology: status, components with their figures, errors."""
    with _nimbus(target, timeout) as client:
        topology_info = client.getTopologyInfo(_topology_id(client, name))
    if as_json:
        payload = render.jsonable(topology_info)
        payload["components"] = render.component_rows(topology_info)
        click.echo(json.dumps(payload, indent=2, sort_keys=True))
    else:
        click.echo(render.info_text(topology_info))


@main.command()
@click.argument("name")
@click.option("-w", "--wait", "wait_secs", type=click.IntRange(0),
              help="Seconds between deactivation and removal.  "
                   "[default: the topology's topology.message.timeout.secs]")
@_client_options
def kill(name: str, wait_secs: int | None, target: Any, timeout: float) -> None:
    """Kill a topology: deactivate it now, remove it after the wait."""
    with _nimbus(target, timeout) as client:
        client.killTopologyWithOpts(name, client.idl.KillOptions(wait_secs=wait_secs))
    click.echo(f"killed {name}" + ("" if wait_secs is None else f"; removed in {wait_secs} s"))


@main.command()
@click.argument("name")
@_client_options
def activate(name: str, target: Any, timeout: float) -> None:
    """Resume a deactivated topology's spouts."""
    with _nimbus(target, timeout) as client:
        client.activate(name)
    click.echo(f"activated {name}")


@main.command()
@click.argument("name")
@_client_options
def deactivate(name: str, target: Any, timeout: float) -> None:
    """Pause a topology's spouts (its state is kept)."""
    with _nimbus(target, timeout) as client:
        client.deactivate(name)
    click.echo(f"deactivated {name}")


class _ComponentCount(click.ParamType):
    name = "COMPONENT=N"

    def convert(self, value: Any, param: Any, ctx: Any) -> tuple[str, int]:
        component, sep, count = str(value).rpartition("=")
        if not sep or not component:
            self.fail(f"{value!r} is not COMPONENT=N", param, ctx)
        try:
            number = int(count)
        except ValueError:
            self.fail(f"{value!r}: {count!r} is not a whole number", param, ctx)
        if number < 1:
            self.fail(f"{value!r}: a component needs at least 1 executor", param, ctx)
        return component, number


@main.command()
@click.argument("name")
@click.option("-w", "--wait", "wait_secs", type=click.IntRange(0),
              help="Seconds to wait before applying.  [default: the topology's "
                   "topology.message.timeout.secs]")
@click.option("-n", "--num-workers", type=click.IntRange(1), help="New number of workers.")
@click.option("-e", "--executors", multiple=True, type=_ComponentCount(),
              help="New executor count of a component; repeatable.")
@_client_options
def rebalance(name: str, wait_secs: int | None, num_workers: int | None,
              executors: tuple[tuple[str, int], ...], target: Any,
              timeout: float) -> None:
    """Change a topology's workers or a component's executors."""
    with _nimbus(target, timeout) as client:
        client.rebalance(name, client.idl.RebalanceOptions(
            wait_secs=wait_secs, num_workers=num_workers,
            num_executors=dict(executors) or None))
    click.echo(f"rebalancing {name}")


class _ConfItem(click.ParamType):
    name = "KEY=VALUE"

    def convert(self, value: Any, param: Any, ctx: Any) -> tuple[str, Any]:
        if isinstance(value, tuple):
            return value
        from .topology.package import PackageError, parse_conf_option
        try:
            return parse_conf_option(str(value))
        except PackageError as exc:
            self.fail(str(exc), param, ctx)


class _UploadProgress:
    """``progress(sent, total)`` for upload_file: a bar on a terminal, else a line at
    each quarter (a log file or CI output gets four lines, not a redrawn bar)."""

    def __init__(self) -> None:
        self.stream = sys.stderr
        self.tty = self.stream.isatty()
        self.bar: Any = None
        self.shown = 0
        self.quarter = 0

    def __call__(self, sent: int, total: int) -> None:
        if self.tty:
            if self.bar is None:
                self.bar = click.progressbar(length=total, label="uploading",
                                             file=self.stream)
                self.bar.__enter__()
            self.bar.update(sent - self.shown)
            self.shown = sent
            return
        quarter = sent * 4 // total if total else 4
        if quarter > self.quarter:
            self.quarter = quarter
            click.echo(f"uploaded {25 * quarter}% ({sent:,} of {total:,} bytes)", err=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None


def _echo_status(status: str) -> None:
    click.echo(f"status: {status}", err=True)


@main.command()
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--name", help="Topology name.  [default: the class's `name` attribute, "
                             "else the file's name without .py]")
@click.option("--topology", "class_name", metavar="CLASS",
              help="The Topology class to submit, when the file defines several.")
@click.option("--conf", "conf_items", multiple=True, type=_ConfItem(),
              help="Topology configuration over the class's `config`; VALUE is JSON if "
                   "it parses (2, true, null, {...}), else a string. Repeatable.")
@click.option("--inactive", is_flag=True, help="Submit with its spouts paused.")
@click.option("--wait", is_flag=True,
              help="Follow its status until it runs; exit 1 if it fails.")
@click.option("--timeout", type=click.FloatRange(0, min_open=True),
              default=DEFAULT_WAIT_TIMEOUT, show_default=True,
              help="Seconds --wait waits for it to run.")
@click.option("--call-timeout", type=click.FloatRange(0, min_open=True),
              default=DEFAULT_TIMEOUT, show_default=True,
              help="Seconds to wait for each reply.")
@_connection_options
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object (id, name, sha256, bytes, status) and no "
                   "progress.")
def submit(path: Path, name: str | None, class_name: str | None,
           conf_items: tuple[tuple[str, Any], ...], inactive: bool, wait: bool,
           timeout: float, call_timeout: float, target: Any, as_json: bool) -> None:
    """Package a topology file's project, upload it and submit it.

    PATH is a .py file defining a Topology subclass. Its project root (the file's
    directory, or the one above its top package) is zipped: *.py files and package
    data, without virtualenvs, hidden, build and cache directories. Everything is
    checked before anything is uploaded. Prints the topology id.
    """
    import tempfile

    from .client.submit import submit_prepared, wait_for_topology
    from .topology.package import PackageError, prepare

    err = not as_json
    with tempfile.TemporaryDirectory(prefix="nimbus-submit-") as tmp:
        try:
            prepared = prepare(path, Path(tmp) / "code.zip", name=name,
                               conf=dict(conf_items), class_name=class_name)
        except PackageError as exc:
            raise click.ClickException(str(exc)) from None
        code = prepared.code
        for note in code.skipped:
            click.echo(f"warning: {note}", err=True)
        if err:
            files = f"{len(code.files)} file" + ("" if len(code.files) == 1 else "s")
            click.echo(f"packaged {files} from {code.root} "
                       f"({code.size:,} bytes, sha256 {code.sha256[:16]})", err=True)
        progress = _UploadProgress()
        with _nimbus(target, call_timeout) as client:
            try:
                topology_id = submit_prepared(client, prepared, inactive=inactive,
                                              progress=progress if err else None)
            finally:
                progress.close()
            if err:
                click.echo(topology_id)
            info = None
            if wait:
                info = wait_for_topology(client, topology_id, inactive=inactive,
                                         timeout=timeout,
                                         on_status=_echo_status if err else None)
    if as_json:
        _echo_json({"id": topology_id, "name": prepared.name, "sha256": code.sha256,
                    "bytes": code.size, "files": len(code.files),
                    "skipped": list(code.skipped),
                    "status": info.status if info else None,
                    "sched_status": info.sched_status if info else None})
    elif info is not None:
        click.echo(f"{prepared.name} is {info.sched_status}", err=True)


@main.command()
@_client_options
@_json_option
def conf(target: Any, timeout: float, as_json: bool) -> None:
    """Show the nimbus's configuration."""
    with _nimbus(target, timeout) as client:
        text = client.getNimbusConf()
    values = json.loads(text)
    if as_json:
        click.echo(json.dumps(values, indent=2, sort_keys=True))
    else:
        click.echo(render.table(["KEY", "VALUE"],
                                [(k, json.dumps(v) if not isinstance(v, str) else v)
                                 for k, v in sorted(values.items())]))


# --- the blob store -------------------------------------------------------------------

class _Acl(click.ParamType):
    """Storm's ACL string (``u:alice:rwa,u:bob:rw,o::r``) as AccessControl structs."""
    name = "ACL"

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        if isinstance(value, list):
            return value
        from .client.blobs import parse_acl
        try:
            return parse_acl(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


_file_in = click.Path(exists=True, dir_okay=False, path_type=Path)


@main.group()
def blob() -> None:
    """The blob store (as `storm blobstore`): named files with ACLs that topologies
    see in their work directory (topology.blobstore.map).

    ACLs are comma-separated entries TYPE:NAME:ACCESS, TYPE u (user) or o (everyone
    else), ACCESS of r (read), w (write), a (admin): -a u:alice:rwa,u:bob:rw,o::r. The
    creator always gets rwa.
    """


def _upload(target: Any, timeout: float, key: str, file: Path | None, create: bool,
            acl: list[Any] | None = None, replication: int | None = None) -> int:
    from .client.blobs import upload_blob

    with _nimbus(target, timeout) as client:
        if file is None:
            return upload_blob(client, key, sys.stdin.buffer,
                               create=create, acl=acl, replication=replication)
        try:
            source = open(file, "rb")
        except OSError as exc:
            raise click.ClickException(f"cannot read {file}: {exc.strerror}") from None
        with source:
            return upload_blob(client, key, source, create=create, acl=acl,
                               replication=replication)


@blob.command("create")
@click.argument("key")
@click.option("-f", "--file", type=_file_in, help="The content.  [default: stdin]")
@click.option("-a", "--acl", type=_Acl(), default="", help="Who may do what (see above).")
@click.option("-r", "--replication-factor", type=click.IntRange(1),
              help="Accepted for Storm's sake; one daemon keeps one copy.")
@_client_options
def blob_create(key: str, file: Path | None, acl: list[Any], replication_factor: int | None,
                target: Any, timeout: float) -> None:
    """Create the blob KEY."""
    size = _upload(target, timeout, key, file, True, acl, replication_factor)
    click.echo(f"created {key} ({size:,} bytes)", err=True)


@blob.command("update")
@click.argument("key")
@click.option("-f", "--file", type=_file_in, help="The new content.  [default: stdin]")
@_client_options
def blob_update(key: str, file: Path | None, target: Any, timeout: float) -> None:
    """Replace the content of KEY (running topologies that map it see the new file)."""
    size = _upload(target, timeout, key, file, False)
    click.echo(f"updated {key} ({size:,} bytes)", err=True)


@blob.command("cat")
@click.argument("key")
@click.option("-f", "--file", type=click.Path(dir_okay=False, path_type=Path),
              help="Write to this file (replaced whole, never partly).  [default: stdout]")
@_client_options
def blob_cat(key: str, file: Path | None, target: Any, timeout: float) -> None:
    """Print the content of KEY."""
    from .client.blobs import BlobTooLarge, download_blob, download_blob_to

    with _nimbus(target, timeout) as client:
        try:
            if file is None:
                out = sys.stdout.buffer
                download_blob(client, key, out)
                out.flush()
            else:
                download_blob_to(client, key, file)
        except BlobTooLarge as exc:
            raise click.ClickException(str(exc)) from None
        except OSError as exc:
            raise click.ClickException(f"cannot write {file or 'stdout'}: "
                                       f"{exc.strerror or exc}") from None


@blob.command("list")
@click.argument("keys", nargs=-1)
@_client_options
@_json_option
def blob_list(keys: tuple[str, ...], target: Any, timeout: float, as_json: bool) -> None:
    """List blobs (all, or the KEYS named) with their version and ACL."""
    from .client.blobs import blob_rows

    with _nimbus(target, timeout) as client:
        rows = blob_rows(client, list(keys) if keys else None)
    if as_json:
        _echo_json([{"key": k, "version": v, "acl": a} for k, v, a in rows])
    else:
        click.echo(render.blobs_table(rows))


@blob.command("delete")
@click.argument("keys", nargs=-1, required=True)
@_client_options
def blob_delete(keys: tuple[str, ...], target: Any, timeout: float) -> None:
    """Delete the blobs KEYS (refused while a topology maps one)."""
    with _nimbus(target, timeout) as client:
        for key in keys:
            client.call("deleteBlob", key)
            click.echo(f"deleted {key}", err=True)


@blob.command("set-acl")
@click.argument("key")
@click.option("-s", "--set", "acl", type=_Acl(),
              help="The new ACL (see above); without it the current one is printed.")
@_client_options
def blob_set_acl(key: str, acl: list[Any] | None, target: Any, timeout: float) -> None:
    """Replace the ACL of KEY (needs a for admin; you keep a)."""
    from .client.blobs import acl_text

    with _nimbus(target, timeout) as client:
        if acl is not None:
            client.call("setBlobMeta", key, client.idl.SettableBlobMeta(acl=acl))
        meta = client.call("getBlobMeta", key)
    click.echo(f"{key} {acl_text(meta.settable.acl)}")


# --- log levels ---------------------------------------------------------------------------

#: Storm's (log4j's) level names; ours map them onto Python's (WARN: WARNING, ...).
LOG_LEVEL_NAMES = ("ALL", "TRACE", "DEBUG", "INFO", "WARN", "WARNING", "ERROR", "FATAL",
                   "CRITICAL", "OFF")
#: The longest reset timeout the daemon accepts (nimbus/log_calls.py's MAX_RESET_SECS,
#: a year): checked here too, so a typo is refused before anything is sent.
MAX_LOG_TIMEOUT_SECS = 365 * 86400


class _LogSetting(click.ParamType):
    """``NAME=LEVEL[:TIMEOUT]`` (storm set_log_level -l) as (name, level, timeout)."""
    name = "NAME=LEVEL[:SECS]"

    def convert(self, value: Any, param: Any, ctx: Any) -> tuple[str, str, int]:
        if isinstance(value, tuple):
            return value
        logger, sep, rest = str(value).partition("=")
        if not sep or not logger or not rest:
            self.fail(f"{value!r} is not LOGGER=LEVEL[:SECONDS] (e.g. ROOT=DEBUG:30)",
                      param, ctx)
        level, _, timeout = rest.partition(":")
        if level.upper() not in LOG_LEVEL_NAMES:
            self.fail(f"{value!r}: {level!r} is not one of {', '.join(LOG_LEVEL_NAMES)}",
                      param, ctx)
        secs = 0
        if timeout:
            try:
                secs = int(timeout)
            except ValueError:
                self.fail(f"{value!r}: the timeout {timeout!r} is not a whole number of "
                          "seconds", param, ctx)
            if not 0 <= secs <= MAX_LOG_TIMEOUT_SECS:
                self.fail(f"{value!r}: the timeout must be 0 to {MAX_LOG_TIMEOUT_SECS} "
                          "seconds", param, ctx)
        return logger, level.upper(), secs


@main.command("set-log-level")
@click.argument("name")
@click.option("-l", "--log-setting", "settings", multiple=True, type=_LogSetting(),
              help="Set a logger's level, for SECS seconds if given (0 or none: until "
                   "changed). ROOT is the root logger. Repeatable.")
@click.option("-r", "--remove-log-setting", "removed", multiple=True, metavar="LOGGER",
              help="Undo an earlier -l of LOGGER: back to its original level. Repeatable.")
@_client_options
def set_log_level(name: str, settings: tuple[tuple[str, str, int], ...],
                  removed: tuple[str, ...], target: Any, timeout: float) -> None:
    """Change log levels inside the running topology NAME, without a restart (as
    `storm set_log_level`): -l ROOT=DEBUG:30 -l my.module=WARN -r other.module."""
    if not settings and not removed:
        raise click.UsageError("nothing to change: give -l LOGGER=LEVEL[:SECS] or "
                               "-r LOGGER")
    with _nimbus(target, timeout) as client:
        idl = client.idl
        levels = {logger: idl.LogLevel(action=idl.LogLevelAction.UPDATE,
                                       target_log_level=level,
                                       reset_log_level_timeout_secs=secs)
                  for logger, level, secs in settings}
        levels.update({logger: idl.LogLevel(action=idl.LogLevelAction.REMOVE)
                       for logger in removed})
        client.call("setLogConfig", _topology_id(client, name),
                    idl.LogConfig(named_logger_level=levels))
    for logger, level, secs in settings:
        click.echo(f"{name}: {logger} set to {level}"
                   + (f" for {secs} s" if secs else ""), err=True)
    for logger in removed:
        click.echo(f"{name}: {logger} back to its original level", err=True)


if __name__ == "__main__":  # pragma: no cover
    main()
