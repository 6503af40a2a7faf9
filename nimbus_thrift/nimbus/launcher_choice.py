"""The launchers there are, and :func:`load_launcher`, which builds the one the daemon
configuration names (``launcher:``):

    spark       the default: each topology is one Spark application, started with
                spark-submit on ``spark_master`` (:mod:`.spark.launcher`), or with
                ``deploy_mode: cluster`` its driver submitted to a standalone
                master's workers (:mod:`.spark.cluster.launcher`).
    none        nothing runs: topologies are accepted, stored and controlled, and report
                "not scheduled" (a Nimbus with no supervisors). For clients, tooling and
                tests that need the service but not the execution.
    module:attr any importable factory ``attr(config) -> Launcher``.

A launcher is imported only when chosen: the Spark one looks for PySpark and Java as it
starts. The daemon imports this module; launchers import :mod:`.launcher`, not this.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping

from .launcher import Launcher, LauncherError, LaunchSpec, RunStatus, WorkerNode


class UnscheduledLauncher:
    """The ``none`` launcher: runs nothing and says so.

    Like a Storm Nimbus with no supervisors: every topology is accepted and
    controllable, and its status says it is not scheduled, with the reason.
    """

    name = "none"
    DETAIL = "unscheduled: this nimbus has no execution backend (launcher 'none')"

    def launch(self, spec: LaunchSpec) -> None:
        pass

    def stop(self, topology_id: str, grace: float) -> None:
        pass

    def pause(self, topology_id: str) -> None:
        pass

    def resume(self, topology_id: str) -> None:
        pass

    def rebalance(self, spec: LaunchSpec) -> None:
        pass

    def status(self, topology_id: str) -> RunStatus:
        return RunStatus(state="unscheduled", detail=self.DETAIL)

    def nodes(self) -> list[WorkerNode]:
        return []

    def memory_request(self, conf: Mapping[str, Any]) -> int:
        return 0

    def close(self) -> None:
        pass


def _spark(config: Any) -> Launcher:
    # Imported when chosen: the module looks for PySpark and Java as it starts.
    if getattr(config, "deploy_mode", "client") == "cluster":
        from .spark.cluster.launcher import ClusterLauncher
        return ClusterLauncher(config)
    from .spark.launcher import SparkLauncher
    # The daemon's launcher keeps standby drivers (standby_drivers).
    return SparkLauncher(config, standbys=True)


BUILTIN: dict[str, Callable[[Any], Launcher]] = {
    "none": lambda config: UnscheduledLauncher(),
    "spark": _spark,
}


def load_launcher(spec: str, config: Any) -> Launcher:
    """Build the launcher named by ``spec``: a built-in name or ``module:factory``.

    Raises:
        LauncherError: unknown name, unimportable module, or a factory that fails.
    """
    factory = BUILTIN.get(spec)
    if factory is None:
        module_name, sep, attr = spec.partition(":")
        if not sep or not module_name or not attr:
            raise LauncherError(
                f"unknown launcher {spec!r}: use one of {', '.join(sorted(BUILTIN))} "
                "or 'module:factory'")
        try:
            factory = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise LauncherError(f"cannot load launcher {spec!r}: {exc}") from None
    try:
        return factory(config)
    except LauncherError:
        raise
    except Exception as exc:
        raise LauncherError(f"launcher {spec!r} failed to start: "
                            f"{type(exc).__name__}: {exc}") from exc
