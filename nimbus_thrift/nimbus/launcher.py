"""The one interface between the Nimbus handler and whatever runs topologies.

The handler owns the *desired* state (in SQLite); a launcher owns the processes. The
handler calls a launcher after the desired state is committed, so a launcher failure
never loses an acknowledged request: it shows up in ``getTopologyInfo`` instead.

Built-in launchers (``launcher:`` in the daemon configuration):

    spark       the default: each topology is one Spark application, started with
                spark-submit on ``spark_master`` (:mod:`.spark_launcher`).
    none        nothing runs: topologies are accepted, stored and controlled, and report
                "not scheduled" (a Nimbus with no supervisors). For clients, tooling and
                tests that need the service but not the execution.
    module:attr any importable factory ``attr(config) -> Launcher``.

Only launcher implementations may import PySpark.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol


class LauncherError(Exception):
    """A launcher could not do what it was asked; the message says why."""


@dataclass(frozen=True)
class LaunchSpec:
    """Everything a launcher needs to run one topology.

    ``topology`` is the IDL's ``StormTopology`` as submitted; ``executors`` and
    ``tasks`` are per component after validation (and after any rebalance).
    """

    topology_id: str
    name: str
    topology: Any
    conf: dict[str, Any]
    code_path: Path
    work_dir: Path
    num_workers: int
    executors: dict[str, int]
    tasks: dict[str, int]
    active: bool


@dataclass(frozen=True)
class ComponentStats:
    """Live figures of one component, as far as the launcher knows them."""

    emitted: int = 0
    processed: int = 0
    rate: float = 0.0                 # tuples per second, recent
    latency_ms: float = 0.0           # mean batch latency, recent


@dataclass(frozen=True)
class RunStatus:
    """What a launcher knows about one topology.

    ``state``: one of ``unscheduled``, ``starting``, ``running``, ``paused``,
    ``stopping``, ``stopped``, ``finished``, ``failed``. ``detail`` is a sentence for
    humans (the TopologyInfo ``sched_status``) that starts with the state word and a
    colon (``running: batch 12, ...``), so tools can read the state from it; ``errors``
    are ``(component, message, epoch secs)``.
    """

    state: str
    detail: str
    started_at: float | None = None
    host: str = ""
    port: int = 0
    ui_url: str = ""
    components: dict[str, ComponentStats] = field(default_factory=dict)
    errors: tuple[tuple[str, str, int], ...] = ()

    @property
    def assigned(self) -> bool:
        """True when the topology's executors exist somewhere."""
        return self.state in ("starting", "running", "paused")


@dataclass(frozen=True)
class WorkerNode:
    """One place topologies run (a Storm supervisor): a Spark worker, for instance."""

    node_id: str
    host: str
    started_at: float
    slots: int
    used_slots: int
    version: str = ""


class Launcher(Protocol):
    """Runs topologies. Every method may raise :class:`LauncherError`.

    ``launch`` must be idempotent: after a daemon restart it is called again for every
    known topology and should adopt what is still running.
    """

    name: str

    def launch(self, spec: LaunchSpec) -> None: ...
    def stop(self, topology_id: str, grace: float) -> None: ...
    def pause(self, topology_id: str) -> None: ...
    def resume(self, topology_id: str) -> None: ...
    def rebalance(self, spec: LaunchSpec) -> None: ...
    def status(self, topology_id: str) -> RunStatus: ...
    def nodes(self) -> list[WorkerNode]: ...
    def close(self) -> None: ...


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

    def close(self) -> None:
        pass


def _spark(config: Any) -> Launcher:
    # Imported when chosen: the module looks for PySpark and Java as it starts.
    from .spark.launcher import SparkLauncher
    return SparkLauncher(config)


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
