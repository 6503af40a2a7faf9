"""The daemon's configuration: built once from defaults, a YAML file, environment
variables and command-line flags (each overriding the one before), validated, frozen.

What the settings are (names, types, defaults, flags, bounds, docs) is the registry's,
:mod:`.settings`; this module reads them from where the user wrote them, and an error
names that place: the file and the key, the environment variable, or the flag.

YAML keys are the setting names (``data_dir`` or ``data-dir``); environment variables
are ``NIMBUS_THRIFT_`` + the name in capitals (``NIMBUS_THRIFT_PORT``). Lists of
principals (``admins``, ``users``) are YAML lists, or comma-separated strings in the
environment and flags (``NIMBUS_THRIFT_ADMINS=alice,ops``).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Mapping

from ..idl import ENV_PREFIX
from .settings import (OPTIONAL_ADDRESSES, OPTIONAL_PATH, OPTIONAL_STR, PRINCIPAL_MAP,
                       PRINCIPALS, SETTINGS, ConfigError, NimbusConfig)

__all__ = ["ConfigError", "NimbusConfig", "load_config", "is_public", "to_public",
           "ENV_PREFIX", "DEFAULT_MAX_DOWNLOADS_PER_PEER", "DEFAULT_MAX_INBOX_BYTES",
           "DEFAULT_MAX_UPLOADS_PER_PEER", "DEFAULT_MIN_FREE_DISK_BYTES", "DEFAULT_UI_PORT",
           "MAX_UNIX_SOCKET_PATH_BYTES"]

#: Words a boolean setting may be spelled with in YAML strings and the environment.
_BOOL_WORDS = {"true": True, "yes": True, "on": True, "1": True,
               "false": False, "no": False, "off": False, "0": False}
#: What a value of each declared type must be, for the error that says it is not.
_EXPECTED = {int: "an integer", float: "a number", Path: "a path", str: "a string",
             bool: "true or false",
             PRINCIPALS: "a list of principal names (comma-separated in the environment "
                         "and flags)",
             OPTIONAL_PATH: "a path (or empty)",
             OPTIONAL_ADDRESSES: "a list of host:port addresses (comma-separated in "
                                 "the environment), or empty for none",
             OPTIONAL_STR: "a path, or empty to turn it off",
             PRINCIPAL_MAP: "a mapping of principal to OS user name (principal=user "
                            "pairs, comma-separated, in the environment)"}


def _coerce(name: str, value: Any, source: str) -> Any:
    """``value`` as written in ``source`` (the file, the variable, the flag), made the
    setting's declared type; ConfigError naming ``source`` if it cannot be."""
    kind = SETTINGS[name].kind
    try:
        if kind == PRINCIPALS:
            return _principals(value)
        if kind == PRINCIPAL_MAP:
            return _principal_map(value)
        if kind == OPTIONAL_ADDRESSES:
            if value is None or value == "" or value == []:
                return None
            return _principals(value)           # the same list forms as principals
        if kind == OPTIONAL_PATH:
            if value is None or value == "":
                return None
            if not isinstance(value, (str, Path)):
                raise ValueError
            return Path(value).expanduser().absolute()
        if kind == OPTIONAL_STR:       # unix_socket: a path, or empty for none
            if not isinstance(value, (str, Path)):
                raise ValueError
            # Absolute: the daemon may be started from anywhere, clients look for it.
            return str(Path(value).expanduser().absolute()) if str(value) else ""
        if kind is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.strip().lower() in _BOOL_WORDS:
                return _BOOL_WORDS[value.strip().lower()]
            raise ValueError
        if kind is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if kind is float:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if kind is Path:
            if not isinstance(value, (str, Path)) or not str(value):
                raise ValueError
            # Absolute: upload locations and getNimbusConf carry it to other processes.
            return Path(value).expanduser().absolute()
        if not isinstance(value, str):
            raise ValueError
        return value
    except (TypeError, ValueError):
        raise ConfigError(f"{source}: {name} must be {_EXPECTED[kind]}, not {value!r}") \
            from None


