"""Static wire compatibility of idl/nimbus.thrift with Apache Storm 1.x's own storm.thrift.

idl/nimbus.thrift follows Storm 2.x (2.8); Storm 2.x's IDL is on no package registry
this project reaches, so these tests hold it to Storm 1.x's, which is: a client compiled
from Storm 1.x's IDL must be able to call every method both files declare, and read
every reply, including the fields and exceptions 2.x added (which it skips). Storm
1.x's IDL comes from the streamparse 5.0.1 wheel (Storm 1.1), extracted by
scripts/install_interop.sh into tests/interop/storm/storm.thrift; see
tests/interop/storm_idl.py. Tests that need it (or the code generated from it) are marked
``interop`` and FAIL when it is missing.

What is compared, both files loaded with thriftpy2:
  methods     every method both declare: the same ``<method>_args`` and ``<method>_result``
              fields (id, name, type, recursively through containers; structs by name) and
              the same declared exceptions, but for the exceptions 2.x added
              (:data:`STORM2_EXCEPTIONS`); then every struct reachable from them as below.
              The methods only 2.x has are exactly :data:`STORM2_METHODS`
  types       every struct, union, exception and enum we declare: each of our fields that
              Storm 1.x has has the same id, name, type, requiredness and default there;
              each field it lacks is optional (2.x's additions); every field Storm marks
              required exists in ours; enums have the same names and values. The types
              only 2.x has are exactly :data:`STORM2_TYPES`
  bytes       fully populated values encoded by Storm's side (thriftpy2, and Apache Thrift's
              generated code) are decoded by the daemon's own decoder, and what the daemon
              encodes is decoded by Storm's side, field values equal
thriftpy2 folds Thrift's "optional" and default requiredness into one flag; a last test
compares Apache Thrift's own view (``thrift --gen json``), which keeps all three.
"""

from __future__ import annotations

import enum
import json
import shutil
import subprocess
from collections.abc import Callable, Iterator
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import thriftpy2.utils
from thrift.protocol import TBinaryProtocol
from thrift.Thrift import TMessageType
from thrift.transport import TTransport
from thriftpy2.protocol import TBinaryProtocolFactory, TCyBinaryProtocolFactory
from thriftpy2.thrift import TType

from interop.storm_clients import load_generated
from interop.storm_idl import (
    INSTALL_HINT, load_storm, require_storm_idl,
)
from nimbus_thrift import idl
from nimbus_thrift.rpc.codec import binary

interop = pytest.mark.interop

#: Methods Storm 2.x added to Storm 1.1's Nimbus (a 1.x client cannot call them).
#: Written out so that a change on either side is noticed.
STORM2_METHODS = frozenset({
    "getTopologySummaries", "getTopologySummaryByName", "getTopologySummary",
    "getTopologyInfoByName", "getTopologyInfoByNameWithOpts",
    "getOwnerResourceSummaries", "getSupervisorAssignments",
    "sendSupervisorWorkerHeartbeats", "sendSupervisorWorkerHeartbeat",
    "processWorkerMetrics", "isRemoteBlobExists",
})

#: Declared exceptions 2.x added to 1.x methods, by method: result field ids. A 1.x
#: client skips the field, so it reads such a reply as a void success, as it would
#: from a Storm 2.x Nimbus.
STORM2_EXCEPTIONS = {"deleteBlob": {3}}

#: Types only Storm 2.x declares (all reached from 2.x's additions only).
STORM2_TYPES = frozenset({
    "SharedMemory", "IllegalStateException", "OwnerResourceSummary",
    "SupervisorWorkerHeartbeat", "SupervisorWorkerHeartbeats", "SupervisorAssignments",
    "WorkerMetricPoint", "WorkerMetricList", "WorkerMetrics",
})

#: Methods the daemon must serve (submit, lifecycle, code transfer, status).
REQUIRED_METHODS = frozenset({
    "submitTopology", "submitTopologyWithOpts", "killTopology", "killTopologyWithOpts",
    "activate", "deactivate", "rebalance", "beginFileUpload", "uploadChunk",
    "finishFileUpload", "beginFileDownload", "downloadChunk", "getNimbusConf",
    "getClusterInfo", "getTopologyInfo", "getTopologyConf", "getTopology", "getUserTopology",
})

