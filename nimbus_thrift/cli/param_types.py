"""The values users type into flags, checked and converted by click (a bad one is a usage
error naming it): COMPONENT=N, KEY=VALUE, an ACL, NAME=LEVEL[:SECS]."""

from __future__ import annotations

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
