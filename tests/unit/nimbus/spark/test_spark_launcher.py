"""The spark launcher against a fake spark-submit (tests/support/fake_spark_submit.py): real
processes, sessions and signals, no JVM. What runs Spark for real is marked ``spark``
elsewhere."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

import pytest
from support.nimbus import (N, FakeClock, FakeLauncher, common, fields, make_zip, shell,
                            shuffle, upload, wordcount)
from support.polling import wait_for_value

from nimbus_thrift import render
from nimbus_thrift.nimbus.config import ConfigError, NimbusConfig, load_config
from nimbus_thrift.nimbus.service.handler import NimbusHandler
from nimbus_thrift.nimbus.launcher import LauncherError, LaunchSpec
from nimbus_thrift.nimbus.launcher_choice import load_launcher
from nimbus_thrift.nimbus.spark.archive import (DEFAULT_JAVA_OPTIONS, EXTRA_JAVA_OPTIONS,
                                                JAVA_OPTION_VARIABLES, JVM_CRASH,
                                                ClassArchive, driver_java_options)
from nimbus_thrift.nimbus.spark.install import (find_spark_home, mirror_spark_home,
                                                tidy_mirrors)
from nimbus_thrift.nimbus.spark.launcher import SparkLauncher
from nimbus_thrift.nimbus.spark.master import local_threads, master_ui_url
from nimbus_thrift.nimbus.spark.proctree import proc_cmdline, proc_info, session_members
from nimbus_thrift.nimbus.spark.properties import parse_properties
from nimbus_thrift.nimbus.spark.status import SPARK_COMPONENT, last_stderr_line
from nimbus_thrift.nimbus.spark.submit import SPARK_MAIN
from nimbus_thrift.nimbus.state.store import Store
from nimbus_thrift.topology.validate import check_topology
from nimbus_thrift.runner.rundir import RunDir
from nimbus_thrift.runner.spec import RunSpec, from_plan
from nimbus_thrift.topology.streams import STATEFUL_KEY

FAKE = Path(__file__).parents[3] / "support" / "fake_spark_submit.py"
FAKE_SUBMIT = shlex.join([sys.executable, str(FAKE)])
DEADLINE = 30.0
T = TypeVar("T")


def wait_for(predicate: Callable[[], T], what: str, timeout: float = DEADLINE) -> T:
    return wait_for_value(predicate, what, timeout)


def config(tmp_path: Path, **settings: Any) -> NimbusConfig:
    return load_config(env={}, flags={"data_dir": str(tmp_path / "data"),
                                      "spark_submit": FAKE_SUBMIT, "restart_failed": False,
                                      "spark_master": "local[2]", **settings})


def launch_spec(cfg: NimbusConfig, topology_id: str = "wc-1-1", *, topology: Any = None,
                conf: dict[str, Any] | None = None, executors: dict[str, int] | None = None,
                active: bool = True, code: bytes | None = None,
                behaviour: dict[str, Any] | None = None) -> LaunchSpec:
    """A LaunchSpec as the handler makes it: work dir ``data/topologies/<id>``, and the
    fake's behaviour written there first."""
    topology = topology if topology is not None else wordcount()
    conf = {"topology.name": "wc", **(conf or {})}
    plan = check_topology(topology, conf, None)
    work = cfg.data_dir / "topologies" / topology_id
    work.mkdir(parents=True, exist_ok=True)
    (work / "fake.json").write_text(json.dumps(behaviour or {}))
    code_path = cfg.data_dir / "inbox" / f"{topology_id}.zip"
    code_path.parent.mkdir(parents=True, exist_ok=True)
    code_path.write_bytes(code if code is not None else make_zip())
    return LaunchSpec(topology_id=topology_id, name="wc", topology=topology, conf=conf,
                      code_path=code_path, work_dir=work, num_workers=plan.num_workers,
                      executors={**plan.executors, **(executors or {})}, tasks=plan.tasks,
                      active=active, plan=plan)


