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
import unicodedata
from dataclasses import dataclass
from typing import Any, Callable

from .code import CodeArchive, CodeError

#: Storm's rule (``^[^/.:\\]+$``): names become file and ZooKeeper path segments.
NAME_PATTERN = re.compile(r"^[^/.:\\]+$")
#: The longest file name Linux file systems (ext4, xfs, btrfs, tmpfs) accept, in bytes.
MAX_FILE_NAME_BYTES = 255
#: The longest suffix the daemon appends to a name to make the topology id
#: ``<name>-<counter>-<epoch>``, which becomes the work directory's name: "-", the
#: counter (an SQLite INTEGER, at most 2**63-1: 19 digits), "-", the submit time in
#: whole seconds (11 digits until the year 5138).
ID_SUFFIX_MAX_BYTES = 1 + 19 + 1 + 11
#: So a name is at most 223 bytes of UTF-8: its id always fits a file name.
MAX_NAME_BYTES = MAX_FILE_NAME_BYTES - ID_SUFFIX_MAX_BYTES
#: Unicode categories no name or component id may contain: control (Cc: C0, DEL, C1
#: including U+0085 NEXT LINE), format (Cf: bidi overrides such as U+202E, zero-width
#: characters), surrogates (Cs: not encodable as UTF-8, so not a file name) and line and
#: paragraph separators (Zl, Zp). Each can break or spoof a line of CLI output or a log.
FORBIDDEN_CATEGORIES = {"Cc": "a control character", "Cf": "a format character",
                        "Cs": "a surrogate", "Zl": "a line separator",
                        "Zp": "a paragraph separator"}
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


# Numbers bounded where they enter. Every count below ends up in an IDL i32 (num_workers,
# num_tasks, num_executors, task ids) or drives a loop (task_ranges, one ExecutorSummary
# per executor in getTopologyInfo), so a value a client sends must stay Storm-sized.

#: Java's Integer.MAX_VALUE: the largest value of an IDL i32 (and of Storm's own reads).
I32_MAX = 2**31 - 1
#: Executors of a whole topology: task_ranges and getTopologyInfo loop over them, and
#: each ExecutorSummary with a bolt's stats encodes to ~400 bytes (measured), so 2048 of
#: them (~820 KB) still fit the 1 MiB frames Storm's clients read
#: (nimbus.thrift.max_buffer_size). Large Storm topologies run hundreds of executors.
MAX_EXECUTORS_PER_TOPOLOGY = 2048
#: Executors of one component (parallelism_hint): one component may use them all.
MAX_EXECUTORS_PER_COMPONENT = MAX_EXECUTORS_PER_TOPOLOGY
#: topology.workers: a worker without an executor runs nothing, so more workers than
#: the executor limit could never be used (one Spark executor per worker).
MAX_WORKERS = MAX_EXECUTORS_PER_TOPOLOGY
#: topology.tasks of one component: Storm users set tasks above executors to leave room
#: for rebalancing up; 16 times the executor limit is that room.
MAX_TASKS_PER_COMPONENT = 16 * MAX_EXECUTORS_PER_COMPONENT
#: Tasks of a whole topology: their ids are i32s (ExecutorInfo) and their sum is
#: TopologySummary.num_tasks; far below I32_MAX so no sum can overflow.
MAX_TASKS_PER_TOPOLOGY = 1 << 20
#: topology.message.timeout.secs: the default wait of kill and rebalance (KillOptions'
#: wait_secs is an i32); a day is longer than any tuple may sensibly stay in flight.
MAX_MESSAGE_TIMEOUT_SECS = 86_400
#: topology.max.spout.pending: offsets per spout task per micro-batch; 100 times the
#: runner's default batch (runner/plan.py DEFAULT_MAX_BATCH), beyond which a batch only
#: grows the driver's memory.
MAX_SPOUT_PENDING = 10_000_000

