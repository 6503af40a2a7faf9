"""The spark launcher's class archive (one launch lists the classes a driver loads, a
JVM dumps them into an archive, later launches map it; tidying what a gone
installation used), against a fake spark-submit and a fake java: no JVM."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest
from launcher_parts import (Launchers, config, confs_of, fake_spark_home, launch_spec,
                            state_is, wait_for)

from nimbus_thrift.nimbus.launcher import LaunchSpec
from nimbus_thrift.nimbus.spark.archive import DEFAULT_JAVA_OPTIONS, JVM_CRASH, ClassArchive
from nimbus_thrift.nimbus.spark.install import mirror_spark_home, tidy_mirrors
from nimbus_thrift.nimbus.spark.proctree import proc_cmdline


#: Stands in for java: dumps an "archive" of the class list it is given (or fails, if
#: FAKE_JAVA_FAIL is set), and otherwise sleeps like an application's JVM.
FAKE_JAVA = f"""#!{sys.executable}
import json, os, sys, time
if "-Xshare:dump" in sys.argv:
    with open(os.environ["FAKE_JAVA_LOG"], "a") as f:
        f.write(json.dumps(sys.argv[1:]) + "\\n")
    value = {{a.split("=", 1)[0]: a.split("=", 1)[1] for a in sys.argv if "=" in a}}
    with open(value["-XX:SharedArchiveFile"], "w") as out:
        out.write("half" if os.environ.get("FAKE_JAVA_FAIL") else
                  "archive of " + open(value["-XX:SharedClassListFile"]).read())
    sys.exit(1 if os.environ.get("FAKE_JAVA_FAIL") else 0)