def invocations(where: LaunchSpec | Path) -> list[dict[str, Any]]:
    """What the fake recorded of each of its starts in a work directory."""
    work = where.work_dir if isinstance(where, LaunchSpec) else where
    path = work / "fake_invocations.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def launched_pid(spec: LaunchSpec) -> int:
    """The pid the launcher last started, from its record."""
    return int(json.loads((spec.work_dir / "launch.json").read_text())["pid"])


def children(spec: LaunchSpec) -> list[int]:
    return json.loads((spec.work_dir / "fake_children.json").read_text())


def live(pid: int) -> bool:
    info = proc_info(pid)
    return info is not None and info.live


def state_is(launcher: SparkLauncher, spec: LaunchSpec, state: str) -> Callable[[], Any]:
    def check() -> Any:
        status = launcher.status(spec.topology_id)
        return status if status.state == state else None
    return check


class Launchers:
    """Makes launchers; at teardown stops what they run and closes them."""

    def __init__(self, tmp_path: Path):
        self.tmp_path = tmp_path
        self.made: list[SparkLauncher] = []

    def __call__(self, cfg: NimbusConfig | None = None, **kw: Any) -> SparkLauncher:
        kw = {"term_grace": 1.0, "monitor_secs": 0.05, "restart_backoff": 0.0, **kw}
        launcher = SparkLauncher(cfg or config(self.tmp_path), **kw)
        self.made.append(launcher)
        return launcher

    def close(self) -> None:
        for launcher in self.made:
            launcher.close()
            for topology_id in list(launcher._runs):
                launcher.stop(topology_id, 0)      # also reaps children of this one


@pytest.fixture
def launchers(tmp_path: Path) -> Iterator[Launchers]:
    made = Launchers(tmp_path)
    try:
        yield made
    finally:
        made.close()


# --- the command line and environment ---------------------------------------------------

def _confs(command: list[str]) -> dict[str, str]:
    """The Spark settings a command passes: those of its properties file as it is now
    (a later launch in the same directory rewrites it), and any ``--conf``."""
    confs = {}
    if "--properties-file" in command:
        path = Path(command[command.index("--properties-file") + 1])
        confs.update(parse_properties(path.read_text(encoding="ascii")))
    confs.update(command[i + 1].split("=", 1) for i, a in enumerate(command)
                 if a == "--conf")
    return confs


def _run_spec(conf: dict[str, Any]) -> RunSpec:
    plan = check_topology(wordcount(split_par=2, count_par=3), conf, None)
    return from_plan("wc-1-1", "wc", plan)


@pytest.fixture
def no_java_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """The JVM options of the environment would change the launcher's."""
    for name in JAVA_OPTION_VARIABLES:
        monkeypatch.delenv(name, raising=False)


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
    confs = _confs(command)
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
    again = _confs(launcher.command(_run_spec({}), work, 4567, 2))
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
    confs = _confs(command)
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


def _fake_home(root: Path) -> Path:
    home = root / "pyspark"
    for directory in ("bin", "jars", "python/lib", "python/pyspark"):
        (home / directory).mkdir(parents=True)
    for name in ("bin/spark-submit", "jars/spark-core.jar", "python/lib/pyspark.zip",
                 "python/lib/py4j-0.10.9.9-src.zip", "python/lib/README", "version.py"):
        (home / name).write_text(name)
    return home


def test_mirror_of_spark_home(tmp_path: Path) -> None:
    home = _fake_home(tmp_path)
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


# --- the lifecycle ---------------------------------------------------------------------

