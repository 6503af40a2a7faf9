"""The one interface between the Nimbus handler and whatever runs topologies.

The handler owns the *desired* state (in SQLite); a launcher owns the processes. The
handler calls a launcher after the desired state is committed, so a launcher failure
never loses an acknowledged request: it shows up in ``getTopologyInfo`` instead.

The launchers there are, and how the daemon picks one, are in :mod:`.launcher_choice`;
launchers import this module, never the reverse. Only launcher implementations may
import PySpark.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Mapping
from typing import Any, Protocol

from ..topology.validate import InvalidTopology, TopologyPlan


class LauncherError(Exception):
    """A launcher could not do what it was asked; the message says why."""


@dataclass(frozen=True)
class LaunchSpec:
    """Everything a launcher needs to run one topology.

    ``topology`` is the IDL's ``StormTopology`` as submitted; ``executors`` and
    ``tasks`` are per component after validation (and after any rebalance). ``plan``
    is the topology validated with ``conf``, computed once by the handler (at submit,
    or from the stored topology when it is launched again or rebalanced): None when a
    stored topology no longer validates, and then ``invalid`` says why.
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
    plan: TopologyPlan | None
    invalid: str = ""
    #: The OS user its processes run as (run_as_user); empty: the daemon's.
    run_as: str = ""

    def require_plan(self) -> TopologyPlan:
        """The plan, for a launcher that needs it.

        Raises:
            InvalidTopology: the stored topology no longer validates (``invalid``).
        """
        if self.plan is None:
            raise InvalidTopology(self.invalid)
        return self.plan


@dataclass(frozen=True)
class ComponentStats:
    """Live figures of one component, as far as the launcher knows them."""

    emitted: int = 0
    processed: int = 0
    rate: float = 0.0                 # tuples per second, recent
    latency_ms: float = 0.0           # mean batch latency, recent
    #: Milliseconds a bolt's tasks spent on its tuples (decoding, its code, converting
    #: what it emitted), summed since the run started; 0 when not measured.
    busy_ms: float = 0.0

    @property
    def execute_ms(self) -> float:
        """Mean milliseconds per tuple processed (Storm's execute latency)."""
        return self.busy_ms / self.processed if self.processed else 0.0


@dataclass(frozen=True)
class RunStatus:
    """What a launcher knows about one topology.

    ``state``: one of ``unscheduled``, ``starting``, ``running``, ``paused``,
    ``stopping``, ``stopped``, ``finished``, ``failed``. ``detail`` is a sentence for
    humans that starts with the state word and a colon (``running: batch 12, ...``):
    the web page and the daemon's log show it. The IDL's ``sched_status`` is
    :attr:`sched_status`, a word or two as Storm's is (tools list it in a table
    column). ``errors`` are ``(component, message, epoch secs)``.
    """

    state: str
    detail: str
    started_at: float | None = None
    host: str = ""
    port: int = 0
    ui_url: str = ""
    components: dict[str, ComponentStats] = field(default_factory=dict)
    errors: tuple[tuple[str, str, int], ...] = ()
    #: Times the launcher relaunched it after a failure (the current incarnation's).
    restarts: int = 0
    #: Micro-batches its current run completed, and the last one's seconds (None: the
    #: launcher does not run batches, or none has completed).
    batches: int | None = None
    last_batch_secs: float | None = None
    #: Why a gone application is being launched again, when it is (``"after a
    #: failure"``, ``"with the new parallelism"``); "" when it is not.
    relaunching: str = ""

    @property
    def sched_status(self) -> str:
        """Storm's ``sched_status``: short, in Storm's spirit (its own is empty or a
        few words): the state word, or ``relaunching <why>`` between a gone
        application and its relaunch. It starts with the state word (or
        ``relaunching``) so ``submit --wait`` reads it; the rest of the story is in
        :attr:`detail`, the errors and the figures."""
        return f"relaunching {self.relaunching}" if self.relaunching else self.state

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
    #: Ids of the topologies with executors here, as far as the launcher knows (a
    #: standalone master does not say which worker runs which application's).
    topologies: tuple[str, ...] = ()


class Launcher(Protocol):
    """Runs topologies. Every method may raise :class:`LauncherError`.

    ``launch`` must be idempotent: after a daemon restart it is called again for every
    known topology and should adopt what is still running.

    A launcher whose topologies take room elsewhere than this host may also define
    ``check_capacity(conf, parallelism, num_workers)``, raising ValueError with one
    sentence when that room is not free now: the submit is refused with it (the
    cluster launcher does, against the standalone master's alive workers). One whose
    topologies run nowhere on this host says ``runs_elsewhere = True``: a nimbus that
    loses its leadership then leaves them running, for the new leader to adopt.

    A topology's run-time settings (log levels, tuple sampling) are not calls: the
    daemon writes them to ``settings.json`` in its work directory
    (:class:`~nimbus_thrift.runner.rundir.RunSettings`), which the runner follows; a
    launcher whose topologies run where that directory is not seen forwards them.
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

    def memory_request(self, conf: Mapping[str, Any]) -> int:
        """Bytes of this machine's memory a topology with ``conf`` would take once
        launched (0 when it takes none here, or the launcher cannot tell); the daemon
        admits topologies against ``spark_memory_budget`` with it.

        Raises:
            ValueError: a setting in ``conf`` that sizes memory is invalid (a sentence
            naming it; the submit is refused with it).
        """
        ...
