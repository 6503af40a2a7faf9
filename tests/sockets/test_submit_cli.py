"""Submitting end to end: the Python API (NimbusClient.submit_topology) and the
``nimbus-thrift submit`` command against a real daemon on a real socket (port 0), with
the ``none`` launcher or a scripted one loaded through the daemon's ``module:factory``
setting (tests/support/scripted_launcher.py), so ``--wait`` follows real sched_status values."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Iterator

import pytest
from click.testing import CliRunner

from support.nimbus import N, port_of
from support.rawthrift import refused_port
from nimbus_thrift.cli import main
from nimbus_thrift.client.client import NimbusClient
from nimbus_thrift.client.errors import NimbusTimeout
from nimbus_thrift.nimbus import NimbusDaemon, load_config
from nimbus_thrift.client.submit import (SubmitError, TopologyFailed, TopologyNotScheduled,
                                         TopologyWaitTimeout)
from nimbus_thrift.topology.package import PackageError, build_zip, load_topology
from support.scripted_launcher import LAUNCH_ERROR_KEY, SCRIPT_KEY

SAMPLES = Path(__file__).parents[1] / "topologies_submit"
CLI = [str(Path(sys.executable).with_name("nimbus-thrift"))]
SCRIPTED = "support.scripted_launcher:factory"
#: Polls fast: the scripted launcher moves one step per status call, not per second.
FAST = 0.01


def start_daemon(tmp_path: Path, launcher: str, **flags: Any) -> NimbusDaemon:
    # The launcher is always named: the daemon's default is "spark".
    config = load_config(env={}, flags={"ui_port": 0, "data_dir": str(tmp_path / "data"), "port": 0,
                                        "launcher": launcher, **flags})
    daemon = NimbusDaemon(config)
    daemon.start()
    return daemon


@pytest.fixture
def none_daemon(tmp_path: Path) -> Iterator[NimbusDaemon]:
    daemon = start_daemon(tmp_path, "none")
    try:
        yield daemon
    finally:
        daemon.stop(grace=5.0)


@pytest.fixture
def scripted_daemon(tmp_path: Path) -> Iterator[NimbusDaemon]:
    daemon = start_daemon(tmp_path, SCRIPTED)
    try:
        yield daemon
    finally:
        daemon.stop(grace=5.0)


def client_of(daemon: NimbusDaemon) -> NimbusClient:
    return NimbusClient("127.0.0.1", port_of(daemon), timeout=10)


def project(tmp_path: Path, sample: str) -> Path:
    dest = tmp_path / "projects" / sample
    shutil.copytree(SAMPLES / sample, dest)
    return dest


def wordcount(tmp_path: Path) -> Path:
    return project(tmp_path, "wordcount") / "wordcount.py"


def script(*states: str) -> dict[str, Any]:
    return {SCRIPT_KEY: list(states)}


def run_cli(daemon: NimbusDaemon, *args: str) -> Any:
    return CliRunner().invoke(main, ["submit", *args, "--port", str(port_of(daemon))])


# --- the Python API, launcher none --------------------------------------------------------

def test_api_submit_round_trip(none_daemon: NimbusDaemon, tmp_path: Path) -> None:
    path = project(tmp_path, "analytics_project") / "analytics" / "topology.py"
    progress: list[tuple[int, int]] = []
    with client_of(none_daemon) as client:
        tid = client.submit_topology(path, conf={"topology.workers": 3, "custom": [1]},
                                     progress=lambda sent, total: progress.append((sent, total)))
        [summary] = client.getClusterInfo().topologies
        assert (summary.id, summary.name, summary.status) == (tid, "analytics-demo", "ACTIVE")
        conf = json.loads(client.getTopologyConf(tid))
        # The code downloads back byte for byte as a local build makes it.
        local = build_zip(path.parent.parent, tmp_path / "local.zip")
        assert client.download_file(tid, tmp_path / "back.zip") == local.size
        assert (tmp_path / "back.zip").read_bytes() == local.path.read_bytes()
        assert conf["nimbus-thrift.code.sha256"] == local.sha256
        assert conf["topology.workers"] == 3 and conf["custom"] == [1]
        # The structure is the DSL's, as submitted.
        assert client.getUserTopology(tid) == load_topology(path).to_thrift()
    assert progress[-1] == (local.size, local.size)


def test_api_submit_a_class_from_a_script_run_as_main(none_daemon: NimbusDaemon,
                                                      tmp_path: Path) -> None:
    """A topology file run with `python wordcount.py` that submits its own class: the
    components must be named wordcount.X, never __main__.X."""
    path = wordcount(tmp_path)
    with path.open("a") as f:
        f.write(textwrap.dedent(f"""

            if __name__ == "__main__":
                from nimbus_thrift.client import NimbusClient
                with NimbusClient("127.0.0.1", {port_of(none_daemon)}) as client:
                    print(client.submit_topology(WordCount, name="from-main"))
            """))
    result = subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                            timeout=60, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    tid = result.stdout.strip()
    with client_of(none_daemon) as client:
        struct = client.getUserTopology(tid)
    assert struct.bolts["split"].bolt_object.shell.script == "wordcount.SplitBolt"


def test_api_submit_inactive(none_daemon: NimbusDaemon, tmp_path: Path) -> None:
    with client_of(none_daemon) as client:
        tid = client.submit_topology(wordcount(tmp_path), inactive=True)
        assert client.getTopologyInfo(tid).status == "INACTIVE"


def test_api_wait_with_launcher_none_says_it_will_not_run(none_daemon: NimbusDaemon,
                                                          tmp_path: Path) -> None:
    seen: list[str] = []
    with client_of(none_daemon) as client:
        with pytest.raises(TopologyNotScheduled) as info:
            client.submit_topology(wordcount(tmp_path), wait=True, timeout=60,
                                   on_status=seen.append)
        # Raised at the first poll, not after the timeout; the topology stays.
        assert seen == ["unscheduled"]
        [summary] = client.getClusterInfo().topologies
    assert info.value.topology_id == summary.id
    assert str(info.value) == (f"topology {summary.id} was submitted but will not run: "
                               f"{seen[0]}")


def test_validation_error_fails_before_any_network_traffic(tmp_path: Path) -> None:
    path = write(tmp_path / "proj" / "broken.py", """
        import sys, pathlib
        sys.path.append(str(pathlib.Path(__file__).parent.parent / "lib"))
        from nimbus_thrift.topology import Spout, Topology
        from outside_lib_abc import Lines

        class Broken(Topology):
            lines = Lines.spec()
        """)
    write(tmp_path / "lib" / "outside_lib_abc.py", """
        from nimbus_thrift.topology import Spout
        class Lines(Spout):
            outputs = ["line"]
        """)
    # Nothing listens on this port: any connection attempt would be NimbusUnavailable.
    with refused_port() as port:
        client = NimbusClient("127.0.0.1", port, connect_attempts=1)
        try:
            with pytest.raises(PackageError, match="module 'outside_lib_abc' .* is not in "
                                                   "the uploaded code"):
                client.submit_topology(path)
        finally:
            sys.modules.pop("outside_lib_abc", None)
            client.close()


def test_taken_name_fails_before_upload(none_daemon: NimbusDaemon, tmp_path: Path) -> None:
    with client_of(none_daemon) as client:
        client.submit_topology(wordcount(tmp_path))
        uploads = len(none_daemon.store.uploads())     # type: ignore[union-attr]
        progress: list[int] = []
        with pytest.raises(N.AlreadyAliveException, match="topology 'wordcount' already "
                                                          "exists"):
            client.submit_topology(wordcount(tmp_path / "again"),
                                   progress=lambda sent, total: progress.append(sent))
    assert progress == [] and len(none_daemon.store.uploads()) == uploads  # type: ignore


def test_code_over_the_daemons_upload_cap_fails_before_upload(tmp_path: Path) -> None:
    daemon = start_daemon(tmp_path, "none", max_upload_bytes=1000)
    try:
        root = project(tmp_path, "analytics_project")
        (root / "analytics" / "data" / "noise.bin").write_bytes(os.urandom(5000))
        with client_of(daemon) as client:
            with pytest.raises(SubmitError, match=r"the code zip is \d,\d+ bytes; nimbus at "
                                                  r".* accepts at most 1,000"):
                client.submit_topology(root / "analytics" / "topology.py")
        assert daemon.store.uploads() == []            # type: ignore[union-attr]
    finally:
        daemon.stop(grace=5.0)


# --- the Python API, --wait through a scripted launcher -----------------------------------

def test_wait_follows_starting_to_running(scripted_daemon: NimbusDaemon,
                                          tmp_path: Path) -> None:
    seen: list[str] = []
    with client_of(scripted_daemon) as client:
        tid = client.submit_topology(
            wordcount(tmp_path), wait=True, poll_interval=FAST, on_status=seen.append,
            conf=script("starting: spark-submit", "starting: spark-submit",
                        "starting: first batch", "running: batch 0"))
        assert client.getTopologyInfo(tid).sched_status == "running"
    # sched_status is Storm's word or two: a new one per state, not per sentence.
    assert seen == ["starting", "running"]


def test_wait_for_an_inactive_topology_ends_paused(scripted_daemon: NimbusDaemon,
                                                   tmp_path: Path) -> None:
    seen: list[str] = []
    with client_of(scripted_daemon) as client:
        client.submit_topology(wordcount(tmp_path), wait=True, inactive=True,
                               poll_interval=FAST, on_status=seen.append,
                               conf=script("starting: up", "starting: up", "running: b0"))
    assert seen == ["starting", "paused"]


def test_wait_reports_a_failure(scripted_daemon: NimbusDaemon, tmp_path: Path) -> None:
    with client_of(scripted_daemon) as client:
        with pytest.raises(TopologyFailed) as info:
            client.submit_topology(
                wordcount(tmp_path), wait=True, poll_interval=FAST,
                conf=script("starting: x", "starting: x",
                            "failed: Py4JJavaError: SplitBolt raised ValueError"))
    assert info.value.status == "failed"        # the reason is the latest error
    assert str(info.value).endswith("did not start: failed: Py4JJavaError: SplitBolt "
                                    "raised ValueError")


def test_wait_reports_the_daemons_own_error(scripted_daemon: NimbusDaemon,
                                            tmp_path: Path) -> None:
    with client_of(scripted_daemon) as client:
        with pytest.raises(TopologyFailed, match="did not start: launcher launch failed: "
                                                 "LauncherError: no executors free"):
            client.submit_topology(wordcount(tmp_path), wait=True, poll_interval=FAST,
                                   conf={LAUNCH_ERROR_KEY: "no executors free"})


def test_wait_times_out_with_the_last_status(scripted_daemon: NimbusDaemon,
                                             tmp_path: Path) -> None:
    with client_of(scripted_daemon) as client:
        with pytest.raises(TopologyWaitTimeout) as info:
            client.submit_topology(wordcount(tmp_path), wait=True, timeout=0.2,
                                   poll_interval=FAST,
                                   conf=script("starting: waiting for executors"))
    assert isinstance(info.value, NimbusTimeout)
    assert info.value.status == "starting"
    assert str(info.value) == (f"topology {info.value.topology_id} was not running after "
                               "0.2 s; last status: starting")


def test_wait_reports_a_kill(scripted_daemon: NimbusDaemon, tmp_path: Path) -> None:
    with client_of(scripted_daemon) as client:
        tid = client.submit_topology(wordcount(tmp_path), conf=script("starting: slow"))
        client.killTopologyWithOpts("wordcount", N.KillOptions(wait_secs=3600))
        with pytest.raises(TopologyFailed, match="did not start: it was killed"):
            client.wait_for_topology(tid, poll_interval=FAST)


# --- the command --------------------------------------------------------------------------

def test_cli_submit_prints_the_id(none_daemon: NimbusDaemon, tmp_path: Path) -> None:
    path = wordcount(tmp_path)
    (path.parent / "elsewhere.py").symlink_to(tmp_path)
    result = run_cli(none_daemon, str(path), "--conf", "topology.workers=2",
                     "--conf", "spark.master=local[2]", "--conf", "note=true")
    assert result.exit_code == 0, result.output
    with client_of(none_daemon) as client:
        [summary] = client.getClusterInfo().topologies
        conf = json.loads(client.getTopologyConf(summary.id))
    assert result.stdout == f"{summary.id}\n"
    assert summary.name == "wordcount" and summary.status == "ACTIVE"
    assert (conf["topology.workers"], conf["spark.master"], conf["note"]) == \
        (2, "local[2]", True)
    assert conf["topology.max.spout.pending"] == 100          # the class's config
    lines = result.stderr.splitlines()
    assert lines[0] == f"warning: skipped symbolic link elsewhere.py -> {tmp_path}"
    assert lines[1].startswith("packaged 1 file from ")
    assert lines[-1].startswith("uploaded 100% (")


def test_cli_submit_json_name_and_inactive(none_daemon: NimbusDaemon, tmp_path: Path) -> None:
    result = run_cli(none_daemon, str(wordcount(tmp_path)), "--name", "wc2", "--inactive",
                     "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["name"] == "wc2" and data["files"] == 1 and len(data["sha256"]) == 64
    with client_of(none_daemon) as client:
        assert client.getTopologyInfo(data["id"]).status == "INACTIVE"
    assert result.stderr == ""


def test_cli_wait_with_launcher_none_exits_1(none_daemon: NimbusDaemon,
                                             tmp_path: Path) -> None:
    result = run_cli(none_daemon, str(wordcount(tmp_path)), "--wait")
    assert result.exit_code == 1
    tid = result.stdout.strip()
    assert tid.startswith("wordcount-")
    assert result.stderr.splitlines()[-2:] == [
        "status: unscheduled",
        f"Error: topology {tid} was submitted but will not run: unscheduled"]


def test_cli_wait_follows_the_status(scripted_daemon: NimbusDaemon, tmp_path: Path) -> None:
    states = json.dumps(["starting: a", "starting: a", "starting: b", "running: batch 0"])
    result = run_cli(scripted_daemon, str(wordcount(tmp_path)), "--wait",
                     "--conf", f"{SCRIPT_KEY}={states}")
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[-3:] == [
        "status: starting", "status: running", "wordcount is running"]


def test_cli_wait_failure_exits_1_with_the_reason(scripted_daemon: NimbusDaemon,
                                                  tmp_path: Path) -> None:
    states = json.dumps(["starting: a", "failed: the driver exited with code 1"])
    result = run_cli(scripted_daemon, str(wordcount(tmp_path)), "--wait",
                     "--conf", f"{SCRIPT_KEY}={states}")
    assert result.exit_code == 1
    tid = result.stdout.strip()
    assert result.stderr.splitlines()[-1] == (
        f"Error: topology {tid} did not start: failed: the driver exited with code 1")


@pytest.mark.parametrize("setup, args, code, message", [
    ("two", ["two.py"], 1, "Error: {d}/two.py defines several topologies (A, B); choose "
                           "one with --topology CLASS (class_name=...)\n"),
    ("two", ["two.py", "--topology", "C"], 1,
     "Error: {d}/two.py defines no Topology class 'C' (it defines: A, B)\n"),
    ("broken", ["broken.py"], 1, "Error: cannot import {d}/broken.py: ModuleNotFoundError: "
                                 "No module named 'nope_xyz' (at broken.py line 1)\n"),
    ("two", ["two.py", "--topology", "A", "--name", "bad.name"], 1,
     "Error: topology name 'bad.name' contains one of / . : \\ (not allowed, as in Storm)\n"),
    ("two", ["two.py", "--conf", "novalue"], 2, "'novalue' is not key=value"),
    ("two", ["missing.py"], 2, "'{d}/missing.py' does not exist"),
])
def test_cli_mistakes_are_one_sentence(none_daemon: NimbusDaemon, tmp_path: Path, setup: str,
                                       args: list[str], code: int, message: str) -> None:
    d = tmp_path / "p"
    write(d / "two.py", """
        from nimbus_thrift.topology import Spout, Topology
        class S(Spout):
            outputs = ["x"]
        class A(Topology):
            s = S.spec()
        class B(Topology):
            s = S.spec()
        """)
    write(d / "broken.py", "import nope_xyz\n")
    result = run_cli(none_daemon, *[str(d / a) if a.endswith(".py") else a for a in args])
    assert result.exit_code == code
    expected = message.format(d=d)
    if code == 2:
        assert expected in result.stderr
    else:
        assert result.stderr == expected
    assert "Traceback" not in result.output
    with client_of(none_daemon) as client:
        assert client.getClusterInfo().topologies == []


def test_cli_choose_among_several(none_daemon: NimbusDaemon, tmp_path: Path) -> None:
    path = write(tmp_path / "two.py", """
        from nimbus_thrift.topology import Spout, Topology
        class S(Spout):
            outputs = ["x"]
        class A(Topology):
            s = S.spec()
        class B(Topology):
            s = S.spec(par=2)
        """)
    result = run_cli(none_daemon, str(path), "--topology", "B", "--name", "bee")
    assert result.exit_code == 0, result.output
    with client_of(none_daemon) as client:
        struct = client.getUserTopology(result.stdout.strip())
    assert struct.spouts["s"].common.parallelism_hint == 2


def test_cli_taken_name_is_one_sentence(none_daemon: NimbusDaemon, tmp_path: Path) -> None:
    assert run_cli(none_daemon, str(wordcount(tmp_path))).exit_code == 0
    result = run_cli(none_daemon, str(wordcount(tmp_path / "2")))
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1].startswith(
        "Error: topology 'wordcount' already exists on nimbus at ")


def test_cli_process_uploads_in_chunks_with_progress_lines(none_daemon: NimbusDaemon,
                                                          tmp_path: Path) -> None:
    """The real command in its own process, stderr not a terminal: a line per quarter
    reached, the id alone on stdout, and the chunks add up to the code."""
    root = project(tmp_path, "analytics_project")
    (root / "analytics" / "data" / "noise.bin").write_bytes(os.urandom(700_000))
    result = subprocess.run(
        CLI + ["submit", str(root / "analytics" / "topology.py"), "--port",
               str(port_of(none_daemon))], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    size = build_zip(root, tmp_path / "local.zip").size
    # Three chunks of 307,200 bytes: 43%, 87% and 100% of ~700 kB.
    assert result.stderr.splitlines()[1:] == [
        f"uploaded 25% (307,200 of {size:,} bytes)",
        f"uploaded 75% (614,400 of {size:,} bytes)",
        f"uploaded 100% ({size:,} of {size:,} bytes)"]
    tid = result.stdout.strip()
    with client_of(none_daemon) as client:
        client.download_file(tid, tmp_path / "back.zip")
    assert (tmp_path / "back.zip").read_bytes() == (tmp_path / "local.zip").read_bytes()


def test_cli_process_on_a_terminal_shows_a_progress_bar(none_daemon: NimbusDaemon,
                                                        tmp_path: Path) -> None:
    import pty
    root = project(tmp_path, "analytics_project")
    (root / "analytics" / "data" / "noise.bin").write_bytes(os.urandom(700_000))
    controller, terminal = pty.openpty()
    proc = subprocess.Popen(
        CLI + ["submit", str(root / "analytics" / "topology.py"), "--port",
               str(port_of(none_daemon))], stdout=subprocess.PIPE, stderr=terminal,
        text=True)
    os.close(terminal)
    shown = b""
    while True:                    # until the child exits and the terminal closes
        try:
            data = os.read(controller, 65536)
        except OSError:            # EIO: no process has the terminal open any more
            break
        if not data:
            break
        shown += data
    os.close(controller)
    stdout, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    text = shown.decode()
    assert "uploading" in text and "100%" in text and "uploaded 25%" not in text
    assert stdout.strip().startswith("analytics-demo-")


def test_cli_unreachable_nimbus_is_one_sentence(tmp_path: Path) -> None:
    with refused_port() as port:
        result = CliRunner().invoke(main, ["submit", str(wordcount(tmp_path)), "--port",
                                           str(port)])
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1].startswith(
        f"Error: no nimbus at 127.0.0.1:{port}: connection refused")


# --- helpers ------------------------------------------------------------------------------

def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path