def test_launch_starting_then_running(tmp_path: Path, launchers: Launchers) -> None:
    cfg = config(tmp_path)
    launcher = launchers(cfg)
    # With the Spark UI it asked for (off by default: see the test after this one).
    spec = launch_spec(cfg, behaviour={"gate_start": True, "gate_run": True},
                       conf={"spark.ui.enabled": True})
    began = time.monotonic()
    launcher.launch(spec)
    assert time.monotonic() - began < 5      # never waits for Spark to start
    record = json.loads((spec.work_dir / "launch.json").read_text())
    pid = record["pid"]
    assert record["pgid"] == record["sid"] == pid and record["start_ticks"] > 0
    status = launcher.status(spec.topology_id)
    assert status.state == "starting" and status.assigned
    assert status.detail.startswith(f"starting: waiting for the Spark application (pid {pid}")

    # The work directory the driver reads.
    rd = RunDir(spec.work_dir)
    run_spec = RunSpec.read(rd.spec)
    assert {c: r.parallelism for c, r in run_spec.components.items()} == \
        {"sentences": 1, "split": 2, "count": 3}
    assert (rd.code / "wordcount" / "components.py").is_file()
    assert (spec.work_dir / "code.zip").read_bytes() == spec.code_path.read_bytes()
    assert rd.control_state() == "active"

    # The process: its own session, the environment of section 1 of the notes.
    (invocation,) = wait_for(lambda: invocations(spec), "the fake to start")
    assert invocation["pid"] == pid and invocation["sid"] == pid == invocation["pgid"]
    assert invocation["cwd"] == str(spec.work_dir)
    env = invocation["env"]
    assert env["PYSPARK_PYTHON"] == sys.executable and env["SPARK_LOCAL_IP"] == "127.0.0.1"
    assert env["PYTHONPATH"].startswith(str(rd.code) + os.pathsep)
    assert invocation["argv"][-2:] == ["--workdir", str(spec.work_dir)]

    (spec.work_dir / "fake.go-start").touch()
    status = wait_for(lambda: (s := launcher.status(spec.topology_id)).detail.startswith(
        "starting: Spark application local-") and s, "the application to be up")
    port = record["ui_port"]
    assert status.detail.endswith(f"is up, waiting for the first batch, Spark UI "
                                  f"http://127.0.0.1:{port}")
    (spec.work_dir / "fake.go-run").touch()
    status = wait_for(state_is(launcher, spec, "running"), "running")
    assert re.fullmatch(rf"running: batch \d+, 2\.0k tuples/s, Spark UI "
                        rf"http://127\.0\.0\.1:{port}", status.detail), status.detail
    assert (status.host, status.port, status.ui_url) == \
        ("127.0.0.1", port, f"http://127.0.0.1:{port}")
    assert status.started_at is not None and abs(status.started_at - time.time()) < 60
    assert set(status.components) == {"sentences", "split", "count"}
    assert status.components["split"].rate == 2000.0
    assert status.components["split"].latency_ms == 50.0
    assert len(invocations(spec)) == 1
    assert invocations(spec)[0]["confs"]["spark.ui.port"] == str(port)


def test_the_spark_ui_is_off_unless_the_topology_turns_it_on(
        tmp_path: Path, launchers: Launchers) -> None:
    cfg = config(tmp_path)
    launcher = launchers(cfg)
    spec = launch_spec(cfg, conf={"spark.ui.port": 4040})
    launcher.launch(spec)
    status = wait_for(state_is(launcher, spec, "running"), "running")
    (invocation,) = invocations(spec)
    assert invocation["confs"]["spark.ui.enabled"] == "false"
    assert "spark.ui.port" not in invocation["confs"]          # no port taken for it
    assert json.loads((spec.work_dir / "launch.json").read_text())["ui_port"] == 0
    assert re.fullmatch(r"running: batch \d+, 2\.0k tuples/s", status.detail), \
        status.detail
    assert (status.port, status.ui_url) == (0, "")
    # A status file naming a UI anyway is not believed: the launcher turned it off.
    status_file = spec.work_dir / "status.json"
    raw = json.loads(status_file.read_text())
    launcher.pause(spec.topology_id)
    wait_for(state_is(launcher, spec, "paused"), "paused")
    raw.update(state="paused", ui_url="http://127.0.0.1:4040")
    status_file.write_text(json.dumps(raw))
    status = launcher.status(spec.topology_id)
    assert "Spark UI" not in status.detail and status.ui_url == ""
    assert render.spark_ui(status.detail) == ""


