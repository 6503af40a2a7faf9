"""The values users type into flags, checked and converted by click (a bad one is a usage
error naming it): COMPONENT=N, KEY=VALUE, an ACL, NAME=LEVEL[:SECS]."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import click

#: Storm's (log4j's) level names; ours map them onto Python's (WARN: WARNING, ...).
LOG_LEVEL_NAMES = ("ALL", "TRACE", "DEBUG", "INFO", "WARN", "WARNING", "ERROR", "FATAL",
                   "CRITICAL", "OFF")
#: The longest reset timeout the daemon accepts (nimbus/service/logs.py's MAX_RESET_SECS,
#: a year): checked here too, so a typo is refused before anything is sent.
MAX_LOG_TIMEOUT_SECS = 365 * 86400


class ComponentCount(click.ParamType):
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


class ConfItem(click.ParamType):
    name = "KEY=VALUE"

    def convert(self, value: Any, param: Any, ctx: Any) -> tuple[str, Any]:
        if isinstance(value, tuple):
            return value
        from ..topology.package import PackageError, parse_conf_option
        try:
            return parse_conf_option(str(value))
        except PackageError as exc:
            self.fail(str(exc), param, ctx)


class Acl(click.ParamType):
    """Storm's ACL string (``u:alice:rwa,u:bob:rw,o::r``) as AccessControl structs."""
    name = "ACL"

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        if isinstance(value, list):
            return value
        from ..client.blobs import parse_acl
        try:
            return parse_acl(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class LogSetting(click.ParamType):
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


@dataclass(frozen=True)
class Wait:
    """submit's ``--wait [SECONDS]``: how long to follow the status; ``bare`` when no
    SECONDS was typed (the old flag's spelling, whose deadline was --timeout)."""
    seconds: float
    bare: bool


class WaitSeconds(click.ParamType):
    """``--wait SECONDS`` (a positive number), or ``--wait`` alone (``flag_value``
    :data:`BARE`): the default wait, marked bare."""
    name = "SECONDS"
    #: What click passes for a ``--wait`` given without a value.
    BARE = "__bare__"

    def __init__(self, default: float) -> None:
        self.default = default

    def convert(self, value: Any, param: Any, ctx: Any) -> Wait:
        if isinstance(value, Wait):
            return value
        if value == self.BARE:
            return Wait(self.default, bare=True)
        try:
            seconds = float(value)
        except ValueError:
            self.fail(f"{value!r} is not a number of seconds (write --wait SECONDS, or "
                      "--wait after the file to wait the default)", param, ctx)
        if not seconds > 0:
            self.fail(f"{value!r}: the wait must be more than 0 seconds", param, ctx)
        return Wait(seconds, bare=False)
