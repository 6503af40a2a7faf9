"""The spark launcher's command line and environment (spark-submit, the JVM options,
PySpark's home and its mirror, the cache directory, the settings), against a fake
spark-submit (tests/support/fake_spark_submit.py): no JVM. What runs Spark for real is
marked ``spark`` elsewhere."""

from __future__ import annotations

import os
import re
import shlex
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from launcher_parts import FAKE, config, confs_of, fake_spark_home
from support.nimbus import wordcount

from nimbus_thrift.nimbus.config import ConfigError, NimbusConfig, load_config
from nimbus_thrift.nimbus.launcher_choice import load_launcher
from nimbus_thrift.nimbus.spark.archive import (DEFAULT_JAVA_OPTIONS, EXTRA_JAVA_OPTIONS,
                                                driver_java_options)
from nimbus_thrift.nimbus.spark.install import find_spark_home, mirror_spark_home
from nimbus_thrift.nimbus.spark.launcher import SparkLauncher
from nimbus_thrift.nimbus.spark.master import local_threads, master_ui_url
from nimbus_thrift.nimbus.spark.proctree import proc_info
from nimbus_thrift.nimbus.spark.status import last_stderr_line
from nimbus_thrift.nimbus.spark.submit import SPARK_MAIN
from nimbus_thrift.runner.spec import RunSpec, from_plan
from nimbus_thrift.topology.validate import check_topology


def _run_spec(conf: dict[str, Any]) -> RunSpec:
    plan = check_topology(wordcount(split_par=2, count_par=3), conf, None)
    return from_plan("wc-1-1", "wc", plan)


def test_command_line_on_a_local_master(tmp_path: Path, no_java_variables: None) -> None:
    launcher = SparkLauncher(config(tmp_path))
    work = tmp_path / "w"
    work.mkdir()
    command = launcher.command(_run_spec({
        "spark.executor.memory": "2g", "spark.sql.shuffle.partitions": 4,
        "spark.dynamicAllocation.enabled": False, "spark.ui.port": 1,
        "spark.driver.host": "10.0.0.5", "spark.nested": {"no": 1}, "topology.workers": 2,
        "storm.whatever": "x", "spark.hadoop.fs.s3a.secret.key": "s3cr3t",
        "spark.ui.killEnabled": True, "spark.authenticate": False,
        "spark.authenticate.secret": "mine"}), work, 4567, 2)
    properties = work / "spark.properties"
    assert command == [sys.executable, str(FAKE), "--master", "local[2]",
                       "--name", "topology-wc", "--properties-file", str(properties),
                       "--py-files", str(work / "code.zip"), str(SPARK_MAIN),
                       "--workdir", str(work)]
    # Nothing of the topology's on the command line, which every local account reads.
    assert not any(word in " ".join(command) for word in ("s3cr3t", "2g", "--conf"))
    assert stat.S_IMODE(properties.stat().st_mode) == 0o600
    confs = confs_of(command)
    secret = confs.pop("spark.authenticate.secret")
    assert re.fullmatch(r"[0-9a-f]{64}", secret)
    assert confs == {
        "spark.ui.enabled": "false",                    # no UI unless the topology asks
        "spark.driver.host": "10.0.0.5",                # the topology's wins otherwise
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.streaming.metricsEnabled": "true",
        "spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled": "false",
        "spark.executor.memory": "2g", "spark.sql.shuffle.partitions": "4",
        "spark.dynamicAllocation.enabled": "false",   # no cores.max on a local master
        "spark.hadoop.fs.s3a.secret.key": "s3cr3t",
        # Ours whatever the topology says: its UI port is read back, a UI never kills
        # jobs, and a local application's ports ask for its own fresh secret.
        "spark.ui.killEnabled": "false", "spark.authenticate": "true"}
    again = confs_of(launcher.command(_run_spec({}), work, 4567, 2))
    assert again["spark.authenticate.secret"] not in (secret, "mine")   # one per start


ARCHIVE = "-XX:SharedArchiveFile=/cache/driver-1.jsa"


@pytest.mark.parametrize("conf, env, default", [
    # The class archive's option goes before the topology's own (Spark's order).
    ({}, {}, ARCHIVE),
    ({EXTRA_JAVA_OPTIONS: "-Dx=1 -XX:TieredStopAtLevel=1"}, {}, ARCHIVE),
    # Class data sharing the topology or the environment asks for is theirs.
    ({EXTRA_JAVA_OPTIONS: "-Dx=1 -Xshare:off"}, {}, None),
    ({}, {"JAVA_TOOL_OPTIONS": "-XX:SharedArchiveFile=/mine.jsa"}, None),
    ({}, {"JDK_JAVA_OPTIONS": "-XX:DumpLoadedClassList=/list"}, None),
    # The topology's default options replace the launcher's.
    ({DEFAULT_JAVA_OPTIONS: "-Xss8m"}, {}, "-Xss8m"),
])
def test_the_topologys_jvm_options_are_kept(tmp_path: Path, no_java_variables: None,
                                           monkeypatch: pytest.MonkeyPatch,
                                           conf: dict[str, str], env: dict[str, str],
                                           default: str | None) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    launcher = SparkLauncher(config(tmp_path))
    command = launcher.command(_run_spec(conf), tmp_path, 4567, 1, archive=[ARCHIVE])
    assert shlex.join(command).count(ARCHIVE) == 0       # in the file, not the argv
    confs = confs_of(command)
    assert confs.get(DEFAULT_JAVA_OPTIONS) == default
    assert confs.get(EXTRA_JAVA_OPTIONS) == conf.get(EXTRA_JAVA_OPTIONS)   # untouched