def test_pause_and_resume(tmp_path: Path, launchers: Launchers) -> None:
    cfg = config(tmp_path)
    launcher = launchers(cfg)
    spec = launch_spec(cfg, active=False)
    launcher.launch(spec)
    assert RunDir(spec.work_dir).control_state() == "paused"
    status = wait_for(state_is(launcher, spec, "paused"), "paused")
    assert status.detail == "paused: spouts stopped, no batch yet"     # and no UI
    launcher.resume(spec.topology_id)
    wait_for(state_is(launcher, spec, "running"), "running")
    launcher.pause(spec.topology_id)
    status = wait_for(state_is(launcher, spec, "paused"), "paused again")
    assert re.fullmatch(r"paused: spouts stopped, batch \d+", status.detail)
    assert len(invocations(spec)) == 1


def test_stop_is_graceful_when_the_driver_obeys(tmp_path: Path,
                                                launchers: Launchers) -> None:
    cfg = config(tmp_path)
    launcher = launchers(cfg)
    spec = launch_spec(cfg)
    launcher.launch(spec)
    wait_for(state_is(launcher, spec, "running"), "running")
    popen = launcher._runs[spec.topology_id].popen
    assert popen is not None
    ticks = proc_info(popen.pid).start_ticks               # type: ignore[union-attr]
    grandchildren = children(spec)
    launcher.stop(spec.topology_id, 20)
    assert popen.returncode == 0                           # it stopped by itself
    assert session_members(popen.pid, ticks) == []
    assert not any(live(pid) for pid in grandchildren)
    assert RunDir(spec.work_dir).control_state() == "stop"
    status = launcher.status(spec.topology_id)          # from launch.json and status.json
    assert (status.state, status.detail) == \
        ("stopped", "stopped: the Spark application stopped (exit code 0)")
    assert not status.assigned


def test_stop_escalates_to_sigkill_and_leaves_nothing(tmp_path: Path,
                                                      launchers: Launchers) -> None:
    cfg = config(tmp_path)
    launcher = launchers(cfg, term_grace=0.5)
    spec = launch_spec(cfg, behaviour={"ignore_stop": True})
    launcher.launch(spec)
    wait_for(state_is(launcher, spec, "running"), "running")
    grandchildren = wait_for(lambda: children(spec), "the grandchildren")
    popen = launcher._runs[spec.topology_id].popen
    assert popen is not None
    ticks = proc_info(popen.pid).start_ticks               # type: ignore[union-attr]
    # One grandchild is in a process group of its own, as pyspark.daemon puts itself.
    wait_for(lambda: {getattr(proc_info(pid), "pgrp", 0) for pid in grandchildren} ==
             {popen.pid, grandchildren[1]}, "the grandchild's own process group")
    began = time.monotonic()
    launcher.stop(spec.topology_id, 0.3)
    assert time.monotonic() - began < 10
    assert popen.returncode == -signal.SIGKILL
    assert session_members(popen.pid, ticks) == []
    assert not any(live(pid) for pid in grandchildren)
    status = launcher.status(spec.topology_id)
    assert (status.state, status.detail) == \
        ("stopped", "stopped: the Spark application was stopped (killed by SIGKILL)")


def test_a_restarted_daemon_adopts_what_runs(tmp_path: Path, launchers: Launchers) -> None:
    cfg = config(tmp_path)
    first = launchers(cfg)
    spec = launch_spec(cfg, conf={"spark.ui.enabled": True})       # its UI port is kept
    first.launch(spec)
    wait_for(state_is(first, spec, "running"), "running")
    first.close()                                       # the daemon goes; Spark stays
    pid = invocations(spec)[0]["pid"]

    second = launchers(cfg)
    second.launch(spec)                                 # the handler's recover()
    assert launched_pid(spec) == pid                    # adopted, not started again
    assert second._runs[spec.topology_id].popen is None
    status = wait_for(state_is(second, spec, "running"), "running, adopted")
    port = json.loads((spec.work_dir / "launch.json").read_text())["ui_port"]
    assert status.detail.endswith(f"Spark UI http://127.0.0.1:{port}")
    second.pause(spec.topology_id)
    wait_for(state_is(second, spec, "paused"), "paused by the second daemon")

    grandchildren = children(spec)
    ticks = proc_info(pid).start_ticks                     # type: ignore[union-attr]
    second.stop(spec.topology_id, 20)                   # not its child: watched in /proc
    assert session_members(pid, ticks) == []
    assert not any(live(p) for p in grandchildren)
    assert second.status(spec.topology_id).detail == \
        "stopped: the Spark application stopped (exit code unknown)"


