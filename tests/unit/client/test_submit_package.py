"""Loading a topology file, packaging its project, local checks and --conf parsing
(no sockets: nimbus_thrift.topology.package and the pure parts of nimbus_thrift.client.submit)."""

from __future__ import annotations

import os
import shutil
import sys
import zipfile
from pathlib import Path

import pytest

from nimbus_thrift.client.submit import state_of
from nimbus_thrift.topology import Topology
from nimbus_thrift.topology.package import (PackageError, build_zip, code_files, load_topology,
                                            locate, parse_conf_option, parse_conf_options,
                                            parse_conf_value, prepare, topology_conf,
                                            topology_name)

SAMPLES = Path(__file__).parents[2] / "topologies_submit"

SPOUT = """
from nimbus_thrift.topology import Bolt, Grouping, Spout, Topology

class Lines(Spout):
    outputs = {"line": str}

class Upper(Bolt):
    outputs = {"line": str}
"""


def project(tmp_path: Path, sample: str) -> Path:
    """A copy of a sample project (so tests may add to it and nothing is cached)."""
    dest = tmp_path / sample
    shutil.copytree(SAMPLES / sample, dest)
    return dest


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def scripts(topology: type[Topology]) -> dict[str, str]:
    struct = topology.to_thrift()
    return {cid: spec.spout_object.shell.script for cid, spec in struct.spouts.items()} | \
        {cid: spec.bolt_object.shell.script for cid, spec in struct.bolts.items()}


def members(zip_path: Path) -> list[str]:
    with zipfile.ZipFile(zip_path) as zf:
        return zf.namelist()


# --- where a file sits and what its module is called -----------------------------------

def test_flat_file_root_is_its_directory(tmp_path: Path) -> None:
    root = project(tmp_path, "wordcount")
    where = locate(root / "wordcount.py")
    assert (where.root, where.module) == (root, "wordcount")


def test_file_in_a_package_root_is_above_the_top_package(tmp_path: Path) -> None:
    root = project(tmp_path, "analytics_project")
    where = locate(root / "analytics" / "topology.py")
    assert (where.root, where.module) == (root, "analytics.topology")
    write(root / "analytics" / "jobs" / "__init__.py", "")
    assert locate(write(root / "analytics" / "jobs" / "nightly.py", "")).module == \
        "analytics.jobs.nightly"
    assert locate(root / "analytics" / "__init__.py").module == "analytics"


@pytest.mark.parametrize("name, message", [
    ("word-count.py", "'word-count' is not a valid Python module name"),
    ("class.py", "'class' is not a valid Python module name"),
    ("topology.txt", "a topology file must be a .py file"),
])
def test_file_names_the_runner_cannot_import(tmp_path: Path, name: str, message: str) -> None:
    with pytest.raises(PackageError, match=message):
        locate(write(tmp_path / name, ""))


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(PackageError, match=r"nope\.py: no such file$"):
        load_topology(tmp_path / "nope.py")


# --- loading ------------------------------------------------------------------------------

def test_components_of_the_file_itself_get_its_module_name(tmp_path: Path) -> None:
    topology = load_topology(project(tmp_path, "wordcount") / "wordcount.py")
    assert topology.__name__ == "WordCount" and topology.__module__ == "wordcount"
    assert scripts(topology) == {"sentences": "wordcount.SentenceSpout",
                                 "split": "wordcount.SplitBolt", "count": "wordcount.CountBolt"}


def test_components_of_a_package_get_dotted_names(tmp_path: Path) -> None:
    topology = load_topology(project(tmp_path, "analytics_project") / "analytics" / "topology.py")
    assert topology.__module__ == "analytics.topology"
    assert scripts(topology) == {"lines": "analytics.spouts.LineSpout",
                                 "tokens": "analytics.bolts.TokenBolt",
                                 "tally": "analytics.bolts.TallyBolt"}


def test_loading_is_isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two projects with a module of the same name: each load sees its own, and
    sys.path, sys.modules and the project directory are left as they were."""
    monkeypatch.setattr(sys, "dont_write_bytecode", False)   # the default outside tests
    first = project(tmp_path / "a", "wordcount")
    second = write(tmp_path / "b" / "wordcount.py", SPOUT + """
class Other(Topology):
    lines = Lines.spec()
    upper = Upper.spec(inputs=[lines])