def test_driver_java_options() -> None:
    archive = ["-XX:SharedArchiveFile=/c/a b.jsa"]
    assert driver_java_options([], archive) == archive
    assert driver_java_options(["-XX:+UseG1GC", "-Xcomp"], archive) == archive
    for own in ("-Xshare:off", "-XX:SharedArchiveFile=/mine.jsa",
                "-XX:DumpLoadedClassList=/l", "-XX:+AutoCreateSharedArchive"):
        assert driver_java_options([own], archive) == []
    # A path with a space survives Spark's parsing of the option string (shell rules).
    assert shlex.split(shlex.join(driver_java_options([], archive))) == archive


def test_default_spark_submit_is_the_installed_pyspark(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    home = find_spark_home()
    assert home is not None and (home / "jars").is_dir()
    # No standby driver: one would be a JVM warming up for nothing here (they are
    # tested in test_standby.py).
    launcher = load_launcher("spark", NimbusConfig(data_dir=tmp_path, standby_drivers=0))
    assert isinstance(launcher, SparkLauncher) and launcher.name == "spark"
    assert launcher.standbys is None and launcher._monitor is None
    assert launcher.submit == [str(home / "bin" / "spark-submit")]
    assert re.match(r"^\d+\.\d+", launcher.version)
    assert launcher.cache_dir == tmp_path / "cache" / "nimbus-thrift"
    assert launcher.class_archive is not None
    assert launcher.class_archive.directory == launcher.cache_dir / "spark-cds"
    env = launcher.environment(tmp_path / "w")
    assert env["PYSPARK_PYTHON"] == env["PYSPARK_DRIVER_PYTHON"] == sys.executable
    assert env["SPARK_LOCAL_IP"] == "127.0.0.1"
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(tmp_path / "w" / "code")
    # SPARK_HOME is a mirror of PySpark's, without the zipped PySpark Spark would put
    # first on its Python processes' path.
    mirror = Path(env["SPARK_HOME"])
    assert mirror.parent == launcher.cache_dir / "spark-home"
    assert (mirror / "bin" / "spark-submit").resolve() == \
        (home / "bin" / "spark-submit").resolve()
    assert (mirror / "jars").resolve() == (home / "jars").resolve()
    assert (home / "python" / "lib" / "pyspark.zip").is_file()
    assert not (mirror / "python" / "lib" / "pyspark.zip").exists()


def test_a_configured_spark_submit_gets_pysparks_own_home(tmp_path: Path) -> None:
    launcher = SparkLauncher(config(tmp_path))
    assert launcher.cache_dir is None and launcher.class_archive is None
    assert launcher.environment(tmp_path / "w")["SPARK_HOME"] == str(find_spark_home())


def test_spark_cache_dir_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    mine = tmp_path / "mine"
    launcher = SparkLauncher(load_config(env={}, flags={"data_dir": str(tmp_path / "data"),
                                                        "spark_cache_dir": str(mine)}))
    assert launcher.cache_dir == mine
    assert launcher.class_archive is not None
    assert launcher.class_archive.directory == mine / "spark-cds"
    assert Path(launcher.environment(tmp_path / "w")["SPARK_HOME"]).parent == mine / "spark-home"
    # "off": PySpark's own home, no archive, nothing written to any cache.
    off = SparkLauncher(load_config(env={}, flags={"data_dir": str(tmp_path / "data"),
                                                   "spark_cache_dir": "off"}))
    assert off.cache_dir is None and off.class_archive is None
    assert off.environment(tmp_path / "w")["SPARK_HOME"] == str(find_spark_home())
    assert not (tmp_path / "xdg").exists()
    # A directory given to the launcher itself wins over the setting.
    given = SparkLauncher(load_config(env={}, flags={"data_dir": str(tmp_path / "data"),
                                                     "spark_cache_dir": "off"}),
                          cache_dir=tmp_path / "given")
    assert given.cache_dir == tmp_path / "given"
    # With a configured spark-submit the setting still applies when it names a directory.
    assert SparkLauncher(config(tmp_path, spark_cache_dir=str(mine))).cache_dir == mine


def test_mirror_of_spark_home(tmp_path: Path) -> None:
    home = fake_spark_home(tmp_path)
    mirror = mirror_spark_home(home, tmp_path / "mirrors")
    assert sorted(p.name for p in mirror.iterdir()) == ["bin", "jars", "python",
                                                        "version.py"]
    assert (mirror / "jars" / "spark-core.jar").read_text() == "jars/spark-core.jar"
    assert (mirror / "python" / "pyspark").resolve() == (home / "python" / "pyspark")
    assert [p.name for p in (mirror / "python" / "lib").iterdir()] == ["README"]
    # Made once; a changed home gets a mirror of its own (a running one keeps its).
    assert mirror_spark_home(home, tmp_path / "mirrors") == mirror
    (home / "sbin").mkdir()
    other = mirror_spark_home(home, tmp_path / "mirrors")
    assert other != mirror and (other / "sbin").is_dir() and mirror.is_dir()
    assert sorted(p.name for p in (tmp_path / "mirrors").iterdir()) == \
        sorted([mirror.name, other.name])           # no temporary directory left


def test_the_launcher_does_not_import_pyspark() -> None:
    code = ("import sys; import nimbus_thrift.nimbus.spark.launcher as m; "
            "m.SparkLauncher(None); assert 'pyspark' not in sys.modules, 'imported'")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr


def test_spark_launcher_is_the_default() -> None:
    cfg = NimbusConfig()
    assert (cfg.launcher, cfg.spark_submit, cfg.spark_master_ui, cfg.restart_failed,
            cfg.max_restarts, cfg.stop_grace_secs) == ("spark", "", "", True, 3, 30.0)


@pytest.mark.parametrize("text, value", [("no", False), ("TRUE", True), ("0", False),
                                         ("on", True)])
def test_boolean_settings_from_the_environment(text: str, value: bool) -> None:
    cfg = load_config(env={"NIMBUS_THRIFT_RESTART_FAILED": text})
    assert cfg.restart_failed is value


def test_new_settings_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="NIMBUS_THRIFT_RESTART_FAILED: restart_failed "
                                          "must be true or false, not 'maybe'"):
        load_config(env={"NIMBUS_THRIFT_RESTART_FAILED": "maybe"})
    with pytest.raises(ConfigError, match="spark_master_ui must be an http:// or https:// "
                                          "URL, not 'ftp://m'"):
        load_config(env={}, flags={"spark_master_ui": "ftp://m"})
    with pytest.raises(ConfigError, match="max_restarts must be at least 0, not -1"):
        load_config(env={}, flags={"max_restarts": -1})
    with pytest.raises(ConfigError, match="stop_grace_secs must be a positive number"):
        load_config(env={}, flags={"stop_grace_secs": 0})
    (tmp_path / "c.yaml").write_text("restart-failed: false\nspark-master-ui: "
                                     "http://m:9090\nmax-restarts: 0\n")
    cfg = load_config(tmp_path / "c.yaml", env={})
    assert (cfg.restart_failed, cfg.spark_master_ui, cfg.max_restarts) == \
        (False, "http://m:9090", 0)


