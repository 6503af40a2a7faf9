"""Declared output streams and field types of components.

Storm's ``StreamInfo`` carries field names only; the types travel in the component's
``json_conf`` under :data:`FIELDS_KEY` so the runner can give Spark a schema (typed
fields become Arrow columns; ``object`` fields are pickled).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

DEFAULT_STREAM = "default"
#: json_conf key: ``{stream: [[field, type name], ...]}``.
FIELDS_KEY = "nimbus-thrift.fields"
#: json_conf key: true for a StatefulBolt.
STATEFUL_KEY = "nimbus-thrift.stateful"

#: Field types and their names on the wire (json_conf) and in the runner's schema.
TYPE_NAMES: dict[type, str] = {str: "str", int: "int", float: "float", bool: "bool",
                               bytes: "bytes", object: "object"}
TYPES_BY_NAME = {name: t for t, name in TYPE_NAMES.items()}


class TopologyError(ValueError):
    """A topology definition is wrong; the message names the component at fault."""


@dataclass(frozen=True)
class StreamDecl:
    """One declared stream: its id and ``(field, type name)`` pairs."""

    name: str
    fields: tuple[tuple[str, str], ...]

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.fields)


class Stream:
    """A named stream in a component's ``outputs``: ``Stream("errors", ["line"])``."""

    def __init__(self, name: str, fields: Any):
        self.name = name
        self.fields = fields


def declare_streams(owner: str, outputs: Any) -> dict[str, StreamDecl]:
    """Normalise a component's ``outputs`` (see ``Component``) to declarations.

    Raises:
        TopologyError: a bad field name or type, or a stream declared twice.
    """
    if isinstance(outputs, Stream):
        outputs = [outputs]
    if isinstance(outputs, (list, tuple)) and outputs and \
            all(isinstance(o, Stream) for o in outputs):
        result: dict[str, StreamDecl] = {}
        for stream in outputs:
            if not isinstance(stream.name, str) or not stream.name:
                raise TopologyError(f"{owner}: a stream needs a non-empty name")
            if stream.name in result:
                raise TopologyError(f"{owner}: stream {stream.name!r} is declared twice")
            result[stream.name] = StreamDecl(stream.name, _fields(owner, stream.name,
                                                                  stream.fields))
        return result
    return {DEFAULT_STREAM: StreamDecl(DEFAULT_STREAM, _fields(owner, DEFAULT_STREAM,
                                                                outputs))}


def _fields(owner: str, stream: str, spec: Any) -> tuple[tuple[str, str], ...]:
    where = f"{owner}, stream {stream!r}"
    if isinstance(spec, str):
        raise TopologyError(f"{where}: outputs must be a list of field names, "
                            f"not the string {spec!r}")
    pairs: list[tuple[str, Any]]
    if isinstance(spec, Mapping):
        pairs = list(spec.items())
    elif isinstance(spec, (list, tuple)):
        pairs = [(item, object) if isinstance(item, str) else tuple(item)
                 for item in spec]
    else:
        raise TopologyError(f"{where}: outputs must be a list of field names or a "
                            f"mapping of field name to type, not {type(spec).__name__}")
    seen: set[str] = set()
    result = []
    for pair in pairs:
        if len(pair) != 2:
            raise TopologyError(f"{where}: {pair!r} is not a field name or (name, type)")
        name, ftype = pair
        if not isinstance(name, str) or not name.isidentifier() or name.startswith("_"):
            raise TopologyError(f"{where}: field name {name!r} must be an identifier "
                                "not starting with '_'")
        if name in seen:
            raise TopologyError(f"{where}: field {name!r} is declared twice")
        seen.add(name)
        if isinstance(ftype, str) and ftype in TYPES_BY_NAME:
            ftype = TYPES_BY_NAME[ftype]
        if ftype not in TYPE_NAMES:
            raise TopologyError(f"{where}: field {name!r} has type {ftype!r}; use one of "
                                + ", ".join(TYPE_NAMES.values()))
        result.append((name, TYPE_NAMES[ftype]))
    return tuple(result)
