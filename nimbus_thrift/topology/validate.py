"""Submit-time checks of a topology, as Storm's Nimbus makes them, and then some.

Every check raises :class:`InvalidTopology` with a sentence naming the component,
stream or field at fault; the handler sends it as the IDL's InvalidTopologyException.
Pure functions over the IDL structs: no state, no I/O except reading the code zip's
listing through :class:`~nimbus_thrift.topology.code.CodeArchive`.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Callable

from .code import CodeArchive, CodeError

#: Storm's rule (``^[^/.:\\]+$``): names become file and ZooKeeper path segments.
NAME_PATTERN = re.compile(r"^[^/.:\\]+$")
#: Ours on top: names are shown in tables and logs and become Spark application names.
MAX_NAME_LENGTH = 256
#: Storm reserves ids and streams starting with this for its system components.
RESERVED_PREFIX = "__"
#: The commands a ShellComponent may name: the runner starts the component in Python.
EXECUTION_COMMANDS = frozenset({"python", "python3"})
#: Groupings this daemon can map onto Spark repartitioning (union field names).
SUPPORTED_GROUPINGS = ("fields", "shuffle", "all", "none", "local_or_shuffle")
UNSUPPORTED_GROUPINGS = {
    "direct": "direct grouping needs emitDirect to chosen tasks, which Spark cannot route",
    "custom_object": "custom Java groupings cannot run outside the JVM",
    "custom_serialized": "custom Java groupings cannot run outside the JVM",
}

#: Topology configuration keys the daemon reads, their defaults (Storm's), and checks.
TOPOLOGY_DEFAULTS: dict[str, Any] = {
    "topology.workers": 1,
    "topology.message.timeout.secs": 30,
    "topology.debug": False,
    "topology.max.spout.pending": None,
    "topology.max.task.parallelism": None,
}


class InvalidTopology(ValueError):
    """The submitted topology (or its name, configuration or code) is unusable."""


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


_CONF_CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "topology.workers": (_positive_int, "a positive integer"),
    "topology.message.timeout.secs": (_positive_int, "a positive integer"),
    "topology.debug": (lambda v: isinstance(v, bool), "true or false"),
    "topology.max.spout.pending": (lambda v: v is None or _positive_int(v),
                                   "a positive integer or null"),
    "topology.max.task.parallelism": (lambda v: v is None or _positive_int(v),
                                      "a positive integer or null"),
    "topology.tasks": (lambda v: v is None or _positive_int(v), "a positive integer or null"),
}


def check_name(name: Any) -> str:
    """Return ``name`` if it is a valid topology name.

    Raises:
        InvalidTopology: empty, too long, containing ``/ . : \\`` or control characters.
    """
    if not isinstance(name, str) or not name.strip():
        raise InvalidTopology("topology name must not be empty")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidTopology(f"topology name is {len(name)} characters; "
                              f"the limit is {MAX_NAME_LENGTH}")
    if not NAME_PATTERN.match(name):
        raise InvalidTopology(f"topology name {name!r} contains one of / . : \\ "
                              "(not allowed, as in Storm)")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise InvalidTopology(f"topology name {name!r} contains control characters")
    return name


def parse_conf(text: str | None, what: str) -> dict[str, Any]:
    """Parse a JSON configuration object and check the keys the daemon reads.

    ``what`` names it in errors ("the topology configuration", "component 'split'").

    Raises:
        InvalidTopology: not JSON, not an object, or a known key with a bad value.
    """
    if text is None or text.strip() == "":
        return {}
    try:
        conf = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except (ValueError, RecursionError) as exc:
        raise InvalidTopology(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(conf, dict):
        raise InvalidTopology(f"{what} must be a JSON object, not {type(conf).__name__}")
    for key, (check, expected) in _CONF_CHECKS.items():
        if key in conf and not check(conf[key]):
            raise InvalidTopology(f"{what}: {key} must be {expected}, not {conf[key]!r}")
    return conf


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    # 1e999 is valid JSON but overflows to inf, which json.dumps would send back to
    # clients (getTopologyConf) as the non-JSON token Infinity.
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of the range of a double")
    return value


@dataclass(frozen=True)
class Input:
    """One subscription: this component reads ``component:stream`` with a grouping."""

    component: str
    stream: str
    grouping: str                  # a name from SUPPORTED_GROUPINGS, or "global"
    fields: tuple[str, ...] = ()


@dataclass(frozen=True)
class ComponentPlan:
    """One validated component."""

    kind: str                      # "spout" or "bolt"
    script: str                    # package.module.Class
    executors: int
    tasks: int
    inputs: tuple[Input, ...]
    streams: dict[str, tuple[str, ...]]
    conf: dict[str, Any]


@dataclass(frozen=True)
class TopologyPlan:
    """A topology that passed every check."""

    components: dict[str, ComponentPlan]
    conf: dict[str, Any]           # Storm defaults, overridden by the submitted conf
    num_workers: int

    @property
    def executors(self) -> dict[str, int]:
        return {cid: c.executors for cid, c in self.components.items()}

    @property
    def tasks(self) -> dict[str, int]:
        return {cid: c.tasks for cid, c in self.components.items()}


def check_topology(topology: Any, conf: dict[str, Any], code: CodeArchive | None
                   ) -> TopologyPlan:
    """Check a ``StormTopology`` against the submitted configuration and code.

    Args:
        topology: the IDL struct as decoded.
        conf: the parsed topology configuration (:func:`parse_conf`).
        code: the uploaded code, to resolve each component's script; None skips that.

    Raises:
        InvalidTopology: the first problem found, named.
    """
    merged = {**TOPOLOGY_DEFAULTS, **conf}
    spouts = topology.spouts or {}
    bolts = topology.bolts or {}
    state_spouts = topology.state_spouts or {}
    if state_spouts:
        raise InvalidTopology(f"state spout {sorted(state_spouts)[0]!r}: state spouts are "
                              "not supported (Storm never implemented them either)")
    if not spouts:
        raise InvalidTopology("the topology has no spouts; nothing would ever emit a tuple")
    duplicates = sorted(set(spouts) & set(bolts))
    if duplicates:
        raise InvalidTopology(f"component id {duplicates[0]!r} is used by both a spout and a "
                              "bolt; ids must be unique across the topology")
    cap = merged.get("topology.max.task.parallelism")
    raw: dict[str, tuple[str, Any, Any]] = {}
    for kind, table, obj_field in (("spout", spouts, "spout_object"),
                                   ("bolt", bolts, "bolt_object")):
        for cid, spec in sorted(table.items()):
            _check_id(cid, kind)
            if spec is None or spec.common is None:
                raise InvalidTopology(f"{kind} {cid!r} has no common section")
            raw[cid] = (kind, getattr(spec, obj_field), spec.common)
    streams = {cid: _streams_of(cid, kind, common) for cid, (kind, _, common) in raw.items()}
    components = {}
    for cid, (kind, obj, common) in raw.items():
        script = _script_of(cid, kind, obj, code)
        inputs = _inputs_of(cid, kind, common, streams)
        comp_conf = parse_conf(common.json_conf, f"the json_conf of {kind} {cid!r}")
        hint = common.parallelism_hint
        if hint is None:
            hint = 1
        if hint <= 0:
            raise InvalidTopology(f"{kind} {cid!r} has parallelism_hint {hint}; "
                                  "it must be at least 1")
        # Storm (StormCommon.componentParallelism) reads topology.tasks from the topology
        # conf overridden by the component's, as it does topology.max.task.parallelism.
        tasks = comp_conf.get("topology.tasks") or merged.get("topology.tasks") or hint
        executors = min(hint, tasks)
        component_cap = comp_conf.get("topology.max.task.parallelism") or cap
        if component_cap:
            executors = min(executors, component_cap)
            tasks = min(tasks, component_cap)
        components[cid] = ComponentPlan(kind, script, executors, tasks, inputs,
                                        streams[cid], comp_conf)
    _check_acyclic(components)
    return TopologyPlan(components, merged, merged["topology.workers"])


def _check_id(cid: Any, kind: str) -> None:
    if not isinstance(cid, str) or not cid:
        raise InvalidTopology(f"a {kind} has an empty id")
    if cid.startswith(RESERVED_PREFIX):
        raise InvalidTopology(f"{kind} id {cid!r} starts with {RESERVED_PREFIX!r}, "
                              "which is reserved for system components")
    if any(ord(c) < 32 for c in cid):
        raise InvalidTopology(f"{kind} id {cid!r} contains control characters")


def _streams_of(cid: str, kind: str, common: Any) -> dict[str, tuple[str, ...]]:
    result = {}
    for sid, info in sorted((common.streams or {}).items()):
        if not isinstance(sid, str) or not sid:
            raise InvalidTopology(f"{kind} {cid!r} declares a stream with an empty id")
        if sid.startswith(RESERVED_PREFIX):
            raise InvalidTopology(f"{kind} {cid!r} declares stream {sid!r}; stream ids "
                                  f"starting with {RESERVED_PREFIX!r} are reserved")
        if info is None:
            raise InvalidTopology(f"stream {sid!r} of {kind} {cid!r} has no StreamInfo")
        if info.direct:
            raise InvalidTopology(f"stream {sid!r} of {kind} {cid!r} is direct; "
                                  + UNSUPPORTED_GROUPINGS["direct"])
        fields = tuple(info.output_fields or ())
        seen = set()
        for name in fields:
            if name in seen:
                raise InvalidTopology(f"stream {sid!r} of {kind} {cid!r} declares "
                                      f"field {name!r} twice")
            seen.add(name)
        result[sid] = fields
    return result


def _script_of(cid: str, kind: str, obj: Any, code: CodeArchive | None) -> str:
    if obj is None:
        raise InvalidTopology(f"{kind} {cid!r} has no component object")
    for java in ("serialized_java", "java_object"):
        if getattr(obj, java, None) is not None:
            raise InvalidTopology(
                f"{kind} {cid!r} is a Java component ({java}); this nimbus runs Python "
                "components only: send a ShellComponent with execution_command 'python' "
                "and script 'module.Class'")
    shell = obj.shell
    if shell is None:
        raise InvalidTopology(f"{kind} {cid!r} has an empty component object")
    if shell.execution_command not in EXECUTION_COMMANDS:
        raise InvalidTopology(
            f"{kind} {cid!r} has execution_command {shell.execution_command!r}; "
            f"expected one of {', '.join(sorted(EXECUTION_COMMANDS))}")
    script = shell.script
    if not isinstance(script, str) or not script:
        raise InvalidTopology(f"{kind} {cid!r} has no script (expected 'module.Class')")
    if code is not None:
        try:
            code.resolve(script)
        except CodeError as exc:
            raise InvalidTopology(f"{kind} {cid!r}: {exc}") from None
    return script


def _inputs_of(cid: str, kind: str, common: Any,
               streams: dict[str, dict[str, tuple[str, ...]]]) -> tuple[Input, ...]:
    inputs = common.inputs or {}
    if kind == "spout" and inputs:
        raise InvalidTopology(f"spout {cid!r} has inputs; spouts cannot subscribe to streams")
    # The decoder does not enforce "required": a GlobalStreamId may arrive without its
    # ids, and None would break the sort below with a TypeError instead of a sentence.
    for gsid in inputs:
        if not isinstance(gsid.componentId, str) or not isinstance(gsid.streamId, str):
            raise InvalidTopology(f"bolt {cid!r} has an input without a component id or a "
                                  f"stream id ({gsid.componentId!r}:{gsid.streamId!r})")
    result = []
    for gsid, grouping in sorted(inputs.items(),
                                 key=lambda kv: (kv[0].componentId, kv[0].streamId)):
        source, sid = gsid.componentId, gsid.streamId
        where = f"bolt {cid!r}"
        if source not in streams:
            raise InvalidTopology(f"{where} subscribes to unknown component {source!r}")
        if sid not in streams[source]:
            declared = ", ".join(sorted(streams[source])) or "none"
            raise InvalidTopology(f"{where} subscribes to stream {sid!r} of {source!r}, "
                                  f"which declares only: {declared}")
        result.append(_grouping_of(where, source, sid, grouping, streams[source][sid]))
    return tuple(result)


def _grouping_of(where: str, source: str, sid: str, grouping: Any,
                 output: tuple[str, ...]) -> Input:
    if grouping is None:
        raise InvalidTopology(f"{where} has no grouping for {source}:{sid}")
    chosen = [name for name in (*SUPPORTED_GROUPINGS, *UNSUPPORTED_GROUPINGS)
              if getattr(grouping, name, None) is not None]
    if len(chosen) != 1:
        raise InvalidTopology(f"{where} input {source}:{sid} sets {len(chosen)} groupings; "
                              "a Grouping union sets exactly one")
    name = chosen[0]
    if name in UNSUPPORTED_GROUPINGS:
        raise InvalidTopology(f"{where} input {source}:{sid} uses {name} grouping; "
                              + UNSUPPORTED_GROUPINGS[name])
    if name != "fields":
        return Input(source, sid, name)
    fields = tuple(grouping.fields)
    if not fields:
        return Input(source, sid, "global")
    for field in fields:
        if field not in output:
            raise InvalidTopology(
                f"{where} groups {source}:{sid} by field {field!r}, which is not among its "
                f"output fields: {', '.join(output) or 'none'}")
    return Input(source, sid, "fields", fields)


def _check_acyclic(components: dict[str, ComponentPlan]) -> None:
    # Spark stages form a DAG; Storm allows loops, this daemon cannot run them. Kahn's
    # algorithm (iterative: a long chain must not hit Python's recursion limit); what
    # is left unsorted is on a cycle or downstream of one.
    pending = {cid: {inp.component for inp in c.inputs} for cid, c in components.items()}
    ready = [cid for cid, deps in pending.items() if not deps]
    consumers: dict[str, list[str]] = {}
    for cid, deps in pending.items():
        for dep in deps:
            consumers.setdefault(dep, []).append(cid)
    while ready:
        done = ready.pop()
        for consumer in consumers.get(done, ()):
            pending[consumer].discard(done)
            if not pending[consumer]:
                ready.append(consumer)
        del pending[done]
    # Then the same from the other end, so the message names the components on a cycle
    # and not everything downstream of one (a long chain would make it kilobytes long).
    feeding = {cid: 0 for cid in pending}
    for deps in pending.values():
        for dep in deps:
            feeding[dep] += 1
    sinks = [cid for cid, n in feeding.items() if n == 0]
    while sinks:
        sink = sinks.pop()
        for dep in pending.pop(sink):
            feeding[dep] -= 1
            if feeding[dep] == 0:
                sinks.append(dep)
    if pending:
        raise InvalidTopology("the topology has a cycle through "
                              + ", ".join(repr(c) for c in sorted(pending))
                              + "; Spark runs only acyclic topologies")


def task_ranges(tasks: dict[str, int], executors: dict[str, int]
                ) -> list[tuple[str, int, int]]:
    """Storm's task numbering: ids from 1 over components sorted by id, each
    component's tasks split as evenly as possible among its executors.

    Returns ``(component, first task, last task)`` per executor.
    """
    result = []
    next_task = 1
    for cid in sorted(tasks):
        count, n_exec = tasks[cid], max(1, min(executors.get(cid, 1), tasks[cid]))
        base, extra = divmod(count, n_exec)
        for i in range(n_exec):
            size = base + (1 if i < extra else 0)
            result.append((cid, next_task, next_task + size - 1))
            next_task += size
    return result

