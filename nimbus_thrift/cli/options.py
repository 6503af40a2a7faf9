"""Flags several commands share: logging, where the nimbus is, reply timeouts, --json
(and how --json output is printed); and the daemon's flags, made from its settings
registry (nimbus/settings.py)."""

from __future__ import annotations

import functools
import json
import re
import typing
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from .. import logs, render
from ..client.defaults import DEFAULT_HOST, DEFAULT_TIMEOUT
from ..idl import NIMBUS_PORT

if TYPE_CHECKING:
    from ..nimbus.settings import Setting


def logging_options(func: Any) -> Any:
    func = click.option("--log-level", type=click.Choice(logs.LEVELS), default="info",
                        show_default=True, envvar="NIMBUS_THRIFT_LOG_LEVEL")(func)
    formats = typing.get_args(logs.LogFormat)
    func = click.option("--log-format", type=click.Choice(formats), default="auto",
                        show_default=True, envvar="NIMBUS_THRIFT_LOG_FORMAT",
                        help="auto: console on a terminal, JSON otherwise.")(func)
    return func


def connection_options(func: Any) -> Any:
    """--host, --port, the TLS files and --unix-socket, merged with the environment and
    client.yaml into one ClientSettings that the command receives as ``target``."""

    @functools.wraps(func)
    def command(*args: Any, host: str | None, port: int | None, tls_cert: str | None,
                tls_key: str | None, tls_ca: str | None, unix_socket: str | None,
                **kwargs: Any) -> Any:
        from ..client.settings import ClientSettingsError, load_client_settings

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
                           help="Where the nimbus runs, or an HA cluster's nimbus seeds "
                                "separated by commas (a,b:6628,c; those without a port "
                                "take --port): reads go to the first that answers, state "
                                "changes to the leader (env NIMBUS_THRIFT_HOST; "
                                "NIMBUS_THRIFT_NIMBUS_SEEDS).  [default: the local "
                                "daemon's socket if it exists and no --port is given, "
                                f"else {DEFAULT_HOST}]")(command)
    return command


def client_options(func: Any) -> Any:
    func = click.option("--timeout", type=click.FloatRange(0, min_open=True),
                        default=DEFAULT_TIMEOUT, show_default=True,
                        help="Seconds to wait for each reply.")(func)
    return connection_options(func)


def json_option(func: Any) -> Any:
    return click.option("--json", "as_json", is_flag=True,
                        help="Print JSON for scripts instead of a table.")(func)


def echo_json(value: Any) -> None:
    click.echo(json.dumps(render.jsonable(value), indent=2, sort_keys=True))


class SettingsCommand(click.Command):
    """A command with flags made from the daemon's settings registry, added the first
    time click asks for its parameters (to parse or to print --help).

    Late because the registry's module is inside the daemon's package, whose import
    made ``import nimbus_thrift.cli`` take 0.4 s instead of 0.1-0.15 s here: the client
    commands, registered beside these, do not pay for it.
    """

    def __init__(self, *args: Any, setting_flags: Callable[[], list[click.Parameter]],
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._setting_flags: Callable[[], list[click.Parameter]] | None = setting_flags

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        if self._setting_flags is not None:
            made, self._setting_flags = self._setting_flags(), None
            self.params.extend(made)
        return super().get_params(ctx)

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; a refused setting given as a flag is named as typed.

        load_config checks every value (one home for the rules) and names the setting
        (``worker_threads must be at least 1``); when the user typed that setting's
        flag, the value it refused is the flag's (flags win), so the sentence says
        ``--workers must be at least 1``. Set by a file or the environment, it keeps
        the setting's name, which is what the user wrote there.
        """
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            named = _flag_named(exc.message, ctx)
            if named == exc.message:
                raise
            raise click.UsageError(named, exc.ctx or ctx) from None


#: load_config's sentence for a refused value: "invalid configuration: <setting> ...".
_REFUSED = re.compile(r"^(invalid configuration: )(\w+)\b")


def _flag_named(message: str, ctx: click.Context) -> str:
    match = _REFUSED.match(message)
    if match is None:
        return message
    name = match.group(2)
    for param in ctx.command.params:
        if param.name == name and isinstance(param, click.Option) and \
                ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE:
            return param.opts[0] + message[match.end():]
    return message


def setting_option(setting: Setting, doc: str | None = None) -> click.Option:
    """The flag of one setting: read by click as the setting's type, under the setting's
    name (load_config's ``flags`` key); its help is ``doc`` (the registry's one line by
    default) and the registry's default. A flag not given is None, so the file and the
    environment decide; bounds are load_config's to check (its error names the flag),
    unless the setting says click checks them."""
    help_text = f"{doc or setting.doc}  [default: {setting.shown_default}]"
    decls = [setting.flag or "--" + setting.name.replace("_", "-"), setting.name]
    if setting.kind is bool:
        return click.Option(decls, is_flag=True, default=None, help=help_text)
    kind: Any = None
    if setting.choices:
        kind = click.Choice(setting.choices)
    elif setting.kind is int:
        kind = click.IntRange(setting.minimum, setting.maximum) \
            if setting.flag_checks_bounds else int
    elif setting.kind is float:
        kind = float
    elif setting.kind is Path:            # data_dir: a directory
        kind = click.Path(file_okay=False, path_type=Path)
    elif setting.kind == Path | None:     # the TLS files
        kind = click.Path(dir_okay=False)
    return click.Option(decls, type=kind, help=help_text)


def daemon_setting_options() -> list[click.Parameter]:
    """A flag for each setting the registry gives one, in the registry's order."""
    from ..nimbus.settings import SETTINGS

    return [setting_option(s) for s in SETTINGS.values() if s.flag]
