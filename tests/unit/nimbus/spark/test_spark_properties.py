"""Bytes tier: an application's Spark settings as a properties file
(nimbus/spark/properties.py): Java's escapes, the file made 0600 without following
anything planted where it goes, the spark-defaults.conf it stands in for, and which
settings the launcher keeps for itself (nimbus/spark/submit.py). What Java itself reads
from such a file is checked in tests/spark/test_app_walls.py."""

from __future__ import annotations

import os
import random
import stat
from pathlib import Path
from typing import Any

import pytest
from support.nimbus import wordcount

from nimbus_thrift.nimbus.spark import properties as props
from nimbus_thrift.nimbus.spark.properties import (escape, parse_properties,
                                                   properties_text, spark_defaults,
                                                   write_properties)
from nimbus_thrift.nimbus.spark.submit import (forced_confs, spark_confs, ui_enabled,
                                               ui_port_for)
from nimbus_thrift.runner.spec import RunSpec, from_plan
from nimbus_thrift.topology.validate import check_topology


@pytest.mark.parametrize("text, key, value", [
    ("spark.a", "spark.a", "spark.a"),
    ("a b", "a\\ b", "a b"),                      # a key ends at whitespace
    (" lead", "\\ lead", "\\ lead"),              # a value's leading space is kept
    ("a=b:c#d!e", "a\\=b\\:c\\#d\\!e", "a\\=b\\:c\\#d\\!e"),
    ("back\\slash", "back\\\\slash", "back\\\\slash"),
    ("t\tn\nr\rf\f", "t\\tn\\nr\\rf\\f", "t\\tn\\nr\\rf\\f"),
    ("é€", "\\u00e9\\u20ac", "\\u00e9\\u20ac"),   # ASCII only, Latin-1 or not
    ("\U0001f600", "\\ud83d\\ude00", "\\ud83d\\ude00"),   # UTF-16 units, as Java's
    ("\x00\x7f", "\\u0000\\u007f", "\\u0000\\u007f"),
])
def test_escapes(text: str, key: str, value: str) -> None:
    assert escape(text, key=True) == key
    assert escape(text, key=False) == value


def test_a_value_cannot_start_a_line_of_its_own() -> None:
    text = properties_text({"spark.x": "1\nspark.authenticate=false\r#",
                            "spark.y\nspark.authenticate": "false"})
    assert text.count("\n") == 2 and text.isascii()
    assert parse_properties(text) == {"spark.x": "1\nspark.authenticate=false\r#",
                                      "spark.y\nspark.authenticate": "false"}


def test_what_is_written_reads_back_whatever_it_holds() -> None:
    rng = random.Random(24)
    alphabet = " \t\n\r\f\\=:#!\x00\x7fé€\U0001f600abc"
    for _ in range(300):
        confs = {"".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6))):
                 "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8)))
                 for _ in range(3)}
        assert parse_properties(properties_text(confs)) == confs


def test_java_syntax_is_read_as_java_reads_it() -> None:
    text = ("# a comment\n"
            "   ! another\n"
            "\n"
            "spark.a = 1\n"
            "spark.b:2\n"
            "spark.c    3 \n"
            "spark.d=x\\\n"
            "     y\\\\\n"
            "spark.e\\ f=\\u0041\\q\n"
            "spark.g\r\n"
            "spark.h==\n"
            "#spark.i=commented\n")
    assert parse_properties(text) == {
        "spark.a": "1", "spark.b": "2", "spark.c": "3 ", "spark.d": "xy\\",
        "spark.e f": "Aq", "spark.g": "", "spark.h": "="}
    with pytest.raises(ValueError, match="malformed"):
        parse_properties("spark.a=\\u12")


def test_the_file_is_0600_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        path = write_properties(tmp_path, {"spark.hadoop.fs.s3a.secret.key": "s3cr3t"})
    finally:
        os.umask(old)
    assert path == tmp_path / "spark.properties"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == "spark.hadoop.fs.s3a.secret.key=s3cr3t\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spark.properties"]   # no temp


def test_a_link_planted_at_its_name_is_replaced_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("untouched\n")
    work = tmp_path / "work"
    work.mkdir()
    (work / "spark.properties").symlink_to(target)
    path = write_properties(work, {"spark.a": "1"})
    assert not path.is_symlink() and path.read_text() == "spark.a=1\n"
    assert target.read_text() == "untouched\n"