def test_a_restarted_daemon_relaunches_what_died(tmp_path: Path,
                                                 launchers: Launchers) -> None:
    cfg = config(tmp_path)
    first = launchers(cfg)
    spec = launch_spec(cfg)
    first.launch(spec)
    wait_for(state_is(first, spec, "running"), "running")
    first.close()
    pid = invocations(spec)[0]["pid"]
    os.killpg(pid, signal.SIGKILL)                      # Spark dies while nobody watches
    wait_for(lambda: not live(pid), "the fake to die")

    second = launchers(cfg)
    second.launch(spec)
    wait_for(lambda: len(invocations(spec)) == 2, "the relaunch from the checkpoint")
    status = wait_for(state_is(second, spec, "running"), "running again")
    assert "; relaunched from the checkpoint after: the Spark application exited without " \
           "a final status (running) (exit code unknown; see " in status.detail, \
        status.detail                                   # not the new daemon's child


def test_stopped_or_finished_applications_are_not_relaunched(tmp_path: Path,
                                                             launchers: Launchers) -> None:
    cfg = config(tmp_path)
    launcher = launchers(cfg)
    done = launch_spec(cfg, "done-1-1", behaviour={"finish_after": 2})
    launcher.launch(done)
    status = wait_for(state_is(launcher, done, "finished"), "finished")
    assert status.detail == "finished: the bounded run completed after batch 2"
    stopped = launch_spec(cfg, "stopped-2-1")
    launcher.launch(stopped)
    wait_for(state_is(launcher, stopped, "running"), "running")
    launcher.stop(stopped.topology_id, 20)

    again = launchers(cfg)
    pids = launched_pid(done), launched_pid(stopped)
    again.launch(done)
    again.launch(stopped)
    assert (launched_pid(done), launched_pid(stopped)) == pids
    assert len(invocations(done)) == len(invocations(stopped)) == 1
    assert again.status(done.topology_id).state == "finished"
    assert again.status(stopped.topology_id).state == "stopped"


@pytest.mark.parametrize("mode, code, detail, component", [
    ("silent", 3, "failed: the Spark application exited without a final status (running): "
                  "ValueError: bad word 'x' (exit code 3; see {stderr})", SPARK_COMPONENT),
    ("status", 1, "failed: bolt 'split' raised ValueError: bad word (exit code 1; see "
                  "{stderr})", "split"),
])
def test_a_crash_is_failed_with_the_reason(tmp_path: Path, launchers: Launchers, mode: str,
                                           code: int, detail: str, component: str) -> None:
    cfg = config(tmp_path)
    launcher = launchers(cfg)
    spec = launch_spec(cfg, behaviour={"crash_after": 2, "crash_mode": mode,
                                       "exit_code": code})
    launcher.launch(spec)
    status = wait_for(lambda: (s := launcher.status(spec.topology_id)).state == "failed"
                      and "exit code" in s.detail and s, "the crash")
    expected = detail.format(stderr=spec.work_dir / "logs" / "stderr")
    assert status.detail == expected
    assert not status.assigned
    assert [(c, m) for c, m, _ in status.errors] == [(component, expected[len("failed: "):])]
    pid = launched_pid(spec)
    launcher.check()                                   # restart_failed is off
    assert launched_pid(spec) == pid


def test_a_failed_application_is_relaunched_from_its_checkpoint(
        tmp_path: Path, launchers: Launchers) -> None:
    cfg = config(tmp_path, restart_failed=True, max_restarts=2)
    launcher = launchers(cfg)
    spec = launch_spec(cfg, behaviour={"crash_after": 1, "crash_runs": 1, "exit_code": 3})
    launcher.launch(spec)
    status = wait_for(lambda: (s := launcher.status(spec.topology_id)).state == "running"
                      and len(invocations(spec)) == 2 and s, "the relaunch")
    assert re.fullmatch(r"running: batch \d+, 2\.0k tuples/s; "
                        r"relaunched from the checkpoint after a failure \(1 of 2\): the Spark "
                        r"application exited without a final status \(running\): "
                        r"ValueError: bad word 'x' \(exit code 3; see \S+\)",
                        status.detail), status.detail
    assert [c for c, _, _ in status.errors] == [SPARK_COMPONENT]   # the crash is kept