""")
    path_before, modules_before = list(sys.path), set(sys.modules)
    assert load_topology(first / "wordcount.py").__name__ == "WordCount"
    assert load_topology(second).__name__ == "Other"
    assert load_topology(first / "wordcount.py").__name__ == "WordCount"
    assert sys.path == path_before
    assert not {m for m in set(sys.modules) - modules_before if m.startswith("wordcount")}
    assert not list(tmp_path.rglob("__pycache__"))
    assert sys.dont_write_bytecode is False


def test_a_module_loaded_before_is_set_aside_and_restored(tmp_path: Path) -> None:
    stale = type(sys)("wordcount")
    sys.modules["wordcount"] = stale
    try:
        topology = load_topology(project(tmp_path, "wordcount") / "wordcount.py")
        assert topology.__name__ == "WordCount"
        assert sys.modules["wordcount"] is stale
    finally:
        del sys.modules["wordcount"]


def test_no_topology(tmp_path: Path) -> None:
    path = write(tmp_path / "empty.py", SPOUT)
    with pytest.raises(PackageError, match=r"empty\.py defines no Topology subclass"):
        load_topology(path)


TWO = SPOUT + """
class First(Topology):
    name = "first"
    lines = Lines.spec()

class Second(Topology):
    lines = Lines.spec()
    upper = Upper.spec(inputs=[lines])
"""


def test_two_topologies_need_a_choice(tmp_path: Path) -> None:
    path = write(tmp_path / "two.py", TWO)
    with pytest.raises(PackageError, match=r"two\.py defines several topologies "
                                           r"\(First, Second\); choose one with --topology"):
        load_topology(path)
    assert load_topology(path, "Second").__name__ == "Second"
    assert load_topology(path, name="first").__name__ == "First"   # by its topology name
    with pytest.raises(PackageError, match=r"defines no Topology class 'Third' "
                                           r"\(it defines: First, Second\)"):
        load_topology(path, "Third")


def test_a_base_class_without_components_is_not_a_candidate(tmp_path: Path) -> None:
    path = write(tmp_path / "based.py", SPOUT + """
class Base(Topology):
    config = {"topology.workers": 3}

class Real(Base):
    lines = Lines.spec()