def _principals(value: Any) -> tuple[str, ...]:
    """A YAML list, or a comma-separated string (the environment, flags), as a tuple
    of names; numbers are names too (a user without a login name is its uid)."""
    if isinstance(value, str):
        items: list[Any] = [part.strip() for part in value.split(",")]
        return tuple(item for item in items if item)
    if not isinstance(value, (list, tuple)):
        raise ValueError
    names = []
    for item in value:
        if isinstance(item, bool) or not isinstance(item, (str, int)):
            raise ValueError
        names.append(str(item))
    return tuple(names)


def _principal_map(value: Any) -> tuple[tuple[str, str], ...]:
    """A YAML mapping, or ``principal=user`` pairs comma-separated (the environment),
    as sorted pairs (a frozen config holds no dict)."""
    if isinstance(value, str):
        pairs = [part.strip().split("=", 1) for part in value.split(",") if part.strip()]
        if any(len(pair) != 2 for pair in pairs):
            raise ValueError
        value = {k.strip(): v.strip() for k, v in pairs}
    if isinstance(value, tuple):
        value = dict(value)
    if not isinstance(value, dict):
        raise ValueError
    items = []
    for principal, user in value.items():
        if isinstance(principal, bool) or isinstance(user, bool) or \
                not isinstance(principal, (str, int)) or not isinstance(user, (str, int)):
            raise ValueError
        items.append((str(principal), str(user)))
    return tuple(sorted(items))


def load_config(file: Path | None = None, env: Mapping[str, str] | None = None,
                flags: Mapping[str, Any] | None = None) -> NimbusConfig:
    """Build the configuration.

    Args:
        file: a YAML file of ``key: value`` pairs, or None.
        env: the environment (``os.environ`` when None); ``NIMBUS_THRIFT_*`` is read.
        flags: values given on the command line; None values mean "not given".

    Raises:
        ConfigError: unreadable file, unknown key, wrong type, value out of range.
    """
    values: dict[str, Any] = {}
    if file is not None:
        values.update(_from_file(file))
    env = os.environ if env is None else env
    for name, declared in SETTINGS.items():
        if declared.env in env:
            values[name] = _coerce(name, env[declared.env],
                                   f"environment variable {declared.env}")
    for name, value in (flags or {}).items():
        if value is None:
            continue
        if name not in SETTINGS:
            raise ConfigError(f"unknown setting {name!r}")
        values[name] = _coerce(name, value, SETTINGS[name].flag_text)
    try:
        return NimbusConfig(**values)
    except ConfigError as exc:
        raise ConfigError(f"invalid configuration: {exc}") from None


def _from_file(path: Path) -> dict[str, Any]:
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:   # a ValueError, not an OSError
        raise ConfigError(f"cannot read config file {path}: it is not UTF-8 text "
                          f"({exc.reason} at byte {exc.start})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must be a mapping of settings, "
                          f"not {type(data).__name__}")
    values = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name not in SETTINGS:
            raise ConfigError(f"config file {path}: unknown setting {key!r}; known: "
                              + ", ".join(sorted(SETTINGS)))
        values[name] = _coerce(name, value, f"config file {path}")
    return values


#: The settings typed as paths, or as lists of principals or of servers: never public.
_PRIVATE_KINDS = (Path, OPTIONAL_PATH, PRINCIPALS, PRINCIPAL_MAP, OPTIONAL_ADDRESSES)


def is_public(name: str) -> bool:
    """Whether the setting ``name`` may be shown to the service's users (getNimbusConf,
    the REST API's configuration): not a path (the data directory, the TLS files, the
    socket, the Spark cache, spark-submit) and not a list of principals (admins, users,
    principal_users), which tell a caller where the secrets are and whom to be."""
    declared = SETTINGS[name]
    return not declared.holds_path and declared.kind not in _PRIVATE_KINDS


def to_public(config: NimbusConfig) -> dict[str, Any]:
    """The public settings (:func:`is_public`) as JSON-ready values (lists as lists)."""
    return {name: list(v) if isinstance(v, tuple) else v
            for name, v in dataclasses.asdict(config).items() if is_public(name)}