def test_relaunches_are_bounded_and_activate_tries_again(tmp_path: Path,
                                                         launchers: Launchers) -> None:
    cfg = config(tmp_path, restart_failed=True, max_restarts=1)
    launcher = launchers(cfg)
    spec = launch_spec(cfg, behaviour={"crash_after": 0, "exit_code": 3})
    launcher.launch(spec)
    status = wait_for(lambda: (s := launcher.status(spec.topology_id)).detail.endswith(
        "; gave up after 1 restarts (deactivate and activate the topology to try "
        "again)") and s,
        "giving up")
    assert status.state == "failed" and len(invocations(spec)) == 2
    assert len(status.errors) == 2
    launcher.resume(spec.topology_id)
    wait_for(lambda: len(invocations(spec)) >= 3, "the relaunch by activate")


def test_rebalance_rewrites_the_spec_and_relaunches(tmp_path: Path,
                                                    launchers: Launchers) -> None:
    cfg = config(tmp_path)
    launcher = launchers(cfg)
    spec = launch_spec(cfg)
    launcher.launch(spec)
    wait_for(state_is(launcher, spec, "running"), "running")
    old = invocations(spec)[0]["pid"]
    old_children = children(spec)
    launcher.pause(spec.topology_id)                    # as the handler does
    changed = dataclasses.replace(spec, executors={**spec.executors, "split": 1},
                                  num_workers=3)
    launcher.rebalance(changed)
    assert not live(old) and not any(live(p) for p in old_children)
    run_spec = RunSpec.read(RunDir(spec.work_dir).spec)
    assert run_spec.components["split"].parallelism == 1
    (first, second) = wait_for(lambda: (i := invocations(spec))[1:] and i, "the relaunch")
    # The same settings, but a new authentication secret for the new application.
    secrets = [i["confs"].pop("spark.authenticate.secret") for i in (first, second)]
    assert second["pid"] != old and second["confs"] == first["confs"]
    assert secrets[0] != secrets[1]
    assert RunDir(spec.work_dir).control_state() == "active"
    status = wait_for(state_is(launcher, spec, "running"), "running again")
    assert "relaunched" not in status.detail


def test_a_zip_member_escaping_the_work_dir_is_refused(tmp_path: Path,
                                                       launchers: Launchers) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("wordcount/components.py", "class SentenceSpout: pass\n")
        zf.writestr("../escaped.py", "x = 1\n")
    cfg = config(tmp_path)
    launcher = launchers(cfg)
    spec = launch_spec(cfg, code=buf.getvalue())
    with pytest.raises(LauncherError, match=r"zip member '../escaped.py' .* would be "
                                            "extracted outside the code directory"):
        launcher.launch(spec)
    assert not (spec.work_dir.parent / "escaped.py").exists()
    assert invocations(spec) == []
    status = launcher.status(spec.topology_id)
    assert status.state == "failed"
    assert status.detail.startswith("failed: could not launch: zip member")