def test_nothing_there_under_its_temporary_name_is_opened(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("untouched\n")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setattr(props.secrets, "token_hex", lambda n: "guessed")
    planted = work / ".spark.properties.guessed.tmp"
    planted.symlink_to(target)
    with pytest.raises(FileExistsError):          # O_EXCL: neither followed nor reused
        write_properties(work, {"spark.a": "1"})
    assert target.read_text() == "untouched\n" and planted.is_symlink()
    assert not (work / "spark.properties").exists()
    planted.unlink()
    planted.write_text("")                        # a plain file, as much refused
    with pytest.raises(FileExistsError):
        write_properties(work, {"spark.a": "1"})


def test_a_directory_that_is_a_link_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(OSError):
        write_properties(tmp_path / "link", {"spark.a": "1"})
    assert list(real.iterdir()) == []


def test_a_failed_write_leaves_no_temporary_file(tmp_path: Path) -> None:
    (tmp_path / "spark.properties").mkdir()       # the rename cannot replace it
    with pytest.raises(OSError):
        write_properties(tmp_path, {"spark.a": "1"})
    assert [p.name for p in tmp_path.iterdir()] == ["spark.properties"]


# --- spark-defaults.conf, which --properties-file makes spark-submit skip --------------

def test_the_defaults_spark_submit_would_have_read(tmp_path: Path) -> None:
    home, conf_dir = tmp_path / "home", tmp_path / "conf"
    (home / "conf").mkdir(parents=True)
    conf_dir.mkdir()
    (home / "conf" / "spark-defaults.conf").write_text("spark.from.home  1\n")
    (conf_dir / "spark-defaults.conf").write_text(
        "# the operator's\nspark.eventLog.enabled   true  \nnot.spark=x\n"
        "spark.authenticate.secret  cluster\\u0021\n")
    assert spark_defaults({"SPARK_HOME": str(home)}) == {"spark.from.home": "1"}
    # SPARK_CONF_DIR first, as Spark's Utils.getDefaultPropertiesFile; values trimmed
    # and keys not spark.* dropped, as SparkSubmit does.
    assert spark_defaults({"SPARK_HOME": str(home), "SPARK_CONF_DIR": str(conf_dir)}) == \
        {"spark.eventLog.enabled": "true", "spark.authenticate.secret": "cluster!"}
    assert spark_defaults({"SPARK_HOME": str(tmp_path / "none")}) == {}
    assert spark_defaults({}) == {}


def test_unreadable_defaults_are_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                      ) -> None:
    (tmp_path / "spark-defaults.conf").write_text("spark.a=\\u12\n")
    assert spark_defaults({"SPARK_CONF_DIR": str(tmp_path)}) == {}
    monkeypatch.setattr(props, "MAX_DEFAULTS_BYTES", 8)
    (tmp_path / "spark-defaults.conf").write_text("spark.a=123456789\n")
    assert spark_defaults({"SPARK_CONF_DIR": str(tmp_path)}) == {}


# --- which settings win ----------------------------------------------------------------

def _spec(conf: dict[str, Any] | None = None) -> RunSpec:
    plan = check_topology(wordcount(split_par=2, count_par=2),
                          {"topology.name": "wc", **(conf or {})}, None)
    return from_plan("wc-1-1", "wc", plan)


def test_defaults_then_the_launchers_then_the_topologys_then_the_reserved(
        tmp_path: Path) -> None:
    defaults = {"spark.eventLog.enabled": "true", "spark.ui.enabled": "true",
                "spark.driver.host": "10.0.0.1", "spark.executor.memory": "1g"}
    confs = spark_confs("local[2]", _spec({"spark.executor.memory": "2g",
                                           "spark.ui.killEnabled": "true",
                                           "spark.authenticate": "false"}),
                        tmp_path, 0, 1, defaults=defaults)
    assert confs["spark.eventLog.enabled"] == "true"          # the operator's stays
    assert confs["spark.ui.enabled"] == "false"               # the launcher's over it
    assert confs["spark.driver.host"] == "127.0.0.1"
    assert confs["spark.executor.memory"] == "2g"             # the topology's over both
    assert confs["spark.ui.killEnabled"] == "false"           # reserved over all
    assert confs["spark.authenticate"] == "true"


def test_a_cluster_master_keeps_the_clusters_secret(tmp_path: Path) -> None:
    assert forced_confs("spark://m:7077") == {"spark.ui.killEnabled": "false"}
    confs = spark_confs("spark://m:7077", _spec(), tmp_path, 0, 1,
                        defaults={"spark.authenticate": "true",
                                  "spark.authenticate.secret": "cluster"})
    assert (confs["spark.authenticate"], confs["spark.authenticate.secret"]) == \
        ("true", "cluster")
    confs = spark_confs("spark://m:7077", _spec({"spark.authenticate": True,
                                                 "spark.authenticate.secret": "mine"}),
                        tmp_path, 0, 1)
    assert confs["spark.authenticate.secret"] == "mine"
    for local in ("local", "local[*]", "local[2,3]", "local-cluster[1,1,1024]"):
        forced = forced_confs(local)
        assert forced["spark.authenticate"] == "true"
        assert len(forced["spark.authenticate.secret"]) == 64
    assert forced_confs("local[2]") != forced_confs("local[2]")    # fresh each time


@pytest.mark.parametrize("value, on", [(True, True), ("true", True), (" TRUE ", True),
                                       (False, False), ("false", False), ("yes", False)])
def test_the_ui_is_on_only_when_the_topology_says_so(tmp_path: Path, value: Any,
                                                     on: bool) -> None:
    spec = _spec({"spark.ui.enabled": value})
    assert ui_enabled(spec) is on
    port = ui_port_for(spec)
    assert (port > 0) is on
    confs = spark_confs("local[2]", spec, tmp_path, port, 1)
    assert ("spark.ui.port" in confs) is on
    assert confs["spark.ui.killEnabled"] == "false"
    assert ui_port_for(_spec()) == 0 and not ui_enabled(_spec())