""")
    assert load_topology(path).__name__ == "Real"


@pytest.mark.parametrize("source, message", [
    ("import no_such_module_xyz\n",
     r"cannot import .*broken\.py: ModuleNotFoundError: No module named 'no_such_module_xyz' "
     r"\(at broken\.py line 1\)$"),
    ("x = 1\ndef f(:\n",
     r"cannot import .*broken\.py: SyntaxError: invalid syntax \(broken\.py, line 2\)$"),
    ("import helper\n",
     r"cannot import .*broken\.py: ZeroDivisionError: division by zero "
     r"\(at helper\.py line 2\)$"),
    ("import sys\nsys.exit(3)\n", r"cannot import .*broken\.py: SystemExit\(3\) was raised"),
    (SPOUT + "class T(Topology):\n    upper = Upper.spec()\n",
     r"broken\.py: T\.upper \(Upper\): a bolt needs at least one input$"),
])
def test_import_errors_are_one_sentence_naming_the_file(tmp_path: Path, source: str,
                                                         message: str) -> None:
    write(tmp_path / "helper.py", "# helper\nRATIO = 1 / 0\n")
    path = write(tmp_path / "broken.py", source)
    with pytest.raises(PackageError, match=message) as info:
        load_topology(path)
    assert "\n" not in str(info.value)


# --- name and configuration ---------------------------------------------------------------

def test_topology_name_precedence(tmp_path: Path) -> None:
    path = write(tmp_path / "two.py", TWO)
    first, second = load_topology(path, "First"), load_topology(path, "Second")
    where = locate(path)
    assert topology_name(first, None, where) == "first"          # its name attribute
    assert topology_name(second, None, where) == "two"           # the file's stem
    assert topology_name(second, "chosen", where) == "chosen"    # --name
    with pytest.raises(PackageError, match=r"contains one of / \. : \\"):
        topology_name(second, "a.b", where)


@pytest.mark.parametrize("text, value", [
    ("2", 2), ("1.5", 1.5), ("true", True), ("false", False), ("null", None),
    ('{"a": [1, 2]}', {"a": [1, 2]}), ("[1]", [1]), ('"2"', "2"), ("hello", "hello"),
    ("", ""), ("NaN", "NaN"), ("Infinity", "Infinity"), ("local[*]", "local[*]"),
])
def test_conf_values_are_json_if_they_parse(text: str, value: object) -> None:
    assert parse_conf_value(text) == value
    assert type(parse_conf_value(text)) is type(value)


def test_conf_options() -> None:
    assert parse_conf_option("spark.master=local[2]") == ("spark.master", "local[2]")
    assert parse_conf_option("a=b=c") == ("a", "b=c")            # the first = splits
    assert parse_conf_options(["k=1", "k=2", "x=true"]) == {"k": 2, "x": True}
    for bad in ("novalue", "=3"):
        with pytest.raises(PackageError, match="is not key=value"):
            parse_conf_option(bad)


def test_conf_is_class_config_then_overrides_checked_as_the_daemon_does(tmp_path: Path) -> None:
    topology = load_topology(project(tmp_path, "wordcount") / "wordcount.py")
    assert topology_conf(topology, {"topology.workers": 4, "x": None}) == \
        {"topology.workers": 4, "topology.max.spout.pending": 100, "x": None}
    with pytest.raises(PackageError, match="topology.workers must be a positive integer, "
                                           "not 0"):
        topology_conf(topology, {"topology.workers": 0})
    with pytest.raises(PackageError, match="configuration of WordCount is not JSON"):
        topology_conf(topology, {"x": {1, 2}})


# --- the zip ------------------------------------------------------------------------------

def test_what_is_packaged(tmp_path: Path) -> None:
    root = project(tmp_path, "analytics_project")
    for junk in [".git/config", ".git/hooks/x.py", ".venv/lib/site.py", ".env",
                 "venv/pyvenv.cfg", "venv/lib/python3.11/site-packages/six.py",
                 "analytics/__pycache__/bolts.cpython-311.pyc", "analytics/old.pyc",
                 "build/lib/analytics/bolts.py", "dist/analytics.tar.gz",
                 "analytics.egg-info/PKG-INFO", "data/big.csv", "notes.txt",
                 "analytics/.secret", "lib/site-packages/x.py"]:
        write(root / junk, "junk")
    write(root / "analytics" / "build" / "__init__.py", "")       # a package named build
    write(root / "analytics" / "build" / "steps.py", "")
    write(root / "scripts" / "tool.py", "")                       # namespace: *.py only
    write(root / "scripts" / "tool.cfg", "")
    files, skipped = code_files(root)
    assert [name for name, _ in files] == [
        "analytics/__init__.py", "analytics/bolts.py", "analytics/build/__init__.py",
        "analytics/build/steps.py", "analytics/data/lines.txt", "analytics/spouts.py",
        "analytics/topology.py", "scripts/tool.py", "tools/text.py"]
    assert skipped == []


def test_zip_is_deterministic(tmp_path: Path) -> None:
    root = project(tmp_path, "analytics_project")
    first = build_zip(root, tmp_path / "1.zip")
    for path in root.rglob("*"):                                  # new times and modes
        os.utime(path, (1_000_000, 1_000_000))
        if path.is_file():
            path.chmod(0o600)
    second = build_zip(root, tmp_path / "2.zip")
    assert first.sha256 == second.sha256
    assert (tmp_path / "1.zip").read_bytes() == (tmp_path / "2.zip").read_bytes()
    with zipfile.ZipFile(second.path) as zf:
        infos = zf.infolist()
    assert [i.filename for i in infos] == sorted(i.filename for i in infos) == list(first.files)
    assert {i.date_time for i in infos} == {(1980, 1, 1, 0, 0, 0)}
    assert {i.external_attr >> 16 for i in infos} == {0o100644}
    (root / "tools" / "text.py").write_text("# changed\n")
    assert build_zip(root, tmp_path / "3.zip").sha256 != first.sha256


def test_symbolic_links_are_skipped_with_a_note(tmp_path: Path) -> None:
    root = project(tmp_path, "wordcount")
    outside = write(tmp_path / "elsewhere" / "secret.py", "KEY = 1\n")
    (root / "linked.py").symlink_to(outside)
    (root / "inside.py").symlink_to(root / "wordcount.py")
    (root / "pkg").symlink_to(outside.parent, target_is_directory=True)
    built = build_zip(root, tmp_path / "code.zip")
    assert built.files == ("wordcount.py",) and members(built.path) == ["wordcount.py"]
    assert built.skipped == (f"skipped symbolic link inside.py -> {root / 'wordcount.py'}",
                             f"skipped symbolic link linked.py -> {outside}",
                             f"skipped symbolic link pkg -> {outside.parent}")


def test_size_cap_names_the_largest_files(tmp_path: Path) -> None:
    root = project(tmp_path, "analytics_project")
    write(root / "analytics" / "data" / "big.bin", "x" * 5000)
    with pytest.raises(PackageError, match=r"is 6,\d+ bytes, over the limit of 4,000; the "
                                           r"largest files: analytics/data/big\.bin "
                                           r"\(5,000 bytes\)"):
        build_zip(root, tmp_path / "code.zip", max_bytes=4000)
    assert not (tmp_path / "code.zip").exists()


# --- prepare: everything checked before anything is sent ----------------------------------

def test_prepare_a_file(tmp_path: Path) -> None:
    root = project(tmp_path, "analytics_project")
    prepared = prepare(root / "analytics" / "topology.py", tmp_path / "code.zip",
                       conf={"topology.workers": 3, "custom": "x"})
    assert prepared.name == "analytics-demo"
    assert prepared.conf == {"topology.workers": 3, "custom": "x"}
    assert prepared.struct == prepared.topology.to_thrift()
    assert prepared.plan.executors == {"lines": 1, "tokens": 2, "tally": 2}
    assert prepared.code.root == root and "tools/text.py" in prepared.code.files


def test_prepare_a_class_derives_the_root_from_its_module(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    root = project(tmp_path, "analytics_project")
    monkeypatch.syspath_prepend(str(root))
    try:
        from analytics.topology import Analytics  # type: ignore[import-not-found]
        prepared = prepare(Analytics, tmp_path / "code.zip", name="by-class")
    finally:
        for name in [m for m in sys.modules if m.split(".")[0] in ("analytics", "tools")]:
            del sys.modules[name]
    assert prepared.name == "by-class" and prepared.code.root == root
    assert prepared.code.files == build_zip(root, tmp_path / "again.zip").files


def test_prepare_a_class_that_load_topology_returned(tmp_path: Path) -> None:
    root = project(tmp_path, "wordcount")
    topology = load_topology(root / "wordcount.py")
    assert "wordcount" not in sys.modules
    prepared = prepare(topology, tmp_path / "code.zip")
    assert prepared.topology is topology and prepared.code.files == ("wordcount.py",)


def test_component_missing_from_the_code_fails_before_upload(tmp_path: Path) -> None:
    """A component imported from a directory outside the project root: its module
    would not be in the zip, and the daemon would refuse it; so does prepare."""
    write(tmp_path / "lib" / "shared_bolts_xyz.py",
          "from nimbus_thrift.topology import Bolt\n"
          "class Shout(Bolt):\n    outputs = {'line': str}\n")
    path = write(tmp_path / "proj" / "shouty.py", SPOUT + """
