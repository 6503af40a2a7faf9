"""What a user subclasses: :class:`Spout`, :class:`Bolt` and :class:`StatefulBolt`.

A topology runs as Spark Structured Streaming (see :mod:`nimbus_thrift.runner`), so the
contract differs from Storm's in the places where micro-batches replace per-tuple acks:

- A **spout** is a replayable, offset-addressed sequence per task (a Spark partition).
  The runner asks the driver-side instances how far each task's sequence reaches
  (:meth:`Spout.available`), plans a batch of offsets, and executors call
  :meth:`Spout.read` for exactly that range; a replayed batch reads the same range
  again, so ``read`` must be deterministic for a given range. :meth:`Spout.ack` says a
  range is done for good (Storm's ack, per batch).
- A **bolt** gets each tuple through :meth:`Bolt.process` and returns (or yields) the
  tuples it emits on its default stream; :meth:`Component.emit` emits on any declared
  stream, and :meth:`Component.emit_columns` emits many tuples at once as columns
  (numpy arrays, lists, pyarrow Arrays or a pandas DataFrame). A bolt instance lives
  for one partition of one micro-batch at a time (Spark reuses Python workers, not
  tasks), so anything that must outlive a batch belongs in keyed state:
  :class:`StatefulBolt`.
- A **stateful bolt** keeps one value per key (the fields of its fields grouping) in
  Spark's checkpointed state store; it survives restarts and replays exactly once.

Sinks see ``self.context.batch_id``: a replayed batch has the same id, so a sink that
writes idempotently per batch id is exactly-once end to end.

:class:`ComponentSpec`, what :meth:`Component.spec` makes, is one component in a
topology; it lives here, next to the classes it checks, so that :mod:`.topology`
imports this module and not the other way round.

Nothing here imports PySpark: user code and the daemon import this module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Iterable, Mapping, Sequence

from .grouping import Grouping, GroupingSpec
from .streams import DEFAULT_STREAM, StreamDecl, TopologyError, declare_streams

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class Context:
    """Where a component instance runs; the runner fills it in.

    ``task`` is the instance's index among the component's ``parallelism`` tasks (its
    Spark partition); ``batch_id`` is the micro-batch being processed (``None`` in the
    driver-side spout instances and outside a batch).
    """

    topology: str
    component: str
    task: int
    parallelism: int
    batch_id: int | None = None
    conf: dict[str, Any] = field(default_factory=dict)


class Component:
    """Base of spouts and bolts.

    Class attributes a subclass sets:

    ``outputs``
        The streams it emits. A list of field names (``["word"]``) or a mapping of
        field name to type (``{"word": str, "count": int}``) declares the default
        stream; a list of :class:`~nimbus_thrift.topology.Stream` declares named
        streams. Types are ``str``, ``int``, ``float``, ``bool``, ``bytes`` and
        ``object`` (any picklable value; the default for a bare field name). Typed
        fields travel as Arrow columns, which is much faster than ``object``.
    ``config``
        Defaults for the component's configuration (its Storm ``json_conf``); the
        topology's spec may override them.
    """

    outputs: ClassVar[Any] = ()
    config: ClassVar[Mapping[str, Any]] = {}

    #: Filled in by the runner before :meth:`initialize`.
    context: Context
    #: Emitted by :meth:`emit` (a tuple) and :meth:`emit_columns` (an
    #: :class:`EmittedColumns`), in order; drained by the runner after each call.
    _emitted: list[tuple[str, Any]]

    @classmethod
    def streams(cls) -> dict[str, StreamDecl]:
        """The declared streams, by id (checked: raises ``TopologyError`` if malformed)."""
        return declare_streams(cls.__name__, cls.outputs)

    @classmethod
    def spec(cls, *, name: str | None = None, inputs: Any = None, par: int = 1,
             config: Mapping[str, Any] | None = None) -> "ComponentSpec":
        """Use this component in a :class:`~nimbus_thrift.topology.Topology`.

        Args:
            name: component id; defaults to the attribute name in the topology class.
            inputs: bolts only: a mapping of upstream spec (or ``spec["stream"]``) to
                grouping, or a list of upstream specs (shuffle grouping).
            par: parallelism: the number of tasks (Spark partitions) it runs as.
            config: component configuration, over the class's ``config``.
        """
        return ComponentSpec(cls, name=name, inputs=inputs, par=par, config=config)

    def initialize(self, conf: dict[str, Any], context: Context) -> None:
        """Called once per instance before any other method; override to set up."""

    def emit(self, values: Sequence[Any], stream: str = DEFAULT_STREAM) -> None:
        """Emit ``values`` on ``stream`` (for bolts, in addition to what
        :meth:`Bolt.process` returns)."""
        self._emitted.append((stream, tuple(values)))

    def emit_columns(self, columns: "Mapping[str, Any] | pd.DataFrame",
                     stream: str = DEFAULT_STREAM) -> None:
        """Emit many tuples on ``stream`` at once, as columns: no Python object per tuple.

        ``emit_columns({"word": words, "count": np.arange(1, n + 1)})`` emits the same
        tuples as ``emit((words[i], i + 1))`` for each ``i``, in that order, after what
        earlier :meth:`emit` calls emitted. Usable from any method that may emit
        (``process``, ``process_key``, ``end_batch``, a spout's ``read``).

        Args:
            columns: a pandas DataFrame (its index is ignored) or a mapping of field
                name to column. A column is a list, a one-dimensional numpy array, a
                pyarrow Array (or ChunkedArray) or a pandas Series. The fields must be
                exactly the stream's declared fields, and all columns of one length
                (the number of tuples emitted). ``None`` is null, as in tuples.
            stream: a declared stream.

        Values are checked against the declared types as tuples are. A numpy array
        of a matching dtype is checked by its dtype alone and passes without a
        per-value conversion (at most one cast of the whole array): signed or
        unsigned ints for ``int`` (``int64`` as it is), ints or floats for
        ``float``, bools for ``bool``, ``str_``/``bytes_`` arrays for
        ``str``/``bytes``; bools are no numbers, as in tuples. An Arrow array is
        checked by its type the same way. Lists and object arrays are checked value
        by value, in C. ``object`` fields are pickled value by value, as in tuples.
        For one tuple, :meth:`emit` is cheaper.

        The columns are read after the method returns (for :meth:`Bolt.process`, at
        the end of the input batch), so do not change them after emitting. Wrong
        fields, lengths or types fail the topology with an error naming the
        component, the stream and the field (``UserCodeError``).
        """
        self._emitted.append((stream, EmittedColumns(columns)))


class EmittedColumns:
    """What :meth:`Component.emit_columns` was given, told apart from an emitted tuple
    by its type (the runner checks and converts it)."""

    __slots__ = ("data",)

    def __init__(self, data: Any):
        self.data = data


class Spout(Component):
    """A replayable source of tuples, one offset sequence per task.

    Override :meth:`available` and :meth:`read`; :meth:`ack` is optional.
    ``available`` and ``ack`` run in the driver (one instance per task); ``read`` runs
    in executors, in other instances, so it must depend only on its arguments, the
    configuration and the context.
    """

    def available(self) -> int | None:
        """The end (exclusive) of this task's offsets available now.

        Must never decrease. A finite spout returns its total; ``None`` means nothing
        is available yet. The runner reads at most ``topology.max.spout.pending``
        offsets per task per batch.
        """
        raise NotImplementedError(f"{type(self).__name__} must define available()")

    def read(self, start: int, end: int) -> Iterable[Sequence[Any]]:
        """The tuples at offsets ``start`` to ``end - 1`` of this task, default stream
        (or use :meth:`emit` for named streams). Same range, same tuples."""
        raise NotImplementedError(f"{type(self).__name__} must define read()")

    def ack(self, end: int) -> None:
        """Offsets below ``end`` are processed for good (their batch committed)."""


class Bolt(Component):
    """Processes tuples one at a time. Override :meth:`process`."""

    def process(self, tup: Any) -> Iterable[Sequence[Any]] | None:
        """Handle one input tuple; return or yield the default stream's tuples.

        ``tup`` is a named tuple of its stream's fields (``tup.word`` or ``tup[0]``),
        with ``tup.component`` and ``tup.stream`` saying where it came from. Tuples
        only: to emit columns, call :meth:`emit_columns`.
        """
        raise NotImplementedError(f"{type(self).__name__} must define process()")

    def end_batch(self, batch_id: int) -> None:
        """Called after this instance's last tuple of a micro-batch: flush a sink here.
        A replayed batch repeats its id: write idempotently per ``batch_id``."""


class KeyState:
    """The state of one key of a :class:`StatefulBolt`: ``value`` reads and writes it.

    Values are pickled into Spark's state store between batches, so keep them
    picklable and small (a count, a window as a deque, a dict of aggregates).
    """

    __slots__ = ("key", "value", "removed")

    def __init__(self, key: tuple[Any, ...], value: Any):
        self.key = key
        self.value = value
        self.removed = False

    def remove(self) -> None:
        """Drop this key's state; a later tuple of the key starts from ``initial_state``."""
        self.removed = True


class StatefulBolt(Bolt):
    """A bolt with one state value per key, kept by Spark across batches and restarts.

    Its input must use fields grouping; the grouping's fields are the key. The state
    partition count is fixed when the topology first starts (Spark pins it in the
    checkpoint), so a rebalance cannot change this bolt's parallelism.
    :meth:`end_batch` is not called: Spark's stateful operator has no end-of-partition
    hook.
    """

    def initial_state(self, key: tuple[Any, ...]) -> Any:
        """The value of a key seen for the first time (default ``None``)."""
        return None

    def process(self, tup: Any, state: KeyState) -> Iterable[Sequence[Any]] | None:  # type: ignore[override]
        """Handle one tuple of ``state.key``; read and assign ``state.value``."""
        raise NotImplementedError(f"{type(self).__name__} must define process()")

    def process_key(self, tuples: Sequence[Any], state: KeyState
                    ) -> "Iterable[Sequence[Any]] | Mapping[str, Any] | pd.DataFrame | None":
        """Handle all tuples of ``state.key`` in this micro-batch (in arrival order).

        The default calls :meth:`process` for each. Override it to handle them at once
        (``state.value += len(tuples)``): one Python call per key instead of one per
        tuple, which is what makes a counting bolt as fast as hand-written Spark code.
        After a ``state.remove()``, the next tuple starts from :meth:`initial_state`;
        the state is dropped if ``state.removed`` is still set at the end.

        Return the default stream's tuples, or its **columns**: a pandas DataFrame or
        a mapping of field name to list, numpy array, pyarrow Array or pandas Series,
        as :meth:`Component.emit_columns` takes them. Columns make no Python object per
        tuple, so a key with many tuples costs little more than one with a few::

            def process_key(self, tuples, state):
                first, n = state.value, len(tuples)
                state.value += n
                return {"word": [state.key[0]] * n,
                        "count": np.arange(first + 1, first + n + 1)}

        ``len(tuples)`` and ``state.key`` do not make the tuples; reading one
        (``tuples[0]``) makes all of them.
        """
        emitted: list[Sequence[Any]] = []
        extend, process = emitted.extend, self.process
        for tup in tuples:
            if state.removed:           # by the tuple before: this one starts afresh
                state.removed = False
                state.value = self.initial_state(state.key)
            result = process(tup, state)
            if result is not None:
                extend(result)
        return emitted


# -- a component in a topology ---------------------------------------------------------

@dataclass(frozen=True)
class StreamRef:
    """``spec["stream"]``: a named stream of an upstream component."""

    spec: "ComponentSpec"
    stream: str


class ComponentSpec:
    """One component in a topology: its class, inputs, parallelism and configuration."""

    def __init__(self, cls: type, *, name: str | None, inputs: Any, par: int,
                 config: Mapping[str, Any] | None):
        label = name or cls.__name__
        if not isinstance(cls, type) or not issubclass(cls, (Spout, Bolt)):
            raise TopologyError(f"{label}: {cls!r} is neither a Spout nor a Bolt subclass")
        if not isinstance(par, int) or isinstance(par, bool) or par < 1:
            raise TopologyError(f"{label}: par must be a positive integer, not {par!r}")
        if issubclass(cls, Spout) and inputs:
            raise TopologyError(f"{label}: spouts take no inputs")
        if config is not None and not isinstance(config, Mapping):
            raise TopologyError(f"{label}: config must be a mapping")
        self.cls = cls
        self.name = name
        self.par = par
        self.config = {**cls.config, **(config or {})}
        self.inputs = _normalise_inputs(label, inputs)
        self.streams = cls.streams()

    @property
    def is_spout(self) -> bool:
        return issubclass(self.cls, Spout)

    @property
    def is_stateful(self) -> bool:
        return issubclass(self.cls, StatefulBolt)

    def __getitem__(self, stream: str) -> StreamRef:
        return StreamRef(self, stream)

    def __repr__(self) -> str:
        return f"<{self.cls.__name__} spec {self.name or '(unnamed)'} par={self.par}>"


def _normalise_inputs(label: str, inputs: Any) -> list[tuple[StreamRef, GroupingSpec]]:
    if inputs is None:
        return []
    if isinstance(inputs, (ComponentSpec, StreamRef)):
        inputs = [inputs]
    if isinstance(inputs, Mapping):
        items = list(inputs.items())
    elif isinstance(inputs, (list, tuple)):
        items = [(source, Grouping.shuffle) for source in inputs]
    else:
        raise TopologyError(f"{label}: inputs must be a mapping of upstream component to "
                            f"grouping, or a list of upstream components")
    result = []
    for source, grouping in items:
        if isinstance(source, ComponentSpec):
            source = StreamRef(source, DEFAULT_STREAM)
        if not isinstance(source, StreamRef):
            raise TopologyError(f"{label}: input {source!r} is not a component spec "
                                "(use the attribute holding Upstream.spec(...))")
        if not isinstance(grouping, GroupingSpec):
            raise TopologyError(f"{label}: the grouping of an input must be one of "
                                f"Grouping.shuffle, Grouping.fields(...), ..., "
                                f"not {grouping!r}")
        result.append((source, grouping))
    return result
