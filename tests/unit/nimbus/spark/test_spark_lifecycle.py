"""The spark launcher's lifecycle against a fake spark-submit
(tests/support/fake_spark_submit.py): launching, pausing, stopping (and escalating to
SIGKILL), adoption by a restarted daemon, relaunches, rebalance, status, nodes, and
the launcher behind the handler. Real processes, sessions and signals, no JVM. What
runs Spark for real is marked ``spark`` elsewhere."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import signal
import sys
import threading
import time
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from launcher_parts import (Launchers, children, config, invocations, launch_spec,
                            launched_pid, live, state_is, wait_for)
from support.nimbus import (N, FakeClock, FakeLauncher, common, fields, make_zip, shell,
                            shuffle, upload, wordcount)

from nimbus_thrift import render
from nimbus_thrift.nimbus.launcher import LauncherError
from nimbus_thrift.nimbus.service.handler import NimbusHandler
from nimbus_thrift.nimbus.spark.launcher import SparkLauncher
from nimbus_thrift.nimbus.spark.proctree import proc_info, session_members
from nimbus_thrift.nimbus.spark.status import SPARK_COMPONENT
from nimbus_thrift.nimbus.state.store import Store
from nimbus_thrift.runner.rundir import RunDir
from nimbus_thrift.runner.spec import RunSpec
from nimbus_thrift.topology.streams import STATEFUL_KEY


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
    assert status.port == 0 and status.sched_status == "paused"


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
                        == "running" and i, "running")
        assert {e.component_id for e in info.executors} == {"sentences", "split"}
        # No Spark UI (off by default): no port, and the CLI names none.
        assert render.spark_ui(info) == ""
        assert {(e.host, e.port) for e in info.executors} == {("127.0.0.1", 0)}
        text = render.info_text(info)
        assert "spark ui:" not in text
        assert re.search(r"^split +2 +2 +[\d,]+ +[\d,]+ +2,000\.0 +50\.0$", text, re.M), text
        (node,) = handler.getClusterInfo().supervisors
        assert node.num_used_workers >= 1
        work = handler.launching.work_dir(summary.id)
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