def test_status_reads_status_json_once_per_change(tmp_path: Path, launchers: Launchers,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = config(tmp_path)
    launcher = launchers(cfg)
    spec = launch_spec(cfg, behaviour={"gate_run": True})   # one status.json, then quiet
    launcher.launch(spec)
    wait_for(lambda: launcher.status(spec.topology_id).detail.startswith(
        "starting: Spark application"), "the first status")
    reads = []
    original = RunDir.read_status
    monkeypatch.setattr(RunDir, "read_status",
                        lambda self: reads.append(1) or original(self))
    for _ in range(20):
        launcher.status(spec.topology_id)
    assert reads == []


def test_nodes_on_a_local_master(tmp_path: Path, launchers: Launchers) -> None:
    cfg = config(tmp_path)
    launcher = launchers(cfg)
    (node,) = launcher.nodes()
    assert (node.slots, node.used_slots) == (os.cpu_count(), 0)
    spec = launch_spec(cfg)
    launcher.launch(spec)
    (node,) = launcher.nodes()
    # local[2], count has 3 executors: the application uses 2 threads.
    assert node.used_slots == min(2, os.cpu_count() or 1)
    assert node.node_id.startswith("local-") and node.version == launcher.version


class _Master(BaseHTTPRequestHandler):
    requests: list[str] = []
    body = json.dumps({
        "url": "spark://127.0.0.1:7077", "status": "ALIVE", "cores": 6, "coresused": 2,
        "workers": [
            {"id": "worker-20260101120000-127.0.0.1-40001", "host": "127.0.0.1",
             "port": 40001, "cores": 4, "coresused": 2, "coresfree": 2, "state": "ALIVE"},
            {"id": "worker-20260101110000-127.0.0.2-40001", "host": "127.0.0.2",
             "port": 40001, "cores": 2, "coresused": 0, "coresfree": 2, "state": "DEAD"},
        ]}).encode()

    def do_GET(self) -> None:
        type(self).requests.append(self.path)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: Any) -> None:
        pass


def test_nodes_of_a_standalone_master(tmp_path: Path) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Master)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        cfg = config(tmp_path, spark_master="spark://127.0.0.1:7077",
                     spark_master_ui=f"http://127.0.0.1:{server.server_address[1]}")
        launcher = SparkLauncher(cfg)
        (node,) = launcher.nodes()
        assert (node.node_id, node.host, node.slots, node.used_slots) == \
            ("worker-20260101120000-127.0.0.1-40001", "127.0.0.1", 4, 2)
        assert time.localtime(node.started_at)[:6] == (2026, 1, 1, 12, 0, 0)
        launcher.nodes()
        assert _Master.requests == ["/json/"]                   # cached
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
    # An unreachable master: no nodes, quickly.
    cfg = config(tmp_path, spark_master="spark://127.0.0.1:7077",
                 spark_master_ui=f"http://127.0.0.1:{server.server_address[1]}")
    began = time.monotonic()
    assert SparkLauncher(cfg).nodes() == []
    assert time.monotonic() - began < 5


# --- through the handler ---------------------------------------------------------------

def _handler(tmp_path: Path, launcher: Any) -> tuple[NimbusHandler, FakeClock]:
    cfg = launcher.config if isinstance(launcher, SparkLauncher) else config(tmp_path)
    clock = FakeClock()
    cfg.data_dir.mkdir(parents=True, exist_ok=True)
    store = Store(cfg.data_dir / "nimbus.sqlite3")
    handler = NimbusHandler(N, cfg, store, launcher, clock=clock)
    handler.recover()
    return handler, clock


def _stateful_wordcount() -> Any:
    topology = wordcount(split_par=2, count_par=3)
    topology.bolts["count"] = N.Bolt(
        bolt_object=shell("wordcount.components.CountBolt"),
        common=common({("split", "default"): fields("word")}, {"default": ["word", "count"]},
                      par=3, json_conf=json.dumps({STATEFUL_KEY: True})))
    return topology


def test_rebalancing_a_stateful_bolt_is_refused(tmp_path: Path) -> None:
    handler, _ = _handler(tmp_path, FakeLauncher())
    try:
        handler.submitTopology("wc", upload(handler, make_zip()), "{}", _stateful_wordcount())
        with pytest.raises(N.InvalidTopologyException) as info:
            handler.rebalance("wc", N.RebalanceOptions(wait_secs=0,
                                                       num_executors={"count": 2}))
        assert info.value.msg == (
            "component 'count' is a stateful bolt: its keyed state is partitioned in the "
            "checkpoint, which pins it to the 3 executors it started with, so it cannot "
            "run on 2; kill and resubmit to change it (its state starts empty)")
        # The same count, a stateless bolt, or only the workers: fine.
        handler.rebalance("wc", N.RebalanceOptions(wait_secs=0, num_workers=2,
                                                   num_executors={"count": 3, "split": 1}))
    finally:
        handler.close()
        handler.store.close()