#: Names we declare that Storm (1.x or 2.x) does not (none today: the IDL's header
#: promises Storm's). A deliberate extension goes here, so it is a visible decision.
OURS_ONLY: frozenset[str] = frozenset()

TYPE_KINDS = ("structs", "unions", "exceptions", "enums")


# --------------------------------------------------------------------------- the IDLs

def _ours() -> ModuleType:
    return idl.load("nimbus.thrift")  # module nimbus_idl_thrift; never plain nimbus_thrift


def _kinds(module: ModuleType) -> dict[str, str]:
    """``{type name: "structs" | "unions" | "exceptions" | "enums"}`` of a thriftpy2 module."""
    meta = module.__thrift_meta__
    return {cls.__name__: kind for kind in TYPE_KINDS for cls in meta.get(kind, [])}


OUR_METHODS = list(_ours().Nimbus.thrift_services)
OUR_TYPES = list(_kinds(_ours()))


@pytest.fixture(scope="module")
def ours() -> ModuleType:
    """idl/nimbus.thrift, loaded with thriftpy2 as ``nimbus_idl_thrift``."""
    return _ours()


@pytest.fixture(scope="module")
def storm() -> ModuleType:
    """Storm's storm.thrift, loaded with thriftpy2 as ``storm_idl_thrift``."""
    require_storm_idl()
    return load_storm()


@pytest.fixture(scope="module")
def apache_storm() -> SimpleNamespace:
    """``thrift --gen py`` of Storm's IDL (package ``storm``)."""
    require_storm_idl()
    return load_generated("storm")


@pytest.fixture(scope="module")
def apache_ours() -> SimpleNamespace:
    """``thrift --gen py`` of idl/nimbus.thrift (package ``nimbus``)."""
    return load_generated("nimbus")


# --------------------------------------------------------------------------- specs
# thriftpy2's thrift_spec: {id: (ttype, name, required)} or, for a type with an argument,
# {id: (ttype, name, arg, required)}, where arg is a class (struct or enum), an element
# spec (list, set) or a (key, value) pair of specs (map); an element spec is a bare ttype
# or (ttype, arg).

def _split(spec: Any) -> tuple[int, Any]:
    return (spec, None) if isinstance(spec, int) else (spec[0], spec[1])


def type_sig(ttype: int, arg: Any) -> tuple:
    """A module-independent description of a thriftpy2 type: structs and enums by name,
    containers recursively. BINARY (thriftpy2's own ttype 18) stays distinct from STRING:
    the wire is the same, but a decoder turns one into bytes and the other into str."""
    if ttype == TType.STRUCT:
        return ("struct", arg.__name__)
    if ttype in (TType.LIST, TType.SET):
        return (ttype, type_sig(*_split(arg)))
    if ttype == TType.MAP:
        return (ttype, type_sig(*_split(arg[0])), type_sig(*_split(arg[1])))
    if arg is not None:  # an i32 carrying an enum class
        return ("enum", arg.__name__)
    return (ttype,)


def field_view(entry: tuple) -> tuple[str, tuple, bool]:
    """``(name, type_sig, required)`` of one thrift_spec entry."""
    arg = entry[2] if len(entry) == 4 else None
    return entry[1], type_sig(entry[0], arg), entry[-1]


def fields_of(cls: type) -> dict[int, tuple[str, tuple, bool]]:
    return {fid: field_view(entry) for fid, entry in cls.thrift_spec.items()}


def struct_classes(cls: type) -> Iterator[type]:
    """The struct classes named by ``cls``'s fields, through containers."""
    def walk(ttype: int, arg: Any) -> Iterator[type]:
        if ttype == TType.STRUCT:
            yield arg
        elif ttype in (TType.LIST, TType.SET):
            yield from walk(*_split(arg))
        elif ttype == TType.MAP:
            yield from walk(*_split(arg[0]))
            yield from walk(*_split(arg[1]))
    for entry in cls.thrift_spec.values():
        yield from walk(entry[0], entry[2] if len(entry) == 4 else None)


