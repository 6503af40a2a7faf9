"""``nimbus-thrift warm-up``: when it does nothing, and that a warm-up that cannot finish
stops what it started and keeps its logs. The whole run, and the daemon mapping the
archive it makes, is in test_topology_e2e.py."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nimbus_thrift.cli import main
from nimbus_thrift.nimbus.config import load_config
from nimbus_thrift.nimbus.spark.launcher import SparkLauncher
from nimbus_thrift.nimbus.spark.proctree import session_members
from nimbus_thrift.nimbus.spark.warmup import WARMUP_CONF, WARMUP_ID, WarmUpError, warm_up
from nimbus_thrift.nimbus.spark.warmup_topology import WarmUp
from nimbus_thrift.topology.validate import check_topology


@pytest.fixture(autouse=True)
def private_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The warm-up's data directory and the cache in this test's directory."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for name in ("JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS"):
        monkeypatch.delenv(name, raising=False)


def settings(**values: Any) -> Any:
    return load_config(env={}, flags=values)


def leftovers(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in tmp_path.glob("nimbus-warm-up-*"))


def test_the_warm_up_topology_is_valid_and_covers_each_kind_of_stage() -> None:
    plan = check_topology(WarmUp.to_thrift(), dict(WARMUP_CONF), None)
    assert set(plan.executors) == {"numbers", "digits", "counts", "sink"}
    specs = WarmUp.specs()
    assert specs["counts"].is_stateful and not specs["digits"].is_stateful
    assert [g.kind for _, g in specs["counts"].inputs] == ["fields"]


@pytest.mark.parametrize("values, why", [
    ({"launcher": "none"}, "the launcher is 'none', not spark"),
    ({"spark_cache_dir": "off"}, "no class archive applies: spark_cache_dir is off"),
    ({"spark_submit": "/usr/bin/false"},
     "no class archive applies: a custom spark_submit gets no archive"),
])
def test_skipped_when_no_archive_applies(tmp_path: Path, values: dict[str, str],
                                         why: str) -> None:
    result = warm_up(settings(**values))
    assert (result.state, result.detail, result.archive) == ("skipped", why, None)
    assert leftovers(tmp_path) == []
    assert not (tmp_path / "cache" / "nimbus-thrift" / "spark-cds").exists()


def test_an_archive_already_there_is_left_alone(tmp_path: Path) -> None:
    archive = SparkLauncher(settings(data_dir=str(tmp_path / "d"))).class_archive_for(
        WARMUP_CONF)
    assert archive is not None and archive.parent == \
        tmp_path / "cache" / "nimbus-thrift" / "spark-cds"
    archive.parent.mkdir(parents=True)
    archive.write_text("made earlier")
    result = warm_up(settings())
    assert (result.state, result.archive) == ("present", archive)
    assert archive.read_text() == "made earlier"
    assert leftovers(tmp_path) == []
    out = CliRunner().invoke(main, ["warm-up"])
    assert out.exit_code == 0
    assert f"warm-up: the class archive is there: {archive}" in out.output


def test_an_archive_is_per_driver_layout(tmp_path: Path) -> None:
    launcher = SparkLauncher(settings(data_dir=str(tmp_path / "d")))
    plain = launcher.class_archive_for(WARMUP_CONF)
    assert launcher.class_archive_for({**WARMUP_CONF, "spark.driver.memory": "4g"}) \
        not in (None, plain)
    assert launcher.class_archive_for({"spark.driver.extraJavaOptions": "-Xshare:off"}) \
        is None


@pytest.mark.spark
def test_a_warm_up_that_times_out_stops_its_application_and_keeps_its_logs(
        tmp_path: Path) -> None:
    with pytest.raises(WarmUpError, match=r"no class archive after 3 s \(the warm-up's "
                                          r"logs are in .*/logs\)"):
        warm_up(settings(), timeout=3.0)
    [kept] = leftovers(tmp_path)
    work = tmp_path / kept / "topologies" / WARMUP_ID
    record = json.loads((work / "launch.json").read_text())
    assert record["pid"] and record["stopped"]
    assert session_members(record["pid"], record["start_ticks"]) == []
    assert (work / "logs" / "stderr").is_file()
    assert not list((tmp_path / "cache" / "nimbus-thrift" / "spark-cds").glob("*.jsa"))
    out = CliRunner().invoke(main, ["warm-up", "--timeout", "0.5"])
    assert out.exit_code == 1
    assert "Error: warm-up failed: no class archive after 0.5 s" in out.output
