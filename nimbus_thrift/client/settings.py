"""Where the command-line client connects, and with which certificates: built once
from the client config file, the environment and the flags (each overriding the one
before), validated, frozen.

The file is ``$XDG_CONFIG_HOME/nimbus-thrift/client.yaml`` (``~/.config/...``)::

    host: nimbus.example.org
    port: 6627
    tls_cert: alice.pem          # relative paths are relative to the file
    tls_key: alice.key
    tls_ca: ca.pem

or, for an HA cluster, instead of ``host`` its nimbus seeds (Storm's ``nimbus.seeds``;
those without a port take ``port``)::

    nimbus_seeds: [nimbus1.example.org, nimbus2.example.org:6628, "[2001:db8::3]"]

Environment: ``NIMBUS_THRIFT_HOST``, ``NIMBUS_THRIFT_PORT``, ``NIMBUS_THRIFT_TLS_CERT``,
``NIMBUS_THRIFT_TLS_KEY``, ``NIMBUS_THRIFT_TLS_CA``, ``NIMBUS_THRIFT_UNIX_SOCKET``,
``NIMBUS_THRIFT_NIMBUS_SEEDS`` (comma-separated; an empty variable counts as not set).
A ``host`` holding commas (``--host a,b:6628,c``) is a list of seeds. ``host`` and
``nimbus_seeds`` say the same thing: the one from the later source (flags over the
environment over the file) is used.

Which transport (:meth:`ClientSettings.client_args`)::

    unix_socket given                       -> that socket
    neither host nor port given anywhere,   -> the local daemon's socket
      and default_unix_socket() is a socket     (idl.default_unix_socket())
    nimbus_seeds given                      -> TCP to those seeds (NimbusClient's hosts)
    otherwise                               -> TCP to host (127.0.0.1) and port (6627),
                                               TLS when any tls_* setting is given

Plain Python and PyYAML (read only when the file exists): the CLI builds this for
every command.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Mapping

from ..idl import ENV_PREFIX, NIMBUS_PORT, default_unix_socket
from .defaults import DEFAULT_HOST
from .seeds import parse_seed

CONFIG_NAME = "client.yaml"


class ClientSettingsError(ValueError):
    """A setting that cannot be used, in one sentence naming where it came from."""


@dataclass(frozen=True)
class ClientSettings:
    """The client's connection settings; None means "not given" (see
    :meth:`client_args` for what is used then)."""

    host: str | None = None
    port: int | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_ca: Path | None = None
    unix_socket: Path | None = None
    nimbus_seeds: tuple[str, ...] | None = None

    @property
    def uses_tls(self) -> bool:
        return any(v is not None for v in (self.tls_cert, self.tls_key, self.tls_ca))

    def client_args(self, local_socket: Path | None = None) -> dict[str, Any]:
        """The keyword arguments of ``NimbusClient`` these settings mean.

        Args:
            local_socket: the local daemon's socket, used when neither host nor port
                is given and it is a socket; default ``default_unix_socket()``.
        """
        if self.unix_socket is not None:
            return {"unix_socket": str(self.unix_socket)}
        if self.host is None and self.port is None and self.nimbus_seeds is None:
            local = default_unix_socket() if local_socket is None else local_socket
            if _is_socket(local):
                return {"unix_socket": str(local)}
        args: dict[str, Any] = {"host": self.host or DEFAULT_HOST,
                                "port": self.port or NIMBUS_PORT}
        if self.nimbus_seeds is not None:
            del args["host"]
            args["hosts"] = list(self.nimbus_seeds)
        for name, value in (("cert_file", self.tls_cert), ("key_file", self.tls_key),
                            ("ca_file", self.tls_ca)):
            if value is not None:
                args[name] = str(value)
        return args


_FIELDS = {f.name for f in fields(ClientSettings)}
#: Two names of where the nimbus is: a source's one replaces an earlier source's other.
_WHERE = ("host", "nimbus_seeds")
_PATHS = {"tls_cert", "tls_key", "tls_ca", "unix_socket"}
#: What each certificate file setting is, for the messages.
_FILES = {"tls_cert": "this client's certificate", "tls_key": "this client's key",
          "tls_ca": "the CA certificate that signed the server's"}


def config_path(env: Mapping[str, str] | None = None) -> Path:
    """Where the client config file is: ``$XDG_CONFIG_HOME/nimbus-thrift/client.yaml``,
    ``~/.config/nimbus-thrift/client.yaml`` without it."""
    env = os.environ if env is None else env
    base = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "nimbus-thrift" / CONFIG_NAME


def load_client_settings(flags: Mapping[str, Any] | None = None,
                         env: Mapping[str, str] | None = None,
                         file: Path | None = None) -> ClientSettings:
    """Build the settings from ``file`` (default :func:`config_path`; a missing file
    is no settings), then ``env`` (default ``os.environ``), then ``flags`` (keys as the
    fields; None means not given).

    Raises:
        ClientSettingsError: an unreadable file, an unknown key, a bad value, a
            certificate file that does not exist, a key without its certificate.
    """
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    origin: dict[str, str] = {}
    path = config_path(env) if file is None else file

    def given(source: dict[str, tuple[Any, str]]) -> None:
        where = [name for name in _WHERE if name in source]
        if len(where) > 1:
            raise ClientSettingsError(f"{source['host'][1]} and {source['nimbus_seeds'][1]} "
                                      f"both say where the nimbus is: give one.")
        if where:
            for name in _WHERE:
                values.pop(name, None)
        for name, (value, source_name) in source.items():
            values[name], origin[name] = value, source_name

    if path.exists():
        given({name: (value, f"{name} in {path}")
               for name, value in _from_file(path).items()})
    from_env: dict[str, tuple[Any, str]] = {}
    for name in sorted(_FIELDS):
        key = ENV_PREFIX + name.upper()
        if env.get(key):
            source = f"environment variable {key}"
            from_env[_where(name, env[key])] = (_coerce(name, env[key], source, None), source)
    given(from_env)
    from_flags: dict[str, tuple[Any, str]] = {}
    for name, value in (flags or {}).items():
        if name not in _FIELDS:
            raise ClientSettingsError(f"unknown client setting {name!r}.")
        if value is not None:
            source = f"--{name.replace('_', '-')}"
            from_flags[_where(name, value)] = (_coerce(name, value, source, None), source)
    given(from_flags)
    for name in ("tls_cert", "tls_key", "tls_ca"):
        if name in values and not values[name].is_file():
            raise ClientSettingsError(f"{origin[name]}: {_FILES[name]}, {values[name]}, "
                                      f"is not a file.")
    if "tls_key" in values and "tls_cert" not in values:
        raise ClientSettingsError(f"{origin['tls_key']} is set but no tls_cert: the key "
                                  f"belongs to a certificate, give both.")
    return ClientSettings(**values)


def _from_file(path: Path) -> dict[str, Any]:
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ClientSettingsError(f"cannot read the client config file {path}: "
                                  f"{exc.strerror or exc}.") from None
    except UnicodeDecodeError as exc:
        raise ClientSettingsError(f"cannot read the client config file {path}: it is not "
                                  f"UTF-8 text ({exc.reason} at byte {exc.start}).") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or "a syntax error"
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ClientSettingsError(f"the client config file {path} is not valid YAML: "
                                  f"{problem}{where}.") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ClientSettingsError(f"the client config file {path} must be a mapping of "
                                  f"settings, not a {type(data).__name__}.")
    values = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name not in _FIELDS:
            known = ", ".join(sorted(_FIELDS - {"nimbus_seeds"}))
            raise ClientSettingsError(f"the client config file {path} has an unknown "
                                      f"setting {key!r}; known: {known}. Several nimbus "
                                      f"daemons: nimbus_seeds (a list of host[:port]) "
                                      f"instead of host.")
        values[_where(name, value)] = _coerce(name, value, f"{name} in {path}", path.parent)
    return values


def _where(name: str, value: Any) -> str:
    """The setting ``value`` is for: a ``host`` with commas is a list of seeds."""
    if name == "host" and isinstance(value, str) and "," in value:
        return "nimbus_seeds"
    return name


def _coerce(name: str, value: Any, source: str, base: Path | None) -> Any:
    """``value`` as the type of setting ``name``; ``base`` is the directory relative
    paths are relative to (the file's), None for the working directory."""
    if name == "port":
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value.strip())
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 65536:
            raise ClientSettingsError(f"{source}: port must be an integer from 1 to 65535, "
                                      f"not {value!r}.")
        return value
    if name == "nimbus_seeds" or _where(name, value) == "nimbus_seeds":
        return _seeds(value, source)
    if name == "host":
        if not isinstance(value, str) or not value.strip():
            raise ClientSettingsError(f"{source}: host must be a host name or address, "
                                      f"not {value!r}.")
        return value.strip()
    assert name in _PATHS
    if not isinstance(value, (str, os.PathLike)) or not os.fspath(value):
        raise ClientSettingsError(f"{source}: {name} must be a path, not {value!r}.")
    path = Path(value).expanduser()
    if base is not None and not path.is_absolute():
        path = base / path
    # Lexically, so that the messages show the path as written, without "..".
    return Path(os.path.normpath(path.absolute()))


def _seeds(value: Any, source: str) -> tuple[str, ...]:
    """A list of seeds (a YAML list, or a string separated by commas), each checked
    and kept as written (the port each lacks is only known once ``port`` is)."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list) or not items \
            or not all(isinstance(item, str) for item in items):
        raise ClientSettingsError(f"{source}: nimbus seeds must be a list of host or "
                                  f"host:port, not {value!r}.")
    seeds = []
    for item in items:
        try:
            parse_seed(item, NIMBUS_PORT)
        except ValueError as exc:
            raise ClientSettingsError(f"{source}: {exc}") from None
        seeds.append(item.strip())
    return tuple(seeds)


def _is_socket(path: Path) -> bool:
    try:
        return stat.S_ISSOCK(path.stat().st_mode)
    except OSError:
        return False