def test_handler_with_the_spark_launcher(tmp_path: Path, launchers: Launchers) -> None:
    launcher = launchers(config(tmp_path))
    handler, clock = _handler(tmp_path, launcher)
    try:
        topology = N.StormTopology(
            spouts=wordcount().spouts,
            bolts={"split": N.Bolt(bolt_object=shell("wordcount.components.SplitBolt"),
                                   common=common({("sentences", "default"): shuffle()},
                                                 {"default": ["word"]}, par=2))},
            state_spouts={})
        handler.submitTopology("wc", upload(handler, make_zip()), "{}", topology)
        (summary,) = handler.getClusterInfo().topologies
        info = wait_for(lambda: (i := handler.getTopologyInfo(summary.id)).sched_status
                        .startswith("running:") and i, "running")
        assert {e.component_id for e in info.executors} == {"sentences", "split"}
        # No Spark UI (off by default): no port, and the CLI names none.
        assert render.spark_ui(info.sched_status) == ""
        assert {(e.host, e.port) for e in info.executors} == {("127.0.0.1", 0)}
        text = render.info_text(info)
        assert "spark ui:" not in text
        assert re.search(r"^split +2 +2 +[\d,]+ +[\d,]+ +2,000\.0 +50\.0$", text, re.M), text
        (node,) = handler.getClusterInfo().supervisors
        assert node.num_used_workers >= 1
        work = handler._work_dir(summary.id)
        pid = invocations(work)[0]["pid"]
        handler.killTopologyWithOpts("wc", N.KillOptions(wait_secs=0))
        assert RunDir(work).control_state() == "paused"
        handler.run_action(summary.id)
        assert handler.background.wait_idle(60)       # the stop runs in the background
        assert not live(pid) and not work.exists()
        assert handler.getClusterInfo().topologies == []
    finally:
        handler.close()
        handler.store.close()


# --- the class archive ------------------------------------------------------------------

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
    home = _fake_home(tmp_path)
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
    home, other = _fake_home(tmp_path), _fake_home(tmp_path / "venv2")
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
    home, other = _fake_home(tmp_path), _fake_home(tmp_path / "venv2")
    kept = mirror_spark_home(home, tmp_path / "mirrors")
    dropped = mirror_spark_home(other, tmp_path / "mirrors")
    assert tidy_mirrors(tmp_path / "mirrors") == []
    shutil.rmtree(other)
    assert tidy_mirrors(tmp_path / "mirrors") == [dropped]
    assert not dropped.exists() and kept.is_dir() and home.is_dir()
    assert (home / "jars" / "spark-core.jar").is_file()     # links removed, not targets


def test_class_archive_dump_needs_a_jvm_command_line(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    home = _fake_home(tmp_path)
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
    return _confs(record["command"]).get(DEFAULT_JAVA_OPTIONS)


def test_one_launch_lists_classes_later_ones_map_the_archive(
        tmp_path: Path, launchers: Launchers, no_java_variables: None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = config(tmp_path)
    launcher = launchers(cfg, cache_dir=tmp_path / "cache")
    launcher.class_archive = ClassArchive(tmp_path / "cds", _fake_home(tmp_path),
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


def test_an_errors_frames_stay_in_the_error_and_out_of_the_one_line_detail():
    from nimbus_thrift.nimbus.spark.status import error_text, first_line
    from nimbus_thrift.runner.rundir import RunState
    frames = 'Traceback (user code):\n  File "split.py", line 9, in process\n    1 / 0'
    last = RunState(state="failed", pid=1, updated_at=0.0, started_at=0.0,
                    error="ZeroDivisionError: division by zero\n" + frames,
                    error_component="split")
    text = error_text(last)
    assert text == "component 'split': ZeroDivisionError: division by zero\n" + frames
    assert first_line(text) == "component 'split': ZeroDivisionError: division by zero"
    plain = RunState(state="failed", pid=1, updated_at=0.0, started_at=0.0, error="boom")
    assert error_text(plain) == "boom"
