"""Named loggers' levels changed at run time, and set back when their time is up.

:class:`LogLevels` applies the logger settings of a topology's ``settings.json``
(:class:`~.rundir.LoggerSetting`, Storm's ``LogLevel``) to this process's Python
loggers: ``ROOT`` is the root logger, any other name a dotted logger name. Storm's
level names map onto Python's levels (:func:`python_level`); the root logger's changes
are also handed to ``on_root`` (the driver sets Spark's own, JVM, level with it).

Theory of operation. Each logger name is in one of three states::

    untouched --setting--> active --reset_at passed (tick)--> expired
        ^                    |  \\--setting changed--> active (the new one)
        +---setting removed--+

- *active*: the logger is at the setting's level. The level it had before the first
  change is remembered (``original``), once, so several changes in a row still go
  back to what it was before any of them.
- *expired*: the reset time passed; the logger is at the setting's ``reset_level``, or
  at its original level when none was given. The same setting seen again (the file is
  re-read) does nothing; a new one makes it active again.
- a setting *removed* (Storm's REMOVE) puts the logger back to its original level.

A setting already expired when first seen (a relaunched application reading an old
file) is not applied at all: the logger goes straight to its reset level.

No PySpark here.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Mapping

from .rundir import ROOT_LOGGER, LoggerSetting

#: Storm's (log4j's) level names as Python levels. Python has no TRACE, ALL or OFF:
#: TRACE sits below DEBUG, ALL below everything but NOTSET (0 means "inherit" for a
#: named logger), OFF above CRITICAL.
PYTHON_LEVELS = {"ALL": 1, "TRACE": 5, "DEBUG": logging.DEBUG, "INFO": logging.INFO,
                 "WARN": logging.WARNING, "WARNING": logging.WARNING,
                 "ERROR": logging.ERROR, "FATAL": logging.CRITICAL,
                 "CRITICAL": logging.CRITICAL, "OFF": logging.CRITICAL + 50}
#: The same names as log4j (Spark's ``SparkContext.setLogLevel``) takes them.
JVM_LEVELS = {"WARNING": "WARN", "CRITICAL": "FATAL"}


def python_level(name: str) -> int:
    """The Python level of a Storm level name (any case).

    Raises:
        ValueError: not a level name.
    """
    try:
        return PYTHON_LEVELS[name.upper()]
    except KeyError:
        raise ValueError(f"{name!r} is not a log level (one of "
                         f"{', '.join(PYTHON_LEVELS)})") from None


def jvm_level(name: str) -> str:
    """The log4j level name of a Storm level name (what Spark's setLogLevel takes)."""
    upper = name.upper()
    return JVM_LEVELS.get(upper, upper)


def is_root(name: str) -> bool:
    return name.upper() == ROOT_LOGGER


class LogLevels:
    """Applies logger settings to this process's loggers (see the module docstring).

    Args:
        clock: epoch seconds (``reset_at`` is in the daemon's epoch seconds).
        on_root: called with the root logger's new level name, or None when it goes
            back to its original level.
    """

    def __init__(self, clock: Callable[[], float] = time.time,
                 on_root: Callable[[str | None], None] | None = None):
        self.clock = clock
        self.on_root = on_root
        self.original: dict[str, int] = {}
        self.active: dict[str, LoggerSetting] = {}
        self.expired: dict[str, LoggerSetting] = {}

    def apply(self, settings: Mapping[str, LoggerSetting]) -> None:
        """Make the loggers follow ``settings`` (all of them: a name missing from it
        goes back to its original level)."""
        now = self.clock()
        for name in [n for n in [*self.active, *self.expired] if n not in settings]:
            self.active.pop(name, None)
            self.expired.pop(name, None)
            self._restore(name)
        for name, setting in settings.items():
            if self.active.get(name) == setting or self.expired.get(name) == setting:
                continue
            self.expired.pop(name, None)
            if setting.expired(now):
                self.active.pop(name, None)
                self._reset(name, setting)
                self.expired[name] = setting
                continue
            self._set(name, setting.level)
            self.active[name] = setting

    def tick(self) -> None:
        """Reset the loggers whose time is up."""
        now = self.clock()
        for name, setting in list(self.active.items()):
            if setting.expired(now):
                del self.active[name]
                self._reset(name, setting)
                self.expired[name] = setting

    def next_reset(self) -> float | None:
        """When the next active setting expires (epoch seconds), if any does."""
        times = [s.reset_at for s in self.active.values() if s.reset_at is not None]
        return min(times) if times else None

    # --- one logger -----------------------------------------------------------------
    def _logger(self, name: str) -> logging.Logger:
        return logging.getLogger() if is_root(name) else logging.getLogger(name)

    def _set(self, name: str, level: str) -> None:
        logger = self._logger(name)
        self.original.setdefault(name, logger.level)
        logger.setLevel(python_level(level))
        if is_root(name) and self.on_root is not None:
            self.on_root(jvm_level(level))

    def _reset(self, name: str, setting: LoggerSetting) -> None:
        if setting.reset_level:
            self._set(name, setting.reset_level)
        else:
            self._restore(name)

    def _restore(self, name: str) -> None:
        original = self.original.pop(name, None)
        if original is None:
            return                  # never changed here: it is what it was
        self._logger(name).setLevel(original)
        if is_root(name) and self.on_root is not None:
            self.on_root(None)
