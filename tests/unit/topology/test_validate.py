"""Submit-time checks (nimbus_thrift.topology.validate): names, configurations, topologies
and Storm's task numbering, over IDL structs built in memory (no server, no I/O except
the code zips in tmp_path)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from support.nimbus import N, common, fields, make_zip, shell, shuffle, wordcount
from nimbus_thrift.topology.code import CodeArchive
from nimbus_thrift.topology.validate import (I32_MAX, ID_SUFFIX_MAX_BYTES,
                                             MAX_EXECUTORS_PER_COMPONENT,
                                             MAX_EXECUTORS_PER_TOPOLOGY,
                                             MAX_MESSAGE_TIMEOUT_SECS, MAX_NAME_BYTES,
                                             MAX_SPOUT_PENDING, MAX_TASKS_PER_COMPONENT,
                                             MAX_TASKS_PER_TOPOLOGY, MAX_WORKERS,
                                             TOPOLOGY_DEFAULTS, Input, InvalidTopology,
                                             check_name, check_topology, parse_conf,
                                             task_ranges)


def spout(script: str = "m.S", streams: dict[str, list[str]] | None = None,
          par: int | None = 1, json_conf: str | None = None, obj: Any = None) -> Any:
    return N.SpoutSpec(spout_object=obj if obj is not None else shell(script),
                       common=common(streams=streams, par=par, json_conf=json_conf))


def bolt(inputs: dict[tuple[str, str], Any] | None = None, script: str = "m.B",
         streams: dict[str, list[str]] | None = None, par: int | None = 1,
         json_conf: str | None = None, obj: Any = None) -> Any:
    return N.Bolt(bolt_object=obj if obj is not None else shell(script),
                  common=common(inputs, streams, par=par, json_conf=json_conf))


def topo(spouts: dict[str, Any] | None = None, bolts: dict[str, Any] | None = None,
         state_spouts: dict[str, Any] | None = None) -> Any:
    return N.StormTopology(spouts={"s": spout()} if spouts is None else spouts,
                           bolts=bolts or {}, state_spouts=state_spouts or {})


def refused(topology: Any, conf: dict[str, Any] | None = None,
            code: CodeArchive | None = None) -> str:
    with pytest.raises(InvalidTopology) as info:
        check_topology(topology, conf or {}, code)
    return str(info.value)


# --- check_name -----------------------------------------------------------------------

@pytest.mark.parametrize("name", ["wc", "word count", "a-b_c", "ü", "x" * MAX_NAME_BYTES,
                                  "ü" * (MAX_NAME_BYTES // 2), "名前" * 37, "wc (prod) v2"])
def test_name_accepted(name: str) -> None:
    assert check_name(name) == name


@pytest.mark.parametrize("name", ["a/b", "a.b", "a:b", "a\\b", "/", ".", "..", "wc.v1"])
def test_name_with_storm_forbidden_characters(name: str) -> None:
    with pytest.raises(InvalidTopology, match="contains one of / . :"):
        check_name(name)


@pytest.mark.parametrize("name", ["", " ", "\t \n", None, 5, b"wc"])
def test_name_empty_or_not_a_string(name: Any) -> None:
    with pytest.raises(InvalidTopology, match="must not be empty"):
        check_name(name)


def test_the_longest_id_of_the_longest_name_fits_a_file_name(tmp_path: Path) -> None:
    # The handler's id: <name>-<counter>-<epoch>; the largest counter SQLite can hold
    # and an epoch of 11 digits is the longest suffix there can be.
    assert MAX_NAME_BYTES == 255 - ID_SUFFIX_MAX_BYTES == 223
    name = "é" * (MAX_NAME_BYTES // 2) + "x"          # 223 bytes, 112 characters
    longest = f"{check_name(name)}-{2**63 - 1}-{99_999_999_999}"
    assert len(longest.encode()) == 255
    (tmp_path / longest).mkdir()                      # no ENAMETOOLONG


@pytest.mark.parametrize("name,size", [("x" * 250, 250), ("x" * (MAX_NAME_BYTES + 1), 224),
                                       ("é" * 112, 224), ("名" * 75, 225)])
def test_name_too_long_in_utf8_bytes(name: str, size: int) -> None:
    with pytest.raises(InvalidTopology) as info:
        check_name(name)
    assert str(info.value).startswith(f"topology name is {size} bytes of UTF-8; the limit "
                                      f"is {MAX_NAME_BYTES} ")
    assert "-<counter>-<epoch>" in str(info.value)


@pytest.mark.parametrize("name,code", [("a\nb", "U+000A"), ("wc\n", "U+000A"),
                                       ("a\x00b", "U+0000"), ("a\x1bb", "U+001B"),
                                       ("a\x7fb", "U+007F"), ("\tab", "U+0009")])
def test_name_with_control_characters(name: str, code: str) -> None:
    with pytest.raises(InvalidTopology, match=re.escape(f"contains {code} (a control character)")):
        check_name(name)


@pytest.mark.parametrize("name,described", [
    ("a\u202eb\u0085\u2028c", "U+202E (RIGHT-TO-LEFT OVERRIDE, a format character)"),
    ("ab\u0085c", "U+0085 (a control character)"),              # NEXT LINE is Cc
    ("a\u2028c", "U+2028 (LINE SEPARATOR, a line separator)"),
    ("a\u2029c", "U+2029 (PARAGRAPH SEPARATOR, a paragraph separator)"),
    ("a\u200bc", "U+200B (ZERO WIDTH SPACE, a format character)"),
    ("a\u2066c", "U+2066 (LEFT-TO-RIGHT ISOLATE, a format character)"),
    ("a\ufeffc", "U+FEFF (ZERO WIDTH NO-BREAK SPACE, a format character)"),
    ("a\x9bc", "U+009B (a control character)"),                 # C1 CSI
    ("a\ud800c", "U+D800 (a surrogate)"),
])
def test_name_with_spoofing_characters_names_the_code_point(name: str,
                                                             described: str) -> None:
    with pytest.raises(InvalidTopology) as info:
        check_name(name)
    message = str(info.value)
    assert f"contains {described};" in message
    # The sentence itself carries the name escaped, never the raw character.
    assert all(c.isprintable() for c in message)


@pytest.mark.parametrize("kind", ["spout", "bolt"])
def test_component_id_with_a_bidi_override_refused(kind: str) -> None:
    t = topo({"s\u202e": spout()}) if kind == "spout" else \
        topo(bolts={"b\u202e": bolt({("s", "default"): shuffle()})})
    assert "U+202E (RIGHT-TO-LEFT OVERRIDE, a format character)" in refused(t)


# --- parse_conf -----------------------------------------------------------------------

@pytest.mark.parametrize("text", [None, "", "   "])
def test_conf_absent_is_empty(text: str | None) -> None:
    assert parse_conf(text, "the conf") == {}


def test_conf_round_trip_keeps_unknown_keys() -> None:
    conf = {"topology.workers": 2, "app.key": [1, "x"], "topology.max.spout.pending": None}
    assert parse_conf(json.dumps(conf), "the conf") == conf


@pytest.mark.parametrize("text", ["{", "{'a': 1}", "{\"a\": 1,}", "nope"])
def test_conf_bad_json(text: str) -> None:
    with pytest.raises(InvalidTopology, match="^the topology configuration is not valid JSON"):
        parse_conf(text, "the topology configuration")


def test_conf_deeply_nested_json_is_refused_not_a_crash() -> None:
    with pytest.raises(InvalidTopology, match="not valid JSON"):
        parse_conf("[" * 100_000 + "]" * 100_000, "the conf")


@pytest.mark.parametrize("text,kind", [("[]", "list"), ("1", "int"), ("\"x\"", "str"),
                                       ("null", "NoneType"), ("true", "bool")])
def test_conf_not_an_object(text: str, kind: str) -> None:
    with pytest.raises(InvalidTopology, match=f"component 'x' must be a JSON object, not {kind}"):
        parse_conf(text, "component 'x'")


@pytest.mark.parametrize("text", ['{"a": NaN}', '{"a": Infinity}', '{"a": -Infinity}',
                                  '{"topology.workers": NaN}', '{"a": 1e999}',
                                  '{"a": [-1e400]}'])
def test_conf_non_finite_numbers_refused(text: str) -> None:
    # Python's json would accept these, and json.dumps would later send them back as
    # NaN/Infinity, which no other JSON parser reads.
    with pytest.raises(InvalidTopology, match="not valid JSON"):
        parse_conf(text, "the conf")


POSITIVE_INT_KEYS = ["topology.workers", "topology.message.timeout.secs"]
NULLABLE_INT_KEYS = ["topology.max.spout.pending", "topology.max.task.parallelism",
                     "topology.tasks"]


@pytest.mark.parametrize("key", POSITIVE_INT_KEYS + NULLABLE_INT_KEYS)
@pytest.mark.parametrize("value", [0, -1, True, False, 1.5, 2.0, "2", [2], {"n": 2}])
def test_conf_int_keys_bad_values(key: str, value: Any) -> None:
    with pytest.raises(InvalidTopology) as info:
        parse_conf(json.dumps({key: value}), "the conf")
    assert str(info.value).startswith(f"the conf: {key} must be a positive integer")
    assert repr(value) in str(info.value)


@pytest.mark.parametrize("key", POSITIVE_INT_KEYS)
def test_conf_null_refused_where_not_nullable(key: str) -> None:
    with pytest.raises(InvalidTopology, match=f"{key} must be a positive integer, not None"):
        parse_conf(json.dumps({key: None}), "the conf")


@pytest.mark.parametrize("key", POSITIVE_INT_KEYS + NULLABLE_INT_KEYS)
def test_conf_int_keys_good_values(key: str) -> None:
    assert parse_conf(json.dumps({key: 3}), "c") == {key: 3}
    if key in NULLABLE_INT_KEYS:
        assert parse_conf(json.dumps({key: None}), "c") == {key: None}


@pytest.mark.parametrize("value", [1, 0, "true", None, [True]])
def test_conf_debug_must_be_bool(value: Any) -> None:
    with pytest.raises(InvalidTopology, match="topology.debug must be true or false"):
        parse_conf(json.dumps({"topology.debug": value}), "c")
    assert parse_conf('{"topology.debug": true}', "c") == {"topology.debug": True}


# --- check_topology: refusals -----------------------------------------------------------

def test_refuses_duplicate_id_across_spouts_and_bolts() -> None:
    msg = refused(topo({"s": spout(), "dup": spout()},
                       {"dup": bolt({("s", "default"): shuffle()})}))
    assert "'dup'" in msg and "both a spout and a bolt" in msg


@pytest.mark.parametrize("kind", ["spout", "bolt"])
def test_refuses_reserved_component_id(kind: str) -> None:
    if kind == "spout":
        t = topo({"s": spout(), "__acker": spout()})
    else:
        t = topo(bolts={"__system": bolt({("s", "default"): shuffle()})})
    msg = refused(t)
    assert f"{kind} id '__" in msg and "reserved" in msg


def test_refuses_reserved_stream_id() -> None:
    msg = refused(topo({"s": spout(streams={"default": ["w"], "__tick": ["t"]})}))
    assert "spout 's'" in msg and "'__tick'" in msg and "reserved" in msg


def test_refuses_empty_component_id() -> None:
    assert "empty id" in refused(topo({"s": spout(), "": spout()}))


def test_refuses_spout_with_inputs() -> None:
    s2 = N.SpoutSpec(spout_object=shell("m.S"),
                     common=common({("s", "default"): shuffle()}))
    msg = refused(topo({"s": spout(), "s2": s2}))
    assert "spout 's2' has inputs" in msg


@pytest.mark.parametrize("par", [0, -1, -(2 ** 31)])
def test_refuses_non_positive_parallelism(par: int) -> None:
    msg = refused(topo(bolts={"b": bolt({("s", "default"): shuffle()}, par=par)}))
    assert f"bolt 'b' has parallelism_hint {par}" in msg


def test_refuses_non_positive_spout_parallelism() -> None:
    assert "spout 's' has parallelism_hint 0" in refused(topo({"s": spout(par=0)}))


def test_refuses_subscription_to_unknown_component() -> None:
    msg = refused(topo(bolts={"b": bolt({("ghost", "default"): shuffle()})}))
    assert "bolt 'b' subscribes to unknown component 'ghost'" in msg


def test_refuses_subscription_to_unknown_stream() -> None:
    msg = refused(topo(bolts={"b": bolt({("s", "errors"): shuffle()})}))
    assert "bolt 'b'" in msg and "stream 'errors' of 's'" in msg and "default" in msg


@pytest.mark.parametrize("component,stream", [(None, "default"), ("s", None)])
def test_refuses_input_without_ids(component: Any, stream: Any) -> None:
    # "required" is not enforced by the decoder; two inputs make the sort compare them.
    b = bolt({("s", "default"): shuffle()})
    b.common.inputs[N.GlobalStreamId(componentId=component, streamId=stream)] = shuffle()
    msg = refused(topo(bolts={"b": b}))
    assert msg.startswith("bolt 'b' has an input without a component id or a stream id")


def test_refuses_fields_grouping_on_unknown_field() -> None:
    msg = refused(topo({"s": spout(streams={"default": ["word"]})},
                       {"b": bolt({("s", "default"): fields("word", "count")})}))
    assert "bolt 'b'" in msg and "field 'count'" in msg and "s:default" in msg
    assert "word" in msg                    # the declared fields are listed


def test_refuses_direct_stream() -> None:
    s = N.SpoutSpec(spout_object=shell("m.S"), common=common())
    s.common.streams["default"].direct = True
    msg = refused(topo({"s": s}))
    assert "stream 'default' of spout 's' is direct" in msg


@pytest.mark.parametrize("grouping,name", [
    (N.Grouping(direct=N.NullStruct()), "direct"),
    (N.Grouping(custom_object=N.JavaObject(full_class_name="a.B", args_list=[])),
     "custom_object"),
    (N.Grouping(custom_serialized=b"\xac\xed"), "custom_serialized"),
])
def test_refuses_unsupported_groupings(grouping: Any, name: str) -> None:
    msg = refused(topo(bolts={"b": bolt({("s", "default"): grouping})}))
    assert f"bolt 'b' input s:default uses {name} grouping" in msg


def test_refuses_grouping_with_two_or_no_choices() -> None:
    two = N.Grouping(shuffle=N.NullStruct(), all=N.NullStruct())
    assert "sets 2 groupings" in refused(topo(bolts={"b": bolt({("s", "default"): two})}))
    none = N.Grouping()
    assert "sets 0 groupings" in refused(topo(bolts={"b": bolt({("s", "default"): none})}))


@pytest.mark.parametrize("obj,what", [
    (N.ComponentObject(serialized_java=b"\xac\xed\x00\x05"), "serialized_java"),
    (N.ComponentObject(java_object=N.JavaObject(full_class_name="storm.Spout", args_list=[])),
     "java_object"),
])
def test_refuses_java_components(obj: Any, what: str) -> None:
    msg = refused(topo({"s": spout(obj=obj)}))
    assert f"spout 's' is a Java component ({what})" in msg
    msg = refused(topo(bolts={"b": bolt({("s", "default"): shuffle()}, obj=obj)}))
    assert f"bolt 'b' is a Java component ({what})" in msg


def test_refuses_empty_component_object() -> None:
    assert "spout 's' has an empty component object" in \
        refused(topo({"s": spout(obj=N.ComponentObject())}))


@pytest.mark.parametrize("command", ["java", "bash", "", None, "python2", "PYTHON"])
def test_refuses_bad_execution_command(command: str | None) -> None:
    obj = N.ComponentObject(shell=N.ShellComponent(execution_command=command, script="m.S"))
    msg = refused(topo({"s": spout(obj=obj)}))
    assert f"spout 's' has execution_command {command!r}" in msg and "python" in msg


@pytest.mark.parametrize("command", ["python", "python3"])
def test_accepts_python_commands(command: str) -> None:
    obj = N.ComponentObject(shell=N.ShellComponent(execution_command=command, script="m.S"))
    assert check_topology(topo({"s": spout(obj=obj)}), {}, None).components["s"].script == "m.S"


@pytest.mark.parametrize("script", [None, ""])
def test_refuses_missing_script(script: str | None) -> None:
    obj = N.ComponentObject(shell=N.ShellComponent(execution_command="python", script=script))
    assert "spout 's' has no script" in refused(topo({"s": spout(obj=obj)}))


@pytest.mark.parametrize("script", ["Spout", "m.", ".S", "m..S", "my-mod.S", "m.S()",
                                    "m/x.S"])
def test_refuses_malformed_script_with_code(tmp_path: Path, script: str) -> None:
    code = archive(tmp_path, {"m.py": "class S: pass\n"})
    msg = refused(topo({"s": spout(script)}), code=code)
    assert "spout 's'" in msg and f"script {script!r} is not of the form" in msg


def test_refuses_script_whose_class_is_missing_from_code(tmp_path: Path) -> None:
    code = archive(tmp_path, {"m.py": "class S: pass\n"})
    msg = refused(topo({"s": spout("m.S")}, {"b": bolt({("s", "default"): shuffle()},
                                                     script="m.Nope")}), code=code)
    assert "bolt 'b'" in msg and "m.py defines no top-level 'Nope'" in msg


def test_refuses_script_whose_module_is_missing_from_code(tmp_path: Path) -> None:
    code = archive(tmp_path, {"m.py": "class S: pass\n"})
    msg = refused(topo({"s": spout("other.S")}), code=code)
    assert "spout 's'" in msg and "module 'other'" in msg


@pytest.mark.parametrize("spouts", [{}, None])
def test_refuses_no_spouts(spouts: Any) -> None:
    t = N.StormTopology(spouts=spouts, bolts={"b": bolt()}, state_spouts={})
    assert "no spouts" in refused(t)


def test_refuses_state_spouts() -> None:
    ss = N.StateSpoutSpec(state_spout_object=shell("m.S"), common=common())
    msg = refused(topo(state_spouts={"st": ss}))
    assert "state spout 'st'" in msg and "not supported" in msg


def test_refuses_cycle() -> None:
    msg = refused(topo(bolts={
        "a": bolt({("s", "default"): shuffle(), ("c", "default"): shuffle()}),
        "b": bolt({("a", "default"): shuffle()}),
        "c": bolt({("b", "default"): shuffle()}),
        "after": bolt({("c", "default"): shuffle()}),
        "fine": bolt({("s", "default"): shuffle()}),
    }))
    # Only the components on the cycle: not what is downstream of it, nor upstream.
    assert "cycle through 'a', 'b', 'c';" in msg
    assert "'after'" not in msg and "'fine'" not in msg and "'s'" not in msg


def test_refuses_self_loop() -> None:
    msg = refused(topo(bolts={"b": bolt({("s", "default"): shuffle(),
                                         ("b", "default"): shuffle()})}))
    assert "cycle through 'b'" in msg


def chain(length: int, close_loop: bool) -> Any:
    bolts = {}
    for i in range(length):
        source = "s" if i == 0 else f"b{i - 1:05d}"
        inputs = {(source, "default"): shuffle()}
        if i == 0 and close_loop:
            inputs[(f"b{length - 1:05d}", "default")] = shuffle()
        bolts[f"b{i:05d}"] = bolt(inputs)
    return topo(bolts=bolts)


def test_long_chain_is_accepted_without_recursion() -> None:
    # 2000 components: twice Python's recursion limit, within MAX_EXECUTORS_PER_TOPOLOGY.
    plan = check_topology(chain(2000, close_loop=False), {}, None)
    assert len(plan.components) == 2001
    assert plan.components["b01999"].inputs == (Input("b01998", "default", "shuffle"),)


def test_cycle_message_leaves_out_a_long_tail() -> None:
    t = chain(2000, close_loop=False)
    t.bolts["b00000"].common.inputs[N.GlobalStreamId("b00001", "default")] = shuffle()
    assert refused(t).startswith("the topology has a cycle through 'b00000', 'b00001';")


def test_two_cycles_and_the_bridge_between_them_are_named() -> None:
    msg = refused(topo(bolts={
        "a": bolt({("s", "default"): shuffle(), ("b", "default"): shuffle()}),
        "b": bolt({("a", "default"): shuffle()}),
        "bridge": bolt({("b", "default"): shuffle()}),
        "c": bolt({("bridge", "default"): shuffle(), ("d", "default"): shuffle()}),
        "d": bolt({("c", "default"): shuffle()}),
        "tail": bolt({("d", "default"): shuffle()}),
    }))
    assert "cycle through 'a', 'b', 'bridge', 'c', 'd';" in msg


def test_long_cycle_is_detected_without_recursion() -> None:
    msg = refused(chain(2000, close_loop=True))
    assert "cycle through 'b00000'" in msg and "'b01999'" in msg


def test_refuses_duplicate_output_field() -> None:
    msg = refused(topo({"s": spout(streams={"default": ["w", "n", "w"]})}))
    assert "stream 'default' of spout 's' declares field 'w' twice" in msg


def test_refuses_bad_component_json_conf() -> None:
    msg = refused(topo({"s": spout(json_conf='{"topology.tasks": 0}')}))
    assert "json_conf of spout 's'" in msg and "topology.tasks" in msg


# --- check_topology: acceptance ---------------------------------------------------------

def archive(tmp_path: Path, files: dict[str, str | bytes] | None = None) -> CodeArchive:
    path = tmp_path / "code.zip"
    path.write_bytes(make_zip(files))
    return CodeArchive.open(path)


def test_wordcount_plan(tmp_path: Path) -> None:
    plan = check_topology(wordcount(), {"topology.workers": 2}, archive(tmp_path))
    assert plan.executors == {"sentences": 1, "split": 2, "count": 3}
    assert plan.tasks == {"sentences": 1, "split": 2, "count": 3}
    assert plan.num_workers == 2
    count = plan.components["count"]
    assert count.kind == "bolt" and count.script == "wordcount.components.CountBolt"
    assert count.inputs == (Input("split", "default", "fields", ("word",)),)
    assert count.streams == {"default": ("word", "count")}
    assert plan.components["split"].inputs == (Input("sentences", "default", "shuffle"),)
    assert plan.components["sentences"].kind == "spout"


def test_defaults_merged() -> None:
    plan = check_topology(wordcount(), {"app.key": 1, "topology.debug": True}, None)
    assert plan.conf == {**TOPOLOGY_DEFAULTS, "app.key": 1, "topology.debug": True}
    assert plan.conf["topology.message.timeout.secs"] == 30
    assert plan.num_workers == 1


def test_unset_parallelism_means_one() -> None:
    plan = check_topology(topo({"s": spout(par=None)}), {}, None)
    assert plan.executors == {"s": 1} and plan.tasks == {"s": 1}


def test_global_grouping_is_recorded_as_global() -> None:
    plan = check_topology(topo(bolts={"b": bolt({("s", "default"): fields()})}), {}, None)
    assert plan.components["b"].inputs == (Input("s", "default", "global"),)


@pytest.mark.parametrize("name", ["shuffle", "all", "none", "local_or_shuffle"])
def test_null_groupings_are_recorded_by_name(name: str) -> None:
    grouping = N.Grouping(**{name: N.NullStruct()})
    plan = check_topology(topo(bolts={"b": bolt({("s", "default"): grouping})}), {}, None)
    assert plan.components["b"].inputs == (Input("s", "default", name),)


def test_inputs_sorted_and_multiple_streams() -> None:
    s = spout(streams={"default": ["w"], "other": ["x", "y"]})
    plan = check_topology(topo({"s": s}, {"b": bolt({("s", "other"): fields("y"),
                                                     ("s", "default"): shuffle()})}), {}, None)
    assert plan.components["b"].inputs == (Input("s", "default", "shuffle"),
                                           Input("s", "other", "fields", ("y",)))


def test_topology_tasks_more_than_parallelism() -> None:
    plan = check_topology(topo({"s": spout(par=2, json_conf='{"topology.tasks": 8}')}),
                          {}, None)
    assert plan.executors == {"s": 2} and plan.tasks == {"s": 8}
    assert plan.components["s"].conf == {"topology.tasks": 8}


def test_topology_tasks_from_topology_conf_component_conf_wins() -> None:
    # Storm merges the component's conf over the topology's for topology.tasks.
    t = topo({"s": spout(par=2)},
             {"b": bolt({("s", "default"): shuffle()}, par=2,
                        json_conf='{"topology.tasks": 3}')})
    plan = check_topology(t, {"topology.tasks": 6}, None)
    assert plan.tasks == {"s": 6, "b": 3} and plan.executors == {"s": 2, "b": 2}


def test_topology_tasks_fewer_than_parallelism_limits_executors() -> None:
    plan = check_topology(topo({"s": spout(par=5, json_conf='{"topology.tasks": 3}')}),
                          {}, None)
    assert plan.executors == {"s": 3} and plan.tasks == {"s": 3}


def test_max_task_parallelism_caps_topology_wide() -> None:
    t = topo({"s": spout(par=10, json_conf='{"topology.tasks": 20}')},
             {"b": bolt({("s", "default"): shuffle()}, par=2)})
    plan = check_topology(t, {"topology.max.task.parallelism": 4}, None)
    assert plan.executors == {"s": 4, "b": 2} and plan.tasks == {"s": 4, "b": 2}


def test_max_task_parallelism_per_component_wins() -> None:
    t = topo({"s": spout(par=10, json_conf='{"topology.max.task.parallelism": 3}')},
             {"b": bolt({("s", "default"): shuffle()}, par=10)})
    plan = check_topology(t, {"topology.max.task.parallelism": 6}, None)
    assert plan.executors == {"s": 3, "b": 6} and plan.tasks == {"s": 3, "b": 6}


def test_spout_without_streams_is_accepted() -> None:
    plan = check_topology(topo({"s": spout(streams={})}), {}, None)
    assert plan.components["s"].streams == {}


# --- task_ranges ------------------------------------------------------------------------

def test_task_ranges_storm_numbering() -> None:
    # Components sorted by id, task ids from 1, remainder tasks to the first executors.
    ranges = task_ranges({"split": 7, "count": 3, "sentences": 1},
                         {"split": 3, "count": 3, "sentences": 1})
    assert ranges == [("count", 1, 1), ("count", 2, 2), ("count", 3, 3),
                      ("sentences", 4, 4),
                      ("split", 5, 7), ("split", 8, 9), ("split", 10, 11)]


def test_task_ranges_more_executors_than_tasks_and_missing_executors() -> None:
    assert task_ranges({"a": 2, "b": 3}, {"a": 5}) == [("a", 1, 1), ("a", 2, 2),
                                                       ("b", 3, 5)]


def test_task_ranges_of_a_plan_cover_every_task_once() -> None:
    plan = check_topology(topo({"s": spout(par=3, json_conf='{"topology.tasks": 10}')},
                               {"b": bolt({("s", "default"): shuffle()}, par=4)}), {}, None)
    ranges = task_ranges(plan.tasks, plan.executors)
    ids = [t for _, first, last in ranges for t in range(first, last + 1)]
    assert ids == list(range(1, 15))
    assert [r for r in ranges if r[0] == "s"] == [("s", 5, 8), ("s", 9, 11), ("s", 12, 14)]
    assert len(ranges) == sum(plan.executors.values())


# --- numbers bounded where they enter ---------------------------------------------------

@pytest.mark.parametrize("key,limit", [
    ("topology.workers", MAX_WORKERS),
    ("topology.message.timeout.secs", MAX_MESSAGE_TIMEOUT_SECS),
    ("topology.max.spout.pending", MAX_SPOUT_PENDING),
    ("topology.max.task.parallelism", I32_MAX),
    ("topology.tasks", MAX_TASKS_PER_COMPONENT),
])
def test_conf_numbers_bounded(key: str, limit: int) -> None:
    assert parse_conf(json.dumps({key: limit}), "the conf") == {key: limit}
    for value in (limit + 1, 2**40, 2**63):
        with pytest.raises(InvalidTopology) as info:
            parse_conf(json.dumps({key: value}), "the topology configuration")
        assert str(info.value).startswith(
            f"the topology configuration: {key} is {value}; the limit is {limit}")


def test_workers_two_to_the_forty_refused_by_parse_conf_and_check_topology() -> None:
    with pytest.raises(InvalidTopology, match=r"topology.workers is 1099511627776; "
                                              rf"the limit is {MAX_WORKERS} workers"):
        parse_conf('{"topology.workers": 1099511627776}', "the topology configuration")
    # A stored conf is re-planned at launch without parse_conf: check_topology checks too.
    assert "topology.workers is 1099511627776" in refused(topo(), {"topology.workers": 2**40})


def test_component_conf_numbers_bounded() -> None:
    t = topo({"s": spout(json_conf=json.dumps({"topology.tasks": 2**31 - 1}))})
    assert refused(t).startswith("the json_conf of spout 's': topology.tasks is 2147483647; "
                                 f"the limit is {MAX_TASKS_PER_COMPONENT}")


@pytest.mark.parametrize("kind", ["spout", "bolt"])
def test_parallelism_hint_of_i32_max_refused(kind: str) -> None:
    t = topo({"s": spout(par=2**31 - 1)}) if kind == "spout" else \
        topo(bolts={"b": bolt({("s", "default"): shuffle()}, par=2**31 - 1)})
    cid = "s" if kind == "spout" else "b"
    assert refused(t) == (f"{kind} {cid!r} parallelism_hint is 2147483647; the limit is "
                          f"{MAX_EXECUTORS_PER_COMPONENT} executors per component")


def test_parallelism_hint_at_the_limit_accepted() -> None:
    plan = check_topology(topo({"s": spout(par=MAX_EXECUTORS_PER_COMPONENT)}), {}, None)
    assert plan.executors == {"s": MAX_EXECUTORS_PER_COMPONENT}


def test_topology_wide_executors_bounded() -> None:
    half = MAX_EXECUTORS_PER_TOPOLOGY // 2
    ok = topo({"s": spout(par=half)}, {"b": bolt({("s", "default"): shuffle()}, par=half)})
    assert sum(check_topology(ok, {}, None).executors.values()) == MAX_EXECUTORS_PER_TOPOLOGY
    over = topo({"s": spout(par=half)},
                {"b": bolt({("s", "default"): shuffle()}, par=half + 1)})
    assert refused(over) == (
        f"the topology's executors (the sum over its components) is "
        f"{MAX_EXECUTORS_PER_TOPOLOGY + 1}; the limit is {MAX_EXECUTORS_PER_TOPOLOGY} "
        "executors per topology")


def test_topology_wide_tasks_bounded() -> None:
    n = MAX_TASKS_PER_TOPOLOGY // MAX_TASKS_PER_COMPONENT + 1
    conf = json.dumps({"topology.tasks": MAX_TASKS_PER_COMPONENT})
    bolts = {f"b{i}": bolt({("s", "default"): shuffle()}, json_conf=conf) for i in range(n)}
    message = refused(topo({"s": spout()}, bolts))
    assert message.startswith("the topology's tasks (the sum over its components) is ")
    assert message.endswith(f"the limit is {MAX_TASKS_PER_TOPOLOGY} tasks per topology")


def test_task_ranges_refuses_a_stored_row_with_billions_of_executors() -> None:
    # A row stored before the limits: refused at once instead of looping 2**31 times.
    with pytest.raises(InvalidTopology, match="the topology's executors is 2147483647"):
        task_ranges({"s": 2**31 - 1}, {"s": 2**31 - 1})
    assert len(task_ranges({"s": MAX_EXECUTORS_PER_TOPOLOGY},
                           {"s": MAX_EXECUTORS_PER_TOPOLOGY})) == MAX_EXECUTORS_PER_TOPOLOGY
