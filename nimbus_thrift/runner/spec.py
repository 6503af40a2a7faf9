"""The run spec: what the runner needs to build one topology's Spark query, as JSON.

The launcher writes ``spec.json`` into the topology's work directory; the driver
(:mod:`nimbus_thrift.runner.driver`) reads it. It is the validated plan of
:func:`nimbus_thrift.topology.validate.check_topology` plus the field types and
statefulness the DSL put in each component's json_conf, and the current parallelism
(after rebalances). No PySpark here: the daemon imports this module.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..topology.streams import FIELDS_KEY, STATEFUL_KEY

SPEC_VERSION = 1


@dataclass(frozen=True)
class InputSpec:
    component: str
    stream: str
    grouping: str                    # shuffle, fields, global, all, none, local_or_shuffle
    fields: tuple[str, ...] = ()


@dataclass(frozen=True)
class ComponentRun:
    kind: str                        # "spout" or "bolt"
    script: str                      # module.Class
    parallelism: int                 # tasks = Spark partitions of its stage
    inputs: tuple[InputSpec, ...]
    streams: dict[str, tuple[tuple[str, str], ...]]   # stream -> ((field, type name), ...)
    stateful: bool
    conf: dict[str, Any]


@dataclass(frozen=True)
class RunSpec:
    topology_id: str
    name: str
    conf: dict[str, Any]
    components: dict[str, ComponentRun]
    version: int = SPEC_VERSION
    #: Extra settings of this run (trigger, bounded, ...): see the runner's driver.
    run: dict[str, Any] = field(default_factory=dict)

    def order(self) -> list[str]:
        """Component ids, upstream before downstream (ties by id)."""
        done: list[str] = []
        placed: set[str] = set()
        pending = sorted(self.components)
        while pending:
            progress = False
            for cid in list(pending):
                if all(i.component in placed for i in self.components[cid].inputs):
                    done.append(cid)
                    placed.add(cid)
                    pending.remove(cid)
                    progress = True
            if not progress:
                raise ValueError(f"cycle among {pending}")
        return done

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, indent=1)

    @classmethod
    def from_json(cls, text: str) -> "RunSpec":
        raw = json.loads(text)
        if raw.get("version") != SPEC_VERSION:
            raise ValueError(f"run spec version {raw.get('version')!r}; "
                             f"this runner reads {SPEC_VERSION}")
        components = {}
        for cid, c in raw["components"].items():
            components[cid] = ComponentRun(
                kind=c["kind"], script=c["script"], parallelism=c["parallelism"],
                inputs=tuple(InputSpec(i["component"], i["stream"], i["grouping"],
                                       tuple(i["fields"])) for i in c["inputs"]),
                streams={sid: tuple((f, t) for f, t in pairs)
                         for sid, pairs in c["streams"].items()},
                stateful=c["stateful"], conf=c["conf"])
        return cls(topology_id=raw["topology_id"], name=raw["name"], conf=raw["conf"],
                   components=components, run=raw.get("run", {}))

    def write(self, path: Path) -> None:
        """Write atomically (a reader never sees half a spec)."""
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(self.to_json())
        os.replace(tmp, path)

    @classmethod
    def read(cls, path: Path) -> "RunSpec":
        return cls.from_json(path.read_text())


def from_plan(topology_id: str, name: str, plan: Any,
              executors: dict[str, int] | None = None,
              run: dict[str, Any] | None = None) -> RunSpec:
    """Build a run spec from a validated ``TopologyPlan``.

    ``executors`` overrides each component's parallelism (a rebalance); a component's
    parallelism is its executor count, since one Spark task runs one partition.
    """
    components = {}
    for cid, comp in plan.components.items():
        typed = comp.conf.get(FIELDS_KEY) or {}
        streams = {}
        for sid, names in comp.streams.items():
            declared = {f: t for f, t in typed.get(sid, [])}
            streams[sid] = tuple((f, declared.get(f, "object")) for f in names)
        components[cid] = ComponentRun(
            kind=comp.kind, script=comp.script,
            parallelism=(executors or {}).get(cid, comp.executors),
            inputs=tuple(InputSpec(i.component, i.stream, i.grouping, tuple(i.fields))
                         for i in comp.inputs),
            streams=streams, stateful=bool(comp.conf.get(STATEFUL_KEY)), conf=comp.conf)
    return RunSpec(topology_id=topology_id, name=name, conf=dict(plan.conf),
                   components=components, run=dict(run or {}))