def reachable(cls: type) -> dict[str, type]:
    """Every struct class reachable from ``cls``'s fields, by name (``cls`` excluded)."""
    seen: dict[str, type] = {}
    todo = list(struct_classes(cls))
    while todo:
        c = todo.pop()
        if c.__name__ not in seen:
            seen[c.__name__] = c
            todo.extend(struct_classes(c))
    return seen


def struct_problems(ours_cls: type, storm_cls: type) -> list[str]:
    """Why a Storm peer and we would disagree about struct ``ours_cls`` (empty: they agree).
    Either side may have optional fields the other lacks (a decoder skips unknown ids):
    we leave out some of Storm 1.x's, and have 2.x's additions; nothing else differs."""
    name = ours_cls.__name__
    problems = []
    mine, theirs = fields_of(ours_cls), fields_of(storm_cls)
    my_defaults, their_defaults = dict(ours_cls.default_spec), dict(storm_cls.default_spec)
    for fid, view in sorted(mine.items()):
        if fid not in theirs:
            if view[2]:
                problems.append(f"{name}: required field {fid} {view} is not in Storm")
        elif view != theirs[fid]:
            problems.append(f"{name}: field {fid} is {view}, Storm has {theirs[fid]}")
        elif my_defaults[view[0]] != their_defaults[view[0]]:
            problems.append(f"{name}.{view[0]}: default {my_defaults[view[0]]!r}, "
                            f"Storm has {their_defaults[view[0]]!r}")
    for fid, view in sorted(theirs.items()):
        if view[2] and fid not in mine:
            problems.append(f"{name}: Storm's required field {fid} {view} is missing")
    return problems


def reachable_problems(ours_cls: type, storm: ModuleType) -> list[str]:
    problems = []
    for name, cls in sorted(reachable(ours_cls).items()):
        storm_cls = getattr(storm, name, None)
        if storm_cls is None:
            if name not in STORM2_TYPES:
                problems.append(f"{name} (used by {ours_cls.__name__}) is not declared "
                                "by Storm")
        else:
            problems.extend(struct_problems(cls, storm_cls))
    return problems


# --------------------------------------------------------------------------- methods

def test_required_methods_are_declared(ours):
    missing = REQUIRED_METHODS - set(ours.Nimbus.thrift_services)
    assert not missing, f"idl/nimbus.thrift lacks required methods {sorted(missing)}"


@interop
def test_every_storm_1x_method_is_declared(ours, storm):
    left_out = set(storm.Nimbus.thrift_services) - set(ours.Nimbus.thrift_services)
    assert not left_out, f"Storm 1.x methods missing: {sorted(left_out)}"


@interop
def test_the_methods_storm_1x_lacks_are_exactly_2x_additions(ours, storm):
    extra = set(ours.Nimbus.thrift_services) - set(storm.Nimbus.thrift_services) - OURS_ONLY
    assert extra == STORM2_METHODS, (
        f"not 2.x's: {sorted(extra - STORM2_METHODS)}; "
        f"missing from ours: {sorted(STORM2_METHODS - extra)}")


def test_the_2x_only_names_are_ours(ours):
    assert STORM2_METHODS <= set(ours.Nimbus.thrift_services)
    assert STORM2_TYPES <= set(_kinds(ours))
    assert all(m in ours.Nimbus.thrift_services for m in STORM2_EXCEPTIONS)


def _without_storm2_exceptions(method: str, fields: dict[int, Any]) -> dict[int, Any]:
    added = STORM2_EXCEPTIONS.get(method, set())
    return {fid: view for fid, view in fields.items() if fid not in added}


