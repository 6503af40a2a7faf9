"""The topology class: component specs as attributes, built into the IDL's StormTopology.

::

    class WordCount(Topology):
        sentences = SentenceSpout.spec(par=2)
        split = SplitBolt.spec(inputs={sentences: Grouping.shuffle}, par=2)
        count = CountBolt.spec(inputs={split: Grouping.fields("word")}, par=2)

Component ids are the attribute names (or ``name=``). Mistakes are found when the
class is defined and raise :class:`TopologyError` naming the component.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar, Mapping

from .components import ComponentSpec
from .grouping import GroupingSpec
from .streams import FIELDS_KEY, STATEFUL_KEY, StreamDecl, TopologyError

#: A ShellComponent's execution command for Python components (what the runner runs).
EXECUTION_COMMAND = "python"


class TopologyMeta(type):
    """Collects the ComponentSpec attributes of a Topology class and checks them."""

    def __new__(mcs, name: str, bases: tuple[type, ...], namespace: dict[str, Any]):
        cls = super().__new__(mcs, name, bases, namespace)
        specs: dict[str, ComponentSpec] = {}
        for base in reversed(cls.__mro__[1:]):
            specs.update(getattr(base, "_specs", {}))
        for attr, value in namespace.items():
            if isinstance(value, ComponentSpec):
                if value.name is None:
                    value.name = attr
                specs[value.name] = value
        setattr(cls, "_specs", specs)
        if specs:
            _check(name, specs)
        return cls


class Topology(metaclass=TopologyMeta):
    """Subclass with component specs as class attributes (see the module docstring).

    ``config`` holds topology configuration defaults (Storm's ``topology.*`` keys, and
    ``spark.*`` keys passed to the topology's Spark application).
    """

    _specs: ClassVar[dict[str, ComponentSpec]] = {}
    config: ClassVar[Mapping[str, Any]] = {}

    @classmethod
    def specs(cls) -> dict[str, ComponentSpec]:
        """The components by id."""
        return dict(cls._specs)

    @classmethod
    def to_thrift(cls, idl: Any = None) -> Any:
        """Build the IDL's ``StormTopology`` (of ``idl``, the thriftpy2 module of
        ``nimbus.thrift`` by default).

        Each component becomes a ShellComponent ``python`` / ``module.Class``; its
        field types and statefulness travel in its json_conf.
        """
        if idl is None:
            from ..idl import nimbus_idl
            idl = nimbus_idl()
        if not cls._specs:
            raise TopologyError(f"topology {cls.__name__} has no components")
        spouts, bolts = {}, {}
        for cid, spec in cls._specs.items():
            common = idl.ComponentCommon(
                inputs={idl.GlobalStreamId(componentId=ref.spec.name, streamId=ref.stream):
                        _grouping(idl, grouping) for ref, grouping in spec.inputs},
                streams={sid: idl.StreamInfo(output_fields=list(decl.field_names),
                                             direct=False)
                         for sid, decl in spec.streams.items()},
                parallelism_hint=spec.par,
                json_conf=json.dumps(_component_conf(spec), sort_keys=True))
            obj = idl.ComponentObject(shell=idl.ShellComponent(
                execution_command=EXECUTION_COMMAND, script=script_of(spec.cls)))
            if spec.is_spout:
                spouts[cid] = idl.SpoutSpec(spout_object=obj, common=common)
            else:
                bolts[cid] = idl.Bolt(bolt_object=obj, common=common)
        return idl.StormTopology(spouts=spouts, bolts=bolts, state_spouts={})


def script_of(component: type) -> str:
    """``module.Class`` of a component class, as the runner imports it."""
    return f"{component.__module__}.{component.__qualname__}"


def _component_conf(spec: ComponentSpec) -> dict[str, Any]:
    conf = dict(spec.config)
    conf[FIELDS_KEY] = {sid: [list(pair) for pair in decl.fields]
                        for sid, decl in spec.streams.items()}
    if spec.is_stateful:
        conf[STATEFUL_KEY] = True
    return conf


def _grouping(idl: Any, grouping: GroupingSpec) -> Any:
    if grouping.kind == "fields":
        return idl.Grouping(fields=list(grouping.fields))
    if grouping.kind == "global":
        return idl.Grouping(fields=[])       # Storm's encoding of global grouping
    return idl.Grouping(**{grouping.kind: idl.NullStruct()})


def _check(topology: str, specs: dict[str, ComponentSpec]) -> None:
    known = {id(spec): cid for cid, spec in specs.items()}
    stateful_par: dict[str, int] = {}
    for cid, spec in specs.items():
        if "." in cid or ":" in cid or "/" in cid or cid.startswith("__"):
            raise TopologyError(f"{topology}.{cid}: component ids may not contain . : / "
                                "or start with '__'")
        where = f"{topology}.{cid} ({spec.cls.__name__})"
        if not spec.is_spout and not spec.inputs:
            raise TopologyError(f"{where}: a bolt needs at least one input")
        for ref, grouping in spec.inputs:
            if id(ref.spec) not in known:
                raise TopologyError(f"{where}: an input is a component spec that is not "
                                    f"an attribute of {topology}")
            source = known[id(ref.spec)]
            decl: StreamDecl | None = ref.spec.streams.get(ref.stream)
            if decl is None:
                raise TopologyError(
                    f"{where}: input {source!r} has no stream {ref.stream!r} (it declares: "
                    f"{', '.join(ref.spec.streams) or 'none'})")
            for name in grouping.fields:
                if name not in decl.field_names:
                    raise TopologyError(
                        f"{where}: groups {source}:{ref.stream} by field {name!r}, which "
                        f"it does not declare (its fields: "
                        f"{', '.join(decl.field_names) or 'none'})")
            if spec.is_stateful and grouping.kind != "fields":
                raise TopologyError(
                    f"{where}: a StatefulBolt keys its state by its fields grouping; input "
                    f"{source!r} uses {grouping!r}")
        if spec.is_stateful:
            widths = {len(g.fields) for _, g in spec.inputs}
            if len(widths) != 1:
                raise TopologyError(f"{where}: every input of a StatefulBolt must group by "
                                    "the same number of fields (they form one key)")
            stateful_par[cid] = spec.par
    if len(set(stateful_par.values())) > 1:
        listed = ", ".join(f"{c!r} (par {p})" for c, p in sorted(stateful_par.items()))
        raise TopologyError(f"{topology}: stateful bolts {listed} must have the same "
                            "parallelism: Spark keeps keyed state in one partition count "
                            "per application")
