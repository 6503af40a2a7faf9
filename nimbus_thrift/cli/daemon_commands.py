"""The daemon's commands: ``nimbus`` (run it), ``ui`` (where its web UI is) and
``warm-up`` (prepare Spark before the first submit)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from .. import logs
from ..tuning import raise_open_files_limit, tune_allocator, tune_gc
from .options import SettingsCommand, daemon_setting_options, setting_option
from .stop_signals import on_stop_signals, wait


@click.command(cls=SettingsCommand, setting_flags=daemon_setting_options,
               short_help="Run the nimbus daemon in the foreground.")
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path),
              envvar="NIMBUS_THRIFT_CONFIG",
              help="YAML file of settings (keys as in docs/configuration.md, e.g. "
                   "data_dir: /srv/nimbus).")
def nimbus(config_file: Path | None, **flags: Any) -> None:
    """Run the nimbus daemon in the foreground until SIGTERM, SIGHUP or Ctrl-C.

    Each of the three stops it gracefully: calls in flight finish (10 s at most), the
    Unix socket is removed and the data directory unlocked. SIGHUP (a closed terminal)
    stops; it does not reload settings: restart the daemon for that.

    Settings come from defaults, then the --config file, then NIMBUS_THRIFT_<SETTING>
    environment variables (NIMBUS_THRIFT_DATA_DIR, ...), then these flags; every
    setting is in docs/configuration.md.
    """
    from ..nimbus import ConfigError, DaemonError, NimbusDaemon, load_config

    try:
        config = load_config(config_file, os.environ, flags)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    logs.configure(config.log_level, config.log_format)  # type: ignore[arg-type]
    tune_allocator("bounded")
    tune_gc()
    # Room for max_connections: the server clamps to the soft limit it finds
    # (rpc/options.py, within_open_files); the `listening` log line says what is in force.
    raise_open_files_limit()
    daemon = NimbusDaemon(config)
    stop = on_stop_signals(hangup=True)
    try:
        host, port = daemon.start()
    except DaemonError as exc:
        raise click.ClickException(str(exc)) from None
    except OSError as exc:
        raise click.ClickException(
            f"cannot listen on {config.host}:{config.port}: {exc.strerror or exc}") from None
    click.echo(f"nimbus listening on {host}:{port} (data in {config.data_dir}, "
               f"launcher {config.launcher}); Ctrl-C, SIGTERM or SIGHUP stops", err=True)
    if daemon.ui_url is not None:
        click.echo(f"web UI, REST API and /metrics at {daemon.ui_url}", err=True)
    wait(stop)
    daemon.stop(grace=10.0)


@click.command(short_help="Print the URL of the daemon's web UI.")
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path),
              envvar="NIMBUS_THRIFT_CONFIG", help="The daemon's YAML settings file.")
def ui(config_file: Path | None) -> None:
    """Print the URL of the daemon's web UI: the running daemon's (recorded in its
    data directory, so --ui-port and ui_port -1 are right), else what its settings say
    (ui_port, ui_host, TLS)."""
    from ..nimbus import ConfigError, load_config
    from ..nimbus.web.address import read_bound_url, ui_url

    try:
        config = load_config(config_file, os.environ, {})
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    bound = read_bound_url(config.data_dir)
    if bound is not None:
        click.echo(bound)
        return
    url = ui_url(config)
    if url is None:
        raise click.ClickException("the web UI is off (ui_port is 0)")
    if config.ui_port < 0:
        raise click.ClickException(f"no daemon is running on {config.data_dir} and "
                                   "ui_port is -1 (any free port): start it, or give the "
                                   "same --config or NIMBUS_THRIFT_DATA_DIR as the daemon")
    click.echo(url)


def _spark_master_flag() -> list[click.Parameter]:
    from ..nimbus.settings import SETTINGS

    return [setting_option(SETTINGS["spark_master"], "Spark master to run it on.")]


@click.command("warm-up", cls=SettingsCommand, setting_flags=_spark_master_flag,
               short_help="Prepare Spark so that topologies start sooner.")
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path),
              envvar="NIMBUS_THRIFT_CONFIG", help="The daemon's YAML settings file.")
@click.option("--timeout", type=click.FloatRange(0, min_open=True), default=600.0,
              show_default=True, help="Seconds to give up after.")
def warm_up(config_file: Path | None, spark_master: str | None, timeout: float) -> None:
    """Make the Spark driver's class archive before the first submit.

    Topologies start 4-6 s sooner once it exists; without this the first launch on a
    machine makes it. Runs a small built-in topology once (about a minute on 2 cores)
    with the daemon's settings (spark_cache_dir, spark_master); does nothing if the
    archive is there. scripts/setup.sh runs it.
    """
    from ..nimbus import ConfigError, load_config
    from ..nimbus.launcher import LauncherError
    from ..nimbus.spark.warmup import WarmUpError, warm_up as run

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
