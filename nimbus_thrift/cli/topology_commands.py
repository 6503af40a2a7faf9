"""Commands about the topologies of a running nimbus (list, info, kill, activate,
deactivate, rebalance, set-log-level) and its configuration (conf)."""

from __future__ import annotations

import json
from typing import Any

import click

from .. import render
from .completion import topology_names
from .connection import connected_client, topology_id
from .options import client_options, echo_json, json_option
from .param_types import ComponentCount, LogSetting


@click.command("list", short_help="List the topologies.")
@client_options
@json_option
def list_(target: Any, timeout: float, as_json: bool) -> None:
    """List the topologies."""
    with connected_client(target, timeout) as client:
        summary = client.getClusterInfo()
    if as_json:
        echo_json(summary.topologies)
    else:
        click.echo(render.topologies_table(summary))


@click.command(short_help="Show a topology: status, components, errors.")
@click.argument("name", shell_complete=topology_names)
@client_options
@json_option
def info(name: str, target: Any, timeout: float, as_json: bool) -> None:
    """Show one topology: status, components with their figures, errors."""
    with connected_client(target, timeout) as client:
        topology_info = client.getTopologyInfo(topology_id(client, name))
    if as_json:
        payload = render.jsonable(topology_info)
        payload["components"] = render.component_rows(topology_info)
        click.echo(json.dumps(payload, indent=2, sort_keys=True))
    else:
        click.echo(render.info_text(topology_info))


@click.command(short_help="Kill a topology (removed after --wait seconds).")
@click.argument("name", shell_complete=topology_names)
@click.option("-w", "--wait", "wait_secs", type=click.IntRange(0),
              help="Seconds between deactivation and removal.  "
                   "[default: the topology's topology.message.timeout.secs]")
@client_options
def kill(name: str, wait_secs: int | None, target: Any, timeout: float) -> None:
    """Kill a topology: deactivate it now, remove it after the wait."""
    with connected_client(target, timeout) as client:
        client.killTopologyWithOpts(name, client.idl.KillOptions(wait_secs=wait_secs))
    click.echo(f"killed {name}" + ("" if wait_secs is None else f"; removed in {wait_secs} s"))


@click.command(short_help="Resume a deactivated topology's spouts.")
@click.argument("name", shell_complete=topology_names)
@client_options
def activate(name: str, target: Any, timeout: float) -> None:
    """Resume a deactivated topology's spouts."""
    with connected_client(target, timeout) as client:
        client.activate(name)
    click.echo(f"activated {name}")


@click.command(short_help="Pause a topology's spouts (state kept).")
@click.argument("name", shell_complete=topology_names)
@client_options
def deactivate(name: str, target: Any, timeout: float) -> None:
    """Pause a topology's spouts (its state is kept)."""
    with connected_client(target, timeout) as client:
        client.deactivate(name)
    click.echo(f"deactivated {name}")


@click.command(short_help="Change a topology's workers or executors.")
@click.argument("name", shell_complete=topology_names)
@click.option("-w", "--wait", "wait_secs", type=click.IntRange(0),
              help="Seconds to wait before applying.  [default: the topology's "
                   "topology.message.timeout.secs]")
@click.option("-n", "--num-workers", type=click.IntRange(1), help="New number of workers.")
@click.option("-e", "--executors", multiple=True, type=ComponentCount(),
              help="New executor count of a component; repeatable.")
@client_options
def rebalance(name: str, wait_secs: int | None, num_workers: int | None,
              executors: tuple[tuple[str, int], ...], target: Any,
              timeout: float) -> None:
    """Change a topology's workers or a component's executors."""
    with connected_client(target, timeout) as client:
        client.rebalance(name, client.idl.RebalanceOptions(
            wait_secs=wait_secs, num_workers=num_workers,
            num_executors=dict(executors) or None))
    click.echo(f"rebalancing {name}")


@click.command(short_help="Show the nimbus's configuration.")
@client_options
@json_option
def conf(target: Any, timeout: float, as_json: bool) -> None:
    """Show the nimbus's configuration."""
    with connected_client(target, timeout) as client:
        text = client.getNimbusConf()
    values = json.loads(text)
    if as_json:
        click.echo(json.dumps(values, indent=2, sort_keys=True))
    else:
        click.echo(render.table(["KEY", "VALUE"],
                                [(k, json.dumps(v) if not isinstance(v, str) else v)
                                 for k, v in sorted(values.items())]))


@click.command("set-log-level", short_help="Change log levels in a running topology.")
@click.argument("name", shell_complete=topology_names)
@click.option("-l", "--log-setting", "settings", multiple=True, type=LogSetting(),
              help="Set a logger's level, for SECS seconds if given (0 or none: until "
                   "changed). ROOT is the root logger. Repeatable.")
@click.option("-r", "--remove-log-setting", "removed", multiple=True, metavar="LOGGER",
              help="Undo an earlier -l of LOGGER: back to its original level. Repeatable.")
@client_options
def set_log_level(name: str, settings: tuple[tuple[str, str, int], ...],
                  removed: tuple[str, ...], target: Any, timeout: float) -> None:
    """Change log levels inside the running topology NAME, without a restart (as
    `storm set_log_level`): -l ROOT=DEBUG:30 -l my.module=WARN -r other.module."""
    if not settings and not removed:
        raise click.UsageError("nothing to change: give -l LOGGER=LEVEL[:SECS] or "
                               "-r LOGGER")
    with connected_client(target, timeout) as client:
        idl = client.idl
        levels = {logger: idl.LogLevel(action=idl.LogLevelAction.UPDATE,
                                       target_log_level=level,
                                       reset_log_level_timeout_secs=secs)
                  for logger, level, secs in settings}
        levels.update({logger: idl.LogLevel(action=idl.LogLevelAction.REMOVE)
                       for logger in removed})
        client.call("setLogConfig", topology_id(client, name),
                    idl.LogConfig(named_logger_level=levels))
    for logger, level, secs in settings:
        click.echo(f"{name}: {logger} set to {level}"
                   + (f" for {secs} s" if secs else ""), err=True)
    for logger in removed:
        click.echo(f"{name}: {logger} back to its original level", err=True)
