"""The Nimbus service's run-time settings of a topology: ``setLogConfig`` and
``getLogConfig`` (named loggers' levels, Storm's ``LogConfig``) and ``debug`` (a sample
of a component's tuples logged).

The daemon keeps them in the topology's work directory as ``settings.json``
(:class:`~nimbus_thrift.runner.rundir.RunSettings`), the file the topology's runner
follows without a restart: the driver at each poll, each Python worker at each task
(:mod:`nimbus_thrift.runner.settings`). So the daemon's copy and what the topology
reads are one file: it survives a daemon restart, a relaunched or adopted application
reads it again, and it is deleted with the topology. A launcher whose topologies run
where that directory is not seen would forward it.

Storm's semantics (its ``Nimbus.setLogConfig``): the new config is merged into the
stored one, logger by logger; ``UPDATE`` sets a logger's ``target_log_level``, until
``reset_log_level_timeout_secs`` have passed when it is more than 0 (then the logger goes
back to ``reset_log_level``, or to the level it had), ``REMOVE`` drops the logger's
setting (and, here, puts it back to the level it had), ``UNCHANGED`` does nothing.
``ROOT`` (any case) is the root logger; Spark's own log level follows it. The reset
time sent back (``reset_log_level_timeout_epoch``) is in epoch milliseconds, as Storm's.

``setLogConfig`` and ``getLogConfig`` declare no exceptions in Storm's IDL: an unknown
topology, a refusal or a bad setting is a ``TApplicationException`` whose message says
which (:func:`.wire_errors.storm_errors`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import structlog

from ...runner.rundir import (ALL_COMPONENTS, LEVEL_NAMES, ROOT_LOGGER, LoggerSetting,
                             RunDir, RunSettings, Sampling)
from ..security.authz import Authorizer
from ..security.runas import as_owner_of
from ..state.locks import KeyedLocks
from ..state.store import Store, TopologyRecord
from .access import Access, acl_of
from .wire_errors import InvalidOption, storm_errors

log = structlog.get_logger(__name__)

#: Named loggers one topology may have settings for: the settings file is read at every
#: task, and a client must not grow it without bound.
MAX_LOGGERS = 1000
#: Longest logger name (Python's dotted names are far shorter in practice).
MAX_LOGGER_NAME = 1000
#: Longest reset timeout: Storm's field is an i32 of seconds; a year is plenty.
MAX_RESET_SECS = 365 * 86400


def settings_of(topologies_dir: Path, topology_id: str) -> RunSettings:
    """The run-time settings of a topology (empty when it has none, or they cannot be
    read: a query must still answer)."""
    try:
        return RunDir(topologies_dir / topology_id).read_settings()
    except (OSError, ValueError, TypeError) as exc:
        log.warning("settings_unreadable", topology=topology_id, error=str(exc))
        return RunSettings()


def debug_options(idl: Any, settings: RunSettings, component: str = ALL_COMPONENTS
                  ) -> Any:
    """The IDL's DebugOptions of ``component`` (the topology's for
    :data:`ALL_COMPONENTS`), or None when debug was never set for it."""
    sampling = settings.sampling.get(component)
    if sampling is None:
        return None
    return idl.DebugOptions(enable=sampling.enable, samplingpct=sampling.percent)


class LogCalls:
    """setLogConfig, getLogConfig and debug.

    Args:
        idl: the loaded IDL module.
        access: the gate.
        authz: who may call what.
        store: the daemon's state.
        locks: the topologies' locks (a settings file is changed under its
            topology's, so a removal cannot delete the directory meanwhile).
        topologies_dir: the topologies' work directories, where the settings are.
        clock: epoch seconds (when a log level's reset is due).
    """

    def __init__(self, idl: ModuleType, access: Access, authz: Authorizer, store: Store,
                 locks: KeyedLocks, topologies_dir: Path, clock: Callable[[], float]):
        self.idl = idl
        self._access = access
        self._authz = authz
        self._store = store
        self._locks = locks
        self._topologies_dir = topologies_dir
        self._clock = clock

    @storm_errors
    def setLogConfig(self, name: str, config: Any) -> None:
        with self._access.gate("setLogConfig", topology=name) as call:
            rec = self._topology_of(name)
            call.subject["topology_id"] = rec.id
            self._authz.check(call, acl_of(rec))
            loggers = getattr(config, "named_logger_level", None) or {}
            with self._settings_of(rec) as (run_dir, settings):
                merged = merge_log_config(self.idl, settings.loggers, loggers, self._clock())
                run_dir.write_settings(RunSettings(merged, settings.sampling))
            log.info("log_config_set", topology=rec.id,
                     loggers={k: v.level for k, v in merged.items()})

    @storm_errors
    def getLogConfig(self, name: str) -> Any:
        with self._access.gate("getLogConfig", topology=name) as call:
            rec = self._topology_of(name)
            call.subject["topology_id"] = rec.id
            self._authz.check(call, acl_of(rec))
            settings = settings_of(self._topologies_dir, rec.id)
            return self.idl.LogConfig(named_logger_level={
                logger: self._log_level(setting)
                for logger, setting in settings.loggers.items()})

    @storm_errors
    def debug(self, name: str, component: str, enable: bool,
              samplingPercentage: float) -> None:
        with self._access.gate("debug", topology=name, component=component) as call:
            rec = self._topology_of(name)
            call.subject["topology_id"] = rec.id
            self._authz.check(call, acl_of(rec))
            key = component or ALL_COMPONENTS
            if key != ALL_COMPONENTS and key not in rec.tasks:
                raise self.idl.NotAliveException(
                    msg=f"topology {rec.name!r} has no component {component!r}; its "
                        f"components: {', '.join(sorted(rec.tasks))}")
            percent = samplingPercentage if isinstance(samplingPercentage, (int, float)) \
                and math.isfinite(samplingPercentage) else 0.0
            # Storm clamps to 0..100, and keeps the percentage while debug is off.
            percent = max(0.0, min(100.0, float(percent)))
            with self._settings_of(rec) as (run_dir, settings):
                old = settings.sampling.get(key)
                if not enable and old is not None:
                    percent = old.percent
                sampling = {**settings.sampling, key: Sampling(bool(enable), percent)}
                run_dir.write_settings(RunSettings(settings.loggers, sampling))
                self._store.notify(rec.id)      # its TopologyInfo's component_debug
            log.info("debug_set", topology=rec.id, component=key or "(all)",
                     enable=bool(enable), percent=percent)

    # --- helpers --------------------------------------------------------------------
    def _topology_of(self, name_or_id: Any) -> TopologyRecord:
        """The topology whose id (what Storm's tools send to the log calls) or name
        (what ``debug`` takes) is ``name_or_id``."""
        rec = None
        if isinstance(name_or_id, str):
            rec = self._store.topology(name_or_id) or self._store.topology_named(name_or_id)
        if rec is None:
            raise self.idl.NotAliveException(
                msg=f"no topology with id or name {name_or_id!r}")
        return rec

    @contextmanager
    def _settings_of(self, rec: TopologyRecord) -> Iterator[tuple[RunDir, RunSettings]]:
        """Hold the topology's lock; yield its work directory and settings as of now
        (the directory is still there: a removal deletes it under the same lock)."""
        run_dir = RunDir(self._topologies_dir / rec.id)
        with ExitStack() as held:
            held.enter_context(self._locks.hold(rec.id))
            if self._store.topology(rec.id) is None or not run_dir.root.is_dir():
                raise self.idl.NotAliveException(
                    msg=f"topology {rec.name!r} ({rec.id}) is being removed")
            # Read and written as the work directory's owner (runas.py): the topology
            # may have put anything there. Nothing of the daemon's is opened in here.
            held.enter_context(as_owner_of(run_dir.root))
            try:
                settings = run_dir.read_settings()
            except (OSError, ValueError, TypeError) as exc:
                # This call replaces the file as a whole: say that the old one is lost.
                log.warning("settings_unreadable", topology=rec.id, error=str(exc),
                            action="replaced")
                settings = RunSettings()
            yield run_dir, settings

    def _log_level(self, setting: LoggerSetting) -> Any:
        idl = self.idl
        timeout = setting.timeout_secs if setting.reset_at is not None else None
        epoch = int(setting.reset_at * 1000) if setting.reset_at is not None else None
        return idl.LogLevel(action=idl.LogLevelAction.UPDATE,
                            target_log_level=setting.level,
                            reset_log_level_timeout_secs=timeout,
                            reset_log_level_timeout_epoch=epoch,
                            reset_log_level=setting.reset_level or None)


def merge_log_config(idl: Any, stored: dict[str, LoggerSetting], loggers: dict[str, Any],
                     now: float) -> dict[str, LoggerSetting]:
    """Storm's merge of a ``LogConfig``'s ``named_logger_level`` into the stored
    settings, at epoch seconds ``now`` (see the module docstring).

    Raises:
        InvalidOption: an empty logger name, an unknown action or level, a logger
            name or a number of loggers over the limits.
    """
    merged = dict(stored)
    actions = idl.LogLevelAction
    for raw_name, level in sorted(loggers.items(), key=lambda item: str(item[0])):
        if not isinstance(raw_name, str) or not raw_name:
            raise InvalidOption("named loggers need a name: use ROOT for the root logger")
        if len(raw_name) > MAX_LOGGER_NAME:
            raise InvalidOption(f"logger name {raw_name[:40]!r}... is {len(raw_name)} "
                                  f"characters long; the limit is {MAX_LOGGER_NAME}")
        name = ROOT_LOGGER if raw_name.upper() == ROOT_LOGGER else raw_name
        action = getattr(level, "action", None)
        if action == actions.UPDATE:
            merged[name] = _update(name, level, now)
        elif action == actions.REMOVE:
            merged.pop(name, None)
        elif action != actions.UNCHANGED:
            raise InvalidOption(f"logger {name!r} has action {action!r}; it must be "
                                  "UNCHANGED (1), UPDATE (2) or REMOVE (3)")
    if len(merged) > MAX_LOGGERS:
        raise InvalidOption(f"the topology would have settings for {len(merged)} "
                              f"loggers; the limit is {MAX_LOGGERS}")
    return merged


def _update(name: str, level: Any, now: float) -> LoggerSetting:
    target = _level_name(name, "target_log_level", getattr(level, "target_log_level", None))
    reset = getattr(level, "reset_log_level", None)
    reset_level = _level_name(name, "reset_log_level", reset) if reset else ""
    timeout = getattr(level, "reset_log_level_timeout_secs", None) or 0
    if isinstance(timeout, bool) or not isinstance(timeout, int):
        raise InvalidOption(f"logger {name!r}: reset_log_level_timeout_secs must be "
                              f"a whole number of seconds, not {timeout!r}")
    if timeout > MAX_RESET_SECS:
        raise InvalidOption(f"logger {name!r}: reset_log_level_timeout_secs {timeout} "
                              f"is over the limit of {MAX_RESET_SECS} (a year)")
    if timeout <= 0:                # Storm: no timeout, the level is kept until changed
        return LoggerSetting(level=target, reset_level=reset_level)
    return LoggerSetting(level=target, reset_at=now + timeout, reset_level=reset_level,
                         timeout_secs=timeout)


def _level_name(logger: str, what: str, value: Any) -> str:
    if not isinstance(value, str) or value.upper() not in LEVEL_NAMES:
        raise InvalidOption(f"logger {logger!r}: {what} {value!r} is not a log level "
                              f"(one of {', '.join(LEVEL_NAMES)})")
    return value.upper()