@interop
@pytest.mark.parametrize("method", OUR_METHODS)
def test_method_matches_storm(ours, storm, method):
    if method in OURS_ONLY or method in STORM2_METHODS:
        return
    assert method in storm.Nimbus.thrift_services, f"Storm's Nimbus has no {method}"
    problems = []
    for suffix in ("_args", "_result"):
        mine = getattr(ours.Nimbus, method + suffix)
        theirs = getattr(storm.Nimbus, method + suffix)
        my_fields = fields_of(mine)
        if suffix == "_result":
            my_fields = _without_storm2_exceptions(method, my_fields)
        if my_fields != fields_of(theirs):
            problems.append(f"{method}{suffix}: {my_fields} != Storm's {fields_of(theirs)}")
        problems.extend(reachable_problems(mine, storm))
    # Declared exceptions (result fields other than 0, "success"), already in the
    # comparison above; repeated so a failure says so in words.
    exceptions = {
        side: {fid: view for fid, view in _without_storm2_exceptions(
            method, fields_of(getattr(m.Nimbus, method + "_result"))).items() if fid != 0}
        for side, m in (("ours", ours), ("storm", storm))}
    if exceptions["ours"] != exceptions["storm"]:
        problems.append(f"{method} throws {exceptions['ours']}, Storm's {exceptions['storm']}")
    assert not problems, "\n".join(problems)


# --------------------------------------------------------------------------- types

@interop
@pytest.mark.parametrize("name", OUR_TYPES)
def test_type_matches_storm(ours, storm, name):
    if name in OURS_ONLY:
        return
    kind = _kinds(ours)[name]
    storm_kind = _kinds(storm).get(name)
    if name in STORM2_TYPES:
        assert storm_kind is None, f"Storm 1.x declares {name}: take it out of STORM2_TYPES"
        return
    assert storm_kind is not None, f"Storm does not declare {name}"
    assert kind == storm_kind, f"{name} is one of our {kind}, one of Storm's {storm_kind}"
    mine, theirs = getattr(ours, name), getattr(storm, name)
    if kind == "enums":
        assert mine._NAMES_TO_VALUES == theirs._NAMES_TO_VALUES
        return
    problems = struct_problems(mine, theirs) + reachable_problems(mine, storm)
    assert not problems, "\n".join(problems)


# --------------------------------------------------------------------------- values