#: The upper bound of each integer conf key, and its unit (shown in the refusal).
CONF_MAXIMA: dict[str, tuple[int, str]] = {
    "topology.workers": (MAX_WORKERS, "workers"),
    "topology.message.timeout.secs": (MAX_MESSAGE_TIMEOUT_SECS, "seconds"),
    "topology.max.spout.pending": (MAX_SPOUT_PENDING, "offsets per spout task and batch"),
    # A cap, so any value up to an i32 is harmless; Storm reads it as a Java int.
    "topology.max.task.parallelism": (I32_MAX, "(the largest i32)"),
    "topology.tasks": (MAX_TASKS_PER_COMPONENT, "tasks per component"),
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


def check_count(what: str, value: int, limit: int, unit: str) -> None:
    """Refuse ``value`` above ``limit``, in a sentence naming both (``what`` names the
    key or field: "topology.workers", "spout 's' parallelism_hint")."""
    if value > limit:
        raise InvalidTopology(f"{what} is {value}; the limit is {limit} {unit}")


def check_conf_numbers(conf: dict[str, Any], what: str) -> None:
    """Check the bounded integer keys of a parsed conf (see :data:`CONF_MAXIMA`)."""
    for key, (limit, unit) in CONF_MAXIMA.items():
        value = conf.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            check_count(f"{what}: {key}", value, limit, unit)


def forbidden_character(text: str) -> str | None:
    """Describe the first character of ``text`` no name may contain, or None:
    ``U+202E (RIGHT-TO-LEFT OVERRIDE, a format character)``."""
    for char in text:
        category = unicodedata.category(char)
        if category in FORBIDDEN_CATEGORIES:
            label = unicodedata.name(char, "")
            label = f"{label}, " if label else ""
            return f"U+{ord(char):04X} ({label}{FORBIDDEN_CATEGORIES[category]})"
    return None


def check_name(name: Any) -> str:
    """Return ``name`` if it is a valid topology name.

    Raises:
        InvalidTopology: empty; over :data:`MAX_NAME_BYTES` bytes of UTF-8 (its id
            becomes a directory name); containing ``/ . : \\``; or containing a
            control, format, surrogate or separator character (named by code point).
    """
    if not isinstance(name, str) or not name.strip():
        raise InvalidTopology("topology name must not be empty")
    bad = forbidden_character(name)
    if bad is not None:
        # repr() escapes what is not printable, so the sentence itself cannot spoof.
        raise InvalidTopology(f"topology name {name!r} contains {bad}; control, format "
                              "and line or paragraph separator characters are not allowed")
    size = len(name.encode("utf-8"))
    if size > MAX_NAME_BYTES:
        raise InvalidTopology(
            f"topology name is {size} bytes of UTF-8; the limit is {MAX_NAME_BYTES} "
            f"(its id, the name and up to {ID_SUFFIX_MAX_BYTES} bytes of "
            f"-<counter>-<epoch>, names a directory: at most {MAX_FILE_NAME_BYTES} bytes)")
    if not NAME_PATTERN.match(name):
        raise InvalidTopology(f"topology name {name!r} contains one of / . : \\ "
                              "(not allowed, as in Storm)")
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
    check_conf_numbers(conf, what)
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
    # Again here: a stored conf (re-planned at launch) never went through parse_conf.
    check_conf_numbers(merged, "the topology configuration")
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
        if not isinstance(hint, int) or isinstance(hint, bool) or hint <= 0:
            raise InvalidTopology(f"{kind} {cid!r} has parallelism_hint {hint!r}; "
                                  "it must be at least 1")
        check_count(f"{kind} {cid!r} parallelism_hint", hint, MAX_EXECUTORS_PER_COMPONENT,
                    "executors per component")
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
    total_executors = sum(c.executors for c in components.values())
    check_count("the topology's executors (the sum over its components)", total_executors,
                MAX_EXECUTORS_PER_TOPOLOGY, "executors per topology")
    total_tasks = sum(c.tasks for c in components.values())
    check_count("the topology's tasks (the sum over its components)", total_tasks,
                MAX_TASKS_PER_TOPOLOGY, "tasks per topology")
    _check_acyclic(components)
    return TopologyPlan(components, merged, merged["topology.workers"])


def _check_id(cid: Any, kind: str) -> None:
    if not isinstance(cid, str) or not cid:
        raise InvalidTopology(f"a {kind} has an empty id")
    if cid.startswith(RESERVED_PREFIX):
        raise InvalidTopology(f"{kind} id {cid!r} starts with {RESERVED_PREFIX!r}, "
                              "which is reserved for system components")
    bad = forbidden_character(cid)
    if bad is not None:
        raise InvalidTopology(f"{kind} id {cid!r} contains {bad}; control, format and "
                              "line or paragraph separator characters are not allowed")


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

    Raises:
        InvalidTopology: more than :data:`MAX_EXECUTORS_PER_TOPOLOGY` executors (a row
            stored before the limits existed): the loop must never run billions of times.
    """
    total = sum(max(1, min(executors.get(cid, 1), count)) for cid, count in tasks.items())
    check_count("the topology's executors", total, MAX_EXECUTORS_PER_TOPOLOGY,
                "executors per topology")
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