def test_helpers() -> None:
    assert [local_threads(m) for m in ("local", "local[3]", "local[4,2]", "spark://m:7077",
                                       "yarn")] == [1, 3, 4, None, None]
    assert local_threads("local[*]") == os.cpu_count()
    assert master_ui_url("spark://m1:7077,m2:7077", "") == "http://m1:8080/json/"
    assert master_ui_url("spark://m1:7077", "http://ui:9090/") == "http://ui:9090/json/"
    assert master_ui_url("local[*]", "") is None
    me = proc_info(os.getpid())
    assert me is not None and me.live and me.session == os.getsid(0)


def test_last_stderr_line(tmp_path: Path) -> None:
    path = tmp_path / "stderr"
    path.write_text("26/01/01 12:00:00 INFO SparkContext: Running Spark version 4.3.0\n"
                    "Traceback (most recent call last):\n"
                    '  File "x.py", line 1, in <module>\n'
                    "pyspark.errors.exceptions.captured.StreamingQueryException: "
                    "[STREAM_FAILED] boom\n"
                    "\tat org.apache.spark.Foo(Foo.scala:1)\n"
                    "26/01/01 12:00:01 INFO ShutdownHookManager: Deleting directory\n\n")
    assert last_stderr_line(path) == ("pyspark.errors.exceptions.captured."
                                      "StreamingQueryException: [STREAM_FAILED] boom")
    path.write_text("26/01/01 12:00:00 INFO x: y\nError: Could not find or load main class\n")
    assert last_stderr_line(path) == "Error: Could not find or load main class"
    path.write_text("26/01/01 12:00:00 INFO x: y\nsomething odd\n")
    assert last_stderr_line(path) == "something odd"
    path.write_text("ValueError: the launch before\n--- nimbus-thrift relaunch at ...\n"
                    "26/01/01 12:00:00 INFO x: y\n")
    assert last_stderr_line(path) == ""                 # only this launch's lines count
    assert last_stderr_line(tmp_path / "missing") == ""