import sys, pathlib
sys.path.append(str(pathlib.Path(__file__).parent.parent / "lib"))
from shared_bolts_xyz import Shout

class Shouty(Topology):
    lines = Lines.spec()
    shout = Shout.spec(inputs=[lines])
""")
    try:
        with pytest.raises(PackageError, match=(
                r"shouty\.py: bolt 'shout': module 'shared_bolts_xyz' \(of "
                r"'shared_bolts_xyz\.Shout'\) is not in the uploaded code; .* \(in the code "
                r"packaged from .*proj\); nothing was uploaded")):
            prepare(path, tmp_path / "code.zip")
    finally:
        sys.modules.pop("shared_bolts_xyz", None)


def test_prepare_refuses_a_bad_name_or_conf(tmp_path: Path) -> None:
    path = project(tmp_path, "wordcount") / "wordcount.py"
    with pytest.raises(PackageError, match="contains one of"):
        prepare(path, tmp_path / "code.zip", name="a:b")
    with pytest.raises(PackageError, match="topology.debug must be true or false"):
        prepare(path, tmp_path / "code.zip", conf={"topology.debug": "yes"})


# --- the state word of a sched_status -----------------------------------------------------

@pytest.mark.parametrize("status, state", [
    ("running: batch 12, 3 tuples/s", "running"), ("starting: spark-submit", "starting"),
    ("unscheduled: this nimbus has no execution backend", "unscheduled"),
    ("not scheduled: this nimbus has no execution backend", "unscheduled"),
    ("FAILED: boom", "failed"), ("", ""), (None, ""), ("no colon at all", ""),
])
def test_state_of(status: str | None, state: str) -> None:
    assert state_of(status) == state