def plain(value: Any, keep: Callable[[str], set[str] | None] = lambda name: None) -> Any:
    """A hashable, module-independent view of a Thrift value, for comparing values from
    thriftpy2 and Apache-generated classes: a struct is ``(class name, ((field, value),
    ...))`` with unset fields left out; ``keep(class name)`` may restrict the fields kept
    (to those a decoder declares)."""
    cls = type(value)
    spec = getattr(cls, "thrift_spec", None)
    if spec is not None and not isinstance(value, type):
        if isinstance(spec, dict):  # thriftpy2
            names = [entry[1] for _, entry in sorted(spec.items())]
        else:                       # Apache: a tuple indexed by field id, None for gaps
            names = [entry[2] for entry in spec if entry is not None]
        kept = keep(cls.__name__)
        return (cls.__name__, tuple(
            (n, plain(getattr(value, n), keep)) for n in names
            if getattr(value, n, None) is not None and (kept is None or n in kept)))
    if isinstance(value, dict):
        return ("map", frozenset((plain(k, keep), plain(v, keep)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return ("list", tuple(plain(v, keep) for v in value))
    if isinstance(value, (set, frozenset)):
        return ("set", frozenset(plain(v, keep) for v in value))
    if isinstance(value, enum.Enum):
        return value.value
    return value


def declared_by(module: ModuleType) -> Callable[[str], set[str] | None]:
    """``keep`` for :func:`plain`: the fields ``module`` declares for a class name."""
    def keep(name: str) -> set[str] | None:
        cls = getattr(module, name, None) or getattr(module.Nimbus, name)
        return {entry[1] for entry in cls.thrift_spec.values()}
    return keep


def make_topology(m: Any) -> Any:
    """A StormTopology using every grouping kind, every ComponentObject kind, every
    JavaObjectArg kind, json_conf and the optional fields, built from Storm's classes in
    namespace ``m`` (thriftpy2's module or Apache's ``ttypes``)."""
    java = m.JavaObject(full_class_name="org.example.Hook", args_list=[
        m.JavaObjectArg(int_arg=-7), m.JavaObjectArg(long_arg=2**40),
        m.JavaObjectArg(string_arg="s\u00e9\u65e5"), m.JavaObjectArg(bool_arg=True),
        m.JavaObjectArg(binary_arg=b"\x00\xff\x80"), m.JavaObjectArg(double_arg=0.25)])
    groupings = {
        "fields": m.Grouping(fields=["word"]),
        "global": m.Grouping(fields=[]),
        "shuffle": m.Grouping(shuffle=m.NullStruct()),
        "all": m.Grouping(all=m.NullStruct()),
        "none": m.Grouping(none=m.NullStruct()),
        "direct": m.Grouping(direct=m.NullStruct()),
        "custom_object": m.Grouping(custom_object=java),
        "custom_serialized": m.Grouping(custom_serialized=b"\xac\xed\x00\x05grouping"),
        "local_or_shuffle": m.Grouping(local_or_shuffle=m.NullStruct()),
    }
    streams = {"default": m.StreamInfo(output_fields=["word", "count"], direct=False),
               "direct": m.StreamInfo(output_fields=["x"], direct=True)}

    def common(inputs: dict, **kw: Any) -> Any:
        return m.ComponentCommon(inputs=inputs, streams=streams, **kw)

    def shell(script: str) -> Any:
        return m.ComponentObject(shell=m.ShellComponent(execution_command="python",
                                                        script=script))

    subscribe_all = {m.GlobalStreamId(componentId="words", streamId=kind): grouping
                     for kind, grouping in groupings.items()}
    one = {m.GlobalStreamId(componentId="count", streamId="default"): groupings["shuffle"]}
    return m.StormTopology(
        spouts={"words": m.SpoutSpec(spout_object=shell("wordcount.spouts.Words"),
                                     common=common({}, parallelism_hint=2))},
        bolts={
            "count": m.Bolt(bolt_object=shell("wordcount.bolts.Count"),
                            common=common(subscribe_all, parallelism_hint=4,
                                          json_conf='{"topology.debug": true}')),
            "java": m.Bolt(bolt_object=m.ComponentObject(java_object=java),
                           common=common(one, json_conf="{}")),
            "serialized": m.Bolt(
                bolt_object=m.ComponentObject(serialized_java=b"\xac\xed\x00\x05bolt"),
                common=common(one)),
        },
        state_spouts={"state": m.StateSpoutSpec(state_spout_object=shell("x.State"),
                                                common=common({}))},
        worker_hooks=[b"\xac\xed\x00\x05hook", b""],
        # Storm-only (1.1): a decoder of ours skips them.
        dependency_jars=["dep.jar"], dependency_artifacts=["org.example:dep:1.0"],
        storm_version="1.1.0", jdk_version="1.8.0_121")


def make_cluster_summary(m: Any) -> Any:
    """A ClusterSummary with every field set, including Storm-only ones."""
    return m.ClusterSummary(
        supervisors=[m.SupervisorSummary(
            host="worker-1", uptime_secs=10, num_workers=8, num_used_workers=3,
            supervisor_id="sup-1", version="1.1.0", total_resources={"cpu.pcore.percent": 400.0},
            used_mem=512.5, used_cpu=0.5)],
        nimbus_uptime_secs=42,
        topologies=[m.TopologySummary(
            id="wc-1-1700000000", name="wc", num_tasks=9, num_executors=9, num_workers=2,
            uptime_secs=5, status="ACTIVE", sched_status="running", owner="alice",
            replication_count=1, requested_memonheap=768.0, requested_memoffheap=0.0,
            requested_cpu=50.0, assigned_memonheap=768.0, assigned_memoffheap=1.5,
            assigned_cpu=50.0)],
        nimbuses=[m.NimbusSummary(host="nimbus", port=6627, uptime_secs=42, isLeader=True,
                                  version="0.1.0")])


def make_topology_info(m: Any) -> Any:
    """A TopologyInfo with bolt and spout statistics, errors and Storm-only fields."""
    sid = m.GlobalStreamId(componentId="words", streamId="default")
    bolt = m.ExecutorStats(
        emitted={":all-time": {"default": 10}}, transferred={":all-time": {"default": 10}},
        specific=m.ExecutorSpecificStats(bolt=m.BoltStats(
            acked={":all-time": {sid: 9}}, failed={":all-time": {sid: 1}},
            process_ms_avg={":all-time": {sid: 0.5}}, executed={"600": {sid: 10}},
            execute_ms_avg={"600": {sid: 0.25}})),
        rate=1.0)
    spout = m.ExecutorStats(
        emitted={"600": {"default": 3}}, transferred={"600": {"default": 3}},
        specific=m.ExecutorSpecificStats(spout=m.SpoutStats(
            acked={"600": {"default": 2}}, failed={"600": {"default": 1}},
            complete_ms_avg={"600": {"default": 12.5}})),
        rate=0.5)
    return m.TopologyInfo(
        id="wc-1-1700000000", name="wc", uptime_secs=5, status="ACTIVE",
        executors=[
            m.ExecutorSummary(executor_info=m.ExecutorInfo(task_start=1, task_end=1),
                              component_id="count", host="worker-1", port=6700,
                              uptime_secs=5, stats=bolt),
            m.ExecutorSummary(executor_info=m.ExecutorInfo(task_start=2, task_end=3),
                              component_id="words", host="worker-1", port=6700,
                              uptime_secs=5, stats=spout),
            m.ExecutorSummary(executor_info=m.ExecutorInfo(task_start=4, task_end=4),
                              component_id="java", host="worker-1", port=6701, uptime_secs=0),
        ],
        errors={"count": [m.ErrorInfo(error="boom", error_time_secs=1700000001,
                                      host="worker-1", port=6700),
                          m.ErrorInfo(error="again", error_time_secs=1700000002)],
                "words": []},
        component_debug={"count": m.DebugOptions(enable=True, samplingpct=10.0)},
        sched_status="running", owner="alice", replication_count=1,
        requested_memonheap=768.0, requested_memoffheap=0.0, requested_cpu=50.0,
        assigned_memonheap=768.0, assigned_memoffheap=0.0, assigned_cpu=50.0)


VALUES = {"StormTopology": make_topology, "ClusterSummary": make_cluster_summary,
          "TopologyInfo": make_topology_info}

#: thriftpy2's two binary writers: the pure-Python one and the Cython one the daemon uses.
TP2_FACTORIES = {"pure": TBinaryProtocolFactory(), "cython": TCyBinaryProtocolFactory()}


def apache_encode(obj: Any) -> bytes:
    buf = TTransport.TMemoryBuffer()
    obj.write(TBinaryProtocol.TBinaryProtocol(buf))
    return buf.getvalue()


def apache_decode(cls: type, data: bytes) -> Any:
    obj = cls()
    obj.read(TBinaryProtocol.TBinaryProtocol(TTransport.TMemoryBuffer(data)))
    return obj


def ours_decode(cls: type, data: bytes) -> Any:
    """Decode with the daemon's own decoder, which must consume every byte."""
    obj, end = binary.decode_struct(cls, data)
    assert end == len(data)
    return obj


@interop
@pytest.mark.parametrize("factory", list(TP2_FACTORIES))
@pytest.mark.parametrize("name", list(VALUES))
def test_thriftpy2_storm_to_ours_and_back(ours, storm, name, factory):
    proto = TP2_FACTORIES[factory]
    original = VALUES[name](storm)
    decoded = ours_decode(getattr(ours, name), thriftpy2.utils.serialize(original, proto))
    expected = plain(original, declared_by(ours))
    assert plain(decoded) == expected
    again = thriftpy2.utils.deserialize(getattr(storm, name)(),
                                        thriftpy2.utils.serialize(decoded, proto), proto)
    assert plain(again) == expected


@interop
@pytest.mark.parametrize("name", list(VALUES))
def test_apache_storm_value_decoded_by_ours(ours, apache_storm, name):
    original = VALUES[name](apache_storm.ttypes)
    decoded = ours_decode(getattr(ours, name), apache_encode(original))
    assert plain(decoded) == plain(original, declared_by(ours))


@interop
@pytest.mark.parametrize("name", list(VALUES))
def test_apache_storm_value_decoded_by_apache_ours(ours, apache_storm, apache_ours, name):
    """Our IDL through Apache's compiler reads Storm's bytes too (and skips Storm-only
    fields), so a client generated from idl/nimbus.thrift can call a Storm Nimbus."""
    original = VALUES[name](apache_storm.ttypes)
    decoded = apache_decode(getattr(apache_ours.ttypes, name), apache_encode(original))
    assert plain(decoded) == plain(original, declared_by(ours))


@interop
@pytest.mark.parametrize("opts", [False, True], ids=["plain", "with-opts"])
def test_apache_storm_submit_call_decoded_by_ours(ours, apache_storm, opts):
    """The arguments of a submit as a Java/Python Storm client sends them."""
    t = apache_storm.ttypes
    method = "submitTopologyWithOpts" if opts else "submitTopology"
    kw: dict[str, Any] = dict(name="wc", uploadedJarLocation="/uploads/abc.zip",
                              jsonConf='{"topology.workers": 2}', topology=make_topology(t))
    if opts:
        kw["options"] = t.SubmitOptions(initial_status=t.TopologyInitialStatus.INACTIVE,
                                        creds=t.Credentials(creds={"user": "alice"}))
    args = getattr(apache_storm.Nimbus, method + "_args")(**kw)
    decoded = ours_decode(getattr(ours.Nimbus, method + "_args"), apache_encode(args))
    assert plain(decoded) == plain(args, declared_by(ours))


@interop
@pytest.mark.parametrize("method, field, name", [
    ("getClusterInfo", "success", "ClusterSummary"),
    ("getTopologyInfo", "success", "TopologyInfo"),
    ("getUserTopology", "success", "StormTopology"),
    ("getTopologyInfo", "e", "NotAliveException"),
])
def test_ours_reply_decoded_by_apache_storm(ours, storm, apache_storm, method, field, name):
    """A reply as the daemon writes it (binary.encode_message), read as a Storm client
    reads it."""
    if name in VALUES:  # the value the daemon holds: what it decoded from a Storm peer
        value = ours_decode(getattr(ours, name),
                            thriftpy2.utils.serialize(VALUES[name](storm),
                                                      TP2_FACTORIES["cython"]))
    else:
        value = getattr(ours, name)(msg="wc-1 is not alive")
    result = getattr(ours.Nimbus, method + "_result")(**{field: value})
    message = binary.encode_message(method, binary.REPLY, 7, result)

    iprot = TBinaryProtocol.TBinaryProtocol(TTransport.TMemoryBuffer(message))
    assert iprot.readMessageBegin() == (method, TMessageType.REPLY, 7)
    got = getattr(apache_storm.Nimbus, method + "_result")()
    got.read(iprot)
    iprot.readMessageEnd()
    assert plain(got) == plain(result)


# --------------------------------------------------------------------------- Apache's view

@pytest.fixture(scope="module")
def json_idls(tmp_path_factory) -> dict[str, dict]:
    """``thrift --gen json`` of both IDLs: Apache Thrift's own reading, which keeps
    requiredness as "required", "optional" or "req_out" (default)."""
    storm_idl = require_storm_idl()
    if shutil.which("thrift") is None:
        pytest.fail(f"no `thrift` compiler on PATH: {INSTALL_HINT}", pytrace=False)
    out = tmp_path_factory.mktemp("json")
    result = {}
    for side, path in (("ours", idl.idl_path("nimbus.thrift")), ("storm", storm_idl)):
        subprocess.run(["thrift", "--gen", "json", "-out", str(out), str(path)], check=True)
        result[side] = json.loads((out / f"{path.stem}.json").read_text(encoding="utf-8"))
    return result


def nimbus_service(program: dict) -> dict:
    """The Nimbus service of a ``--gen json`` document, without doc comments."""
    service = next(s for s in program["services"] if s["name"] == "Nimbus")
    return without_docs(service)


def without_docs(value: Any) -> Any:
    """``value`` with every "doc" key (a /** */ comment) removed, recursively."""
    if isinstance(value, dict):
        return {k: without_docs(v) for k, v in value.items() if k != "doc"}
    if isinstance(value, list):
        return [without_docs(v) for v in value]
    return value


@interop
def test_apache_compiler_agrees_on_requiredness_and_defaults(json_idls):
    """Field for field (requiredness, type, default), struct kind, and each of our
    methods' arguments, exceptions and return type, as Apache's compiler reads them."""
    problems = []
    storm_structs = {s["name"]: s for s in without_docs(json_idls["storm"]["structs"])}
    for struct in without_docs(json_idls["ours"]["structs"]):
        theirs = storm_structs.get(struct["name"])
        if theirs is None:
            if struct["name"] not in OURS_ONLY | STORM2_TYPES:
                problems.append(f"{struct['name']} is not declared by Storm")
            continue
        for flag in ("isException", "isUnion"):
            if struct[flag] != theirs[flag]:
                problems.append(f"{struct['name']}: {flag} {struct[flag]}, Storm {theirs[flag]}")
        their_fields = {f["key"]: f for f in theirs["fields"]}
        for f in struct["fields"]:
            if f["key"] not in their_fields and f["required"] == "optional":
                continue            # one of 2.x's additions: a 1.x peer skips it
            if f != their_fields.get(f["key"]):
                problems.append(f"{struct['name']}: {f} != Storm's {their_fields.get(f['key'])}")
    storm_functions = {f["name"]: f for f in nimbus_service(json_idls["storm"])["functions"]}
    for function in nimbus_service(json_idls["ours"])["functions"]:
        theirs = storm_functions.get(function["name"])
        added = STORM2_EXCEPTIONS.get(function["name"], set())
        function = {**function, "exceptions": [e for e in function["exceptions"]
                                               if e["key"] not in added]}
        if theirs is not None and function != theirs:
            problems.append(f"{function['name']}: {function} != Storm's {theirs}")
    assert not problems, "\n".join(problems)


# --------------------------------------------------------------------------- 2.x's fields

def make_storm2_cluster_summary(m: Any) -> Any:
    """A ClusterSummary of ours with fields only Storm 2.x declares set as well."""
    return m.ClusterSummary(
        supervisors=[m.SupervisorSummary(
            host="worker-1", uptime_secs=10, num_workers=8, num_used_workers=3,
            supervisor_id="sup-1", version="3.5.1", fragmented_mem=1.5, blacklisted=False,
            used_generic_resources={"gpu": 1.0})],
        nimbus_uptime_secs=42,
        topologies=[m.TopologySummary(
            id="wc-1-1700000000", name="wc", num_tasks=9, num_executors=9, num_workers=2,
            uptime_secs=5, status="ACTIVE", storm_version="2.8.8", topology_version="v1",
            replication_count=1, requested_generic_resources={"gpu": 0.5})],
        nimbuses=[m.NimbusSummary(host="nimbus", port=6627, uptime_secs=42, isLeader=True,
                                  version="2.8.0+nimbus.thrift.0.1.0", tlsPort=6627)])


@interop
@pytest.mark.parametrize("method, make", [
    ("getClusterInfo", make_storm2_cluster_summary),
    ("getTopologyInfo", lambda m: m.TopologyInfo(
        id="wc-1", name="wc", uptime_secs=1, executors=[], status="ACTIVE", errors={},
        component_debug={"count": m.DebugOptions(enable=True, samplingpct=5.0)},
        storm_version="2.8.8", replication_count=1)),
])
def test_storm1_client_reads_a_reply_with_2x_fields(ours, storm, apache_storm, method,
                                                    make):
    """What a Storm 1.x client reads of a reply carrying Storm 2.x's fields: every field
    it declares, equal; the others skipped (and some were on the wire)."""
    value = make(ours)
    result = getattr(ours.Nimbus, method + "_result")(success=value)
    message = binary.encode_message(method, binary.REPLY, 3, result)
    iprot = TBinaryProtocol.TBinaryProtocol(TTransport.TMemoryBuffer(message))
    assert iprot.readMessageBegin() == (method, TMessageType.REPLY, 3)
    got = getattr(apache_storm.Nimbus, method + "_result")()
    got.read(iprot)
    assert plain(got.success) == plain(value, declared_by(storm))
    assert plain(got.success) != plain(value), "no 2.x-only field was sent: tests nothing"