time.sleep(60)
"""


def _fake_java(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    java = tmp_path / "java"
    java.write_text(FAKE_JAVA)
    java.chmod(0o755)
    monkeypatch.setenv("FAKE_JAVA_LOG", str(tmp_path / "java.log"))
    return java


@pytest.mark.parametrize("fails", [False, True])
def test_class_archive_dump(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                            fails: bool) -> None:
    java = _fake_java(tmp_path, monkeypatch)
    if fails:
        monkeypatch.setenv("FAKE_JAVA_FAIL", "1")
    home = fake_spark_home(tmp_path)
    archive = ClassArchive(tmp_path / "cds", home, java)
    key = archive.key(str(home), "", ["-XX:+UseSerialGC"])
    assert key != archive.key(str(home), "extra.jar", ["-XX:+UseSerialGC"])
    assert key != archive.key(str(home), "", [])
    options, mapped, classes = archive.options(key, record=True)
    assert classes is not None and mapped is None
    assert options == [f"-XX:DumpLoadedClassList={classes}"]
    assert archive.options(key, record=False) == ([], None, None)
    # What the JVM listed so far (its last line still being written).
    classes.write_text("java/lang/Object id: 1\norg/x/Y id: 2\norg/x/Z i")
    jvm = [str(java), "-Xmx1g", "-XX:+UseSerialGC", "-Dx=1", "-cp", "conf:jars/*",
           "org.apache.spark.deploy.SparkSubmit", "-Xmx9g"]
    assert archive.dump(classes, jvm)
    assert not classes.exists() and archive.dumping

    def ended() -> bool:
        archive.poll()
        return not archive.dumping
    wait_for(ended, "the dump to end")
    args = json.loads((tmp_path / "java.log").read_text())
    assert args[:3] == ["-Xmx1g", "-XX:+UseSerialGC", "-Xshare:dump"]
    assert args[-2:] == ["-cp", "conf:jars/*"]
    left = sorted(p.name for p in archive.directory.iterdir())
    if fails:
        assert [name for name in left if not name.endswith(".log")] == []
        assert archive.options(key, record=False) == ([], None, None)
        return
    assert left == [f"driver-{key}.jsa", f"driver-{key}.json"]
    assert json.loads((archive.directory / f"driver-{key}.json").read_text()) == \
        {"spark_home": str(home), "java": str(java)}
    assert archive.archive(key).read_text() == \
        "archive of java/lang/Object id: 1\norg/x/Y id: 2\n"       # whole lines only
    assert archive.options(key, record=True) == \
        ([f"-XX:SharedArchiveFile={archive.archive(key)}"], archive.archive(key), None)


def test_tidy_deletes_what_only_a_gone_installation_used(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    java = _fake_java(tmp_path, monkeypatch)
    home, other = fake_spark_home(tmp_path), fake_spark_home(tmp_path / "venv2")
    mine = ClassArchive(tmp_path / "cds", home, java)
    theirs = ClassArchive(tmp_path / "cds", other, java)
    made = {}
    for name, archive in (("mine", mine), ("theirs", theirs)):
        key = archive.key(str(home), name, [])
        _, _, classes = archive.options(key, record=True)
        assert classes is not None
        classes.write_text("java/lang/Object id: 1\n")
        assert archive.dump(classes, [str(java), "-cp", "jars/*", "Main"])
        wait_for(lambda: (archive.poll(), not archive.dumping)[1], "the dump")
        made[name] = archive.archive(key)
    _, _, fresh = mine.options("k1", record=True)      # a launch listing right now
    _, _, stale = mine.options("k2", record=True)      # a daemon killed a day ago
    assert fresh is not None and stale is not None
    fresh.write_text("x")
    stale.write_text("x")
    old = time.time() - 2 * 86400
    os.utime(stale, (old, old))
    unknown = tmp_path / "cds" / "driver-0123.jsa"     # made before notes: kept
    unknown.write_text("archive")
    # Both installations are there: only the stale list goes.
    assert mine.tidy() == [stale]
    assert fresh.exists() and made["theirs"].is_file()

    shutil.rmtree(other)                                # venv2 deleted
    assert sorted(mine.tidy()) == sorted([made["theirs"],
                                          made["theirs"].with_suffix(".json")])
    assert made["mine"].is_file() and fresh.exists() and unknown.exists()
    assert mine.tidy() == []


def test_tidy_mirrors_deletes_those_of_a_gone_spark_home(tmp_path: Path) -> None:
    home, other = fake_spark_home(tmp_path), fake_spark_home(tmp_path / "venv2")
    kept = mirror_spark_home(home, tmp_path / "mirrors")
    dropped = mirror_spark_home(other, tmp_path / "mirrors")
    assert tidy_mirrors(tmp_path / "mirrors") == []
    shutil.rmtree(other)
    assert tidy_mirrors(tmp_path / "mirrors") == [dropped]
    assert not dropped.exists() and kept.is_dir() and home.is_dir()
    assert (home / "jars" / "spark-core.jar").is_file()     # links removed, not targets


def test_class_archive_dump_needs_a_jvm_command_line(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    home = fake_spark_home(tmp_path)
    archive = ClassArchive(tmp_path / "cds", home, _fake_java(tmp_path, monkeypatch))
    _, _, classes = archive.options("k", record=True)
    assert classes is not None
    classes.write_text("java/lang/Object id: 1\n")
    assert proc_cmdline(os.getpid())[1:] == sys.orig_argv[1:]
    assert not archive.dump(classes, proc_cmdline(os.getpid()))   # no class path
    assert not classes.exists() and not archive.dumping
    assert not archive.dump(classes, ["java", "-cp", "x", "Main"])   # no list


def _java_options(spec: LaunchSpec) -> str | None:
    record = json.loads((spec.work_dir / "launch.json").read_text())
    return confs_of(record["command"]).get(DEFAULT_JAVA_OPTIONS)


def test_one_launch_lists_classes_later_ones_map_the_archive(
        tmp_path: Path, launchers: Launchers, no_java_variables: None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = config(tmp_path)
    launcher = launchers(cfg, cache_dir=tmp_path / "cache")
    launcher.class_archive = ClassArchive(tmp_path / "cds", fake_spark_home(tmp_path),
                                          _fake_java(tmp_path, monkeypatch))
    assert launcher.environment(tmp_path)["SPARK_HOME"].startswith(str(tmp_path / "cache"))
    # "starting" until told: no batch, so no dump is tried.
    first = launch_spec(cfg, "wc-1-1", behaviour={"gate_run": True})
    second = launch_spec(cfg, "wc-2-2", behaviour={"gate_run": True})
    launcher.launch(first)
    launcher.launch(second)
    listing = _java_options(first)
    assert listing.startswith("-XX:DumpLoadedClassList=")
    classes = Path(listing.split("=")[-1])
    assert json.loads((first.work_dir / "launch.json").read_text())["class_list"] == \
        str(classes)
    assert _java_options(second) is None                # one launch lists at a time
    classes.write_text("java/lang/Object id: 1\n")     # as the JVM would
    launcher.stop(first.topology_id, 5)
    launcher.stop(second.topology_id, 5)
    assert not classes.exists()                        # the list goes with its JVM

    # Once the archive is made, launches map it; one whose JVM crashed deletes it.
    archive = tmp_path / "cds" / (classes.name.split(".")[0] + ".jsa")
    archive.write_text("archive")
    third = launch_spec(cfg, "wc-3-3", behaviour={"gate_start": True, "crash_after": 0})
    launcher.launch(third)
    assert _java_options(third) == f"-XX:SharedArchiveFile={archive}"
    assert archive.exists()
    with open(third.work_dir / "logs" / "stderr", "a") as err:
        err.write(f"#\n# {JVM_CRASH}:\n#  SIGBUS (0x7)\n")
    (third.work_dir / "fake.go-start").touch()
    wait_for(lambda: not archive.exists(), "the archive to be deleted")
    assert wait_for(state_is(launcher, third, "failed"), "failed")
