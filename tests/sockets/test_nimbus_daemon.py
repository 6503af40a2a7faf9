"""The nimbus daemon end to end: the CLI and the Python client over real sockets, and a
real daemon process killed with SIGKILL at arbitrary moments and restarted."""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import random
import re
import sqlite3
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest
from click.testing import CliRunner

from support.daemon_process import DaemonProcess
from support.nimbus import FakeLauncher, N, make_zip, port_of, wordcount
from support.rawthrift import refused_port
from nimbus_thrift.cli import main
from nimbus_thrift.client.client import NimbusClient, NimbusClientError
from nimbus_thrift.nimbus import DaemonError, NimbusDaemon, load_config
from nimbus_thrift.nimbus.launcher import ComponentStats

ME = pwd.getpwuid(os.geteuid()).pw_name

CLI = [str(Path(sys.executable).with_name("nimbus-thrift"))]


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[NimbusDaemon]:
    config = load_config(env={}, flags={"ui_port": 0, "data_dir": str(tmp_path / "data"), "port": 0})
    d = NimbusDaemon(config, launcher=FakeLauncher())
    d.start()
    try:
        yield d
    finally:
        d.stop(grace=5.0)


def submit(port: int, name: str = "wc", conf: dict | None = None) -> str:
    with NimbusClient("127.0.0.1", port, timeout=10) as client:
        location = _upload(client, make_zip())
        client.submitTopology(name, location, json.dumps(conf or {}), wordcount())
        return next(t.id for t in client.getClusterInfo().topologies if t.name == name)


def _upload(client: NimbusClient, data: bytes) -> str:
    location = client.beginFileUpload()
    for i in range(0, len(data), 1000):
        client.uploadChunk(location, data[i:i + 1000])
    client.finishFileUpload(location)
    return location


def cli(port: int, *args: str) -> Any:
    return CliRunner().invoke(main, [*args, "--port", str(port)], catch_exceptions=False)


# --- the CLI against an in-process daemon ---------------------------------------------

def test_cli_list_table_and_json(daemon: NimbusDaemon) -> None:
    port = port_of(daemon)
    assert cli(port, "list").output.strip() == "no topologies"
    tid = submit(port, conf={"topology.workers": 2})
    result = cli(port, "list")
    assert result.exit_code == 0
    header, row = result.output.strip().splitlines()
    assert header.split()[:5] == ["NAME", "ID", "STATUS", "OWNER", "WORKERS"]
    # On loopback TCP the caller is its OS user (the kernel's word), not anonymous.
    assert row.split()[:7] == ["wc", tid, "ACTIVE", ME, "2", "6", "6"]
    listed = json.loads(cli(port, "list", "--json").output)
    assert [(t["name"], t["id"], t["status"], t["num_executors"]) for t in listed] == \
        [("wc", tid, "ACTIVE", 6)]


def test_cli_info_shows_components_and_figures(daemon: NimbusDaemon) -> None:
    port = port_of(daemon)
    tid = submit(port)
    launcher = daemon.handler.launcher   # type: ignore[union-attr]
    launcher.stats[tid] = {"count": ComponentStats(emitted=900, processed=1200, rate=30.0,
                                                   latency_ms=12.5)}
    text = cli(port, "info", "wc").output
    assert f"id:         {tid}" in text and "status:     ACTIVE" in text
    count_row = next(line for line in text.splitlines() if line.startswith("count "))
    assert count_row.split() == ["count", "3", "3", "900", "1,200", "30.0", "12.5"]
    data = json.loads(cli(port, "info", "wc", "--json").output)
    components = {c["component"]: c for c in data["components"]}
    assert components["count"]["processed"] == 1200 and components["split"]["executors"] == 2
    assert data["id"] == tid and len(data["executors"]) == 6


def test_cli_lifecycle(daemon: NimbusDaemon) -> None:
    port = port_of(daemon)
    tid = submit(port)
    assert cli(port, "deactivate", "wc").output.strip() == "deactivated wc"
    assert daemon.store.topology(tid).status == "INACTIVE"   # type: ignore[union-attr]
    assert cli(port, "activate", "wc").output.strip() == "activated wc"
    assert daemon.store.topology(tid).status == "ACTIVE"     # type: ignore[union-attr]
    result = cli(port, "rebalance", "wc", "-w", "3600", "-n", "3", "-e", "split=1")
    assert result.output.strip() == "rebalancing wc"
    action = daemon.store.action(tid)                        # type: ignore[union-attr]
    assert action is not None and action.options == {"num_workers": 3,
                                                     "num_executors": {"split": 1}}
    assert cli(port, "kill", "wc", "-w", "3600").output.strip() == \
        "killed wc; removed in 3600 s"
    assert daemon.store.topology(tid).status == "KILLED"     # type: ignore[union-attr]


def test_cli_conf(daemon: NimbusDaemon) -> None:
    port = port_of(daemon)
    values = json.loads(cli(port, "conf", "--json").output)
    assert values["nimbus.thrift.port"] == port
    table = cli(port, "conf").output
    assert re.search(r"^nimbus\.thrift\.port\s+%d$" % port, table, re.M)


@pytest.mark.parametrize("args, message", [
    (["kill", "ghost"], "Error: no topology named 'ghost'\n"),
    (["activate", "ghost"], "Error: no topology named 'ghost'\n"),
    (["info", "ghost"], "Error: no topology named 'ghost' (see 'nimbus-thrift list')\n"),
])
def test_cli_not_alive_is_one_sentence(daemon: NimbusDaemon, args: list[str],
                                       message: str) -> None:
    result = CliRunner().invoke(main, [*args, "--port", str(port_of(daemon))])
    assert result.exit_code == 1
    assert result.output == message


def test_cli_invalid_rebalance_is_one_sentence(daemon: NimbusDaemon) -> None:
    port = port_of(daemon)
    submit(port)
    result = CliRunner().invoke(main, ["rebalance", "wc", "-e", "split=9", "--port",
                                       str(port)])
    assert result.exit_code == 1
    assert result.output.startswith("Error: component 'split' has 2 tasks")
    result = CliRunner().invoke(main, ["rebalance", "wc", "-e", "split", "--port", str(port)])
    assert result.exit_code == 2 and "'split' is not COMPONENT=N" in result.output


def test_cli_refused_connection_is_one_sentence(tmp_path: Path) -> None:
    with refused_port() as port:
        result = subprocess.run(CLI + ["list", "--port", str(port)], capture_output=True,
                                text=True, timeout=60)
    assert result.returncode == 1
    assert result.stderr.startswith(f"Error: no nimbus at 127.0.0.1:{port}: connection refused")
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_second_daemon_on_the_same_data_dir_is_refused(daemon: NimbusDaemon) -> None:
    other = NimbusDaemon(daemon.config)
    with pytest.raises(DaemonError, match=rf"in use by another nimbus \(pid {os.getpid()}\)"):
        other.start()


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_state_is_forced_owner_only_at_start(tmp_path: Path) -> None:
    # A data directory made beforehand with the usual umask 022, and state files left
    # readable by a daemon of an older version.
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    (data / "inbox").mkdir(mode=0o755)
    (data / "topologies").mkdir(mode=0o755)
    data.chmod(0o755)
    (data / "inbox").chmod(0o755)
    (data / "topologies").chmod(0o755)
    sqlite3.connect(data / "nimbus.sqlite3").close()
    for name in ("nimbus.sqlite3", "nimbus.lock"):
        (data / name).touch()
        (data / name).chmod(0o644)
    config = load_config(env={}, flags={"ui_port": 0, "data_dir": str(data), "port": 0})
    daemon = NimbusDaemon(config, launcher=FakeLauncher())
    daemon.start()
    try:
        assert _mode(data) == 0o700
        assert _mode(data / "inbox") == 0o700 and _mode(data / "topologies") == 0o700
        assert _mode(data / "nimbus.lock") == 0o600
        for name in ("nimbus.sqlite3", "nimbus.sqlite3-wal", "nimbus.sqlite3-shm"):
            assert _mode(data / name) == 0o600, name
        # What it writes from now on is owner-only too: an upload's file.
        with NimbusClient("127.0.0.1", port_of(daemon), timeout=10) as client:
            location = _upload(client, make_zip())
        assert _mode(Path(location)) == 0o600
    finally:
        daemon.stop(grace=5.0)


def test_umask_is_077_while_a_daemon_runs_and_restored_after(tmp_path: Path) -> None:
    before = os.umask(0o022)
    configs = [load_config(env={}, flags={"ui_port": 0, "data_dir": str(tmp_path / f"d{i}"), "port": 0})
               for i in range(2)]
    try:
        daemons = [NimbusDaemon(c, launcher=FakeLauncher()) for c in configs]
        for d in daemons:
            d.start()
        assert _current_umask() == 0o077
        daemons[0].stop(grace=5.0)              # not in the order they started
        assert _current_umask() == 0o077        # the other one still runs
        daemons[1].stop(grace=5.0)
        assert _current_umask() == 0o022
        # A start that fails gives its hold back.
        first = NimbusDaemon(configs[0], launcher=FakeLauncher())
        first.start()
        try:
            with pytest.raises(DaemonError, match="in use by another nimbus"):
                NimbusDaemon(configs[0], launcher=FakeLauncher()).start()
            assert _current_umask() == 0o077
        finally:
            first.stop(grace=5.0)
        assert _current_umask() == 0o022
    finally:
        os.umask(before)


def test_data_directory_whose_mode_cannot_be_set_is_refused(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    from nimbus_thrift.nimbus import daemon as daemon_module
    data = tmp_path / "data"
    data.mkdir()
    data.chmod(0o755)

    def refuse(path: Any, mode: int) -> None:
        raise PermissionError(1, "Operation not permitted")
    monkeypatch.setattr(daemon_module.os, "chmod", refuse)
    before = _current_umask()
    config = load_config(env={}, flags={"ui_port": 0, "data_dir": str(data), "port": 0})
    with pytest.raises(DaemonError, match=r"cannot make .*data owner-only \(mode 0700\): "
                                          "Operation not permitted"):
        NimbusDaemon(config, launcher=FakeLauncher()).start()
    assert _current_umask() == before


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_python_client_round_trip(daemon: NimbusDaemon, tmp_path: Path) -> None:
    port = port_of(daemon)
    tid = submit(port)
    with NimbusClient("127.0.0.1", port, timeout=10) as client:
        dest = tmp_path / "code.zip"
        assert client.download_file(tid, dest) == len(make_zip())
        assert dest.read_bytes() == make_zip()
        with pytest.raises(N.NotAliveException):
            client.getTopologyInfo("ghost-1-1")


# --- a real daemon process, killed with SIGKILL -----------------------------------------

@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


def _client(port: int) -> NimbusClient:
    return NimbusClient("127.0.0.1", port, timeout=10, connect_timeout=5)


def test_sigterm_stops_gracefully(data_dir: Path) -> None:
    d = DaemonProcess(data_dir)
    assert d.sigterm() == 0
    events = [json.loads(line)["event"] for line in d.lines if line.startswith("{")]
    assert events[-1] == "nimbus_stopped"


def test_config_file_then_environment_then_flags(tmp_path: Path) -> None:
    config = tmp_path / "nimbus.yaml"
    config.write_text(f"data-dir: {tmp_path / 'from-file'}\nmax_upload_bytes: 1234\n")
    env = {"NIMBUS_THRIFT_CONFIG": str(config)}
    for data_dir, extra_env, expected in [
            (None, {}, "from-file"),
            (None, {"NIMBUS_THRIFT_DATA_DIR": str(tmp_path / "from-env")}, "from-env"),
            (tmp_path / "from-flag", {"NIMBUS_THRIFT_DATA_DIR": str(tmp_path / "from-env")},
             "from-flag")]:
        d = DaemonProcess(data_dir, env={**env, **extra_env})
        try:
            with _client(d.port) as client:
                conf = json.loads(client.getNimbusConf())
        finally:
            assert d.sigterm() == 0
        # getNimbusConf shows no paths: the daemon's start line says where it keeps state.
        started = next(json.loads(line) for line in d.lines
                       if line.startswith("{") and '"nimbus_started"' in line)
        assert started["data_dir"] == str(tmp_path / expected)
        assert "storm.local.dir" not in conf
        assert conf["nimbus-thrift.max_upload_bytes"] == 1234


@pytest.mark.parametrize("setup, message", [
    ({"yaml": "prot: 1\n"}, "unknown setting 'prot'"),
    ({"env": {"NIMBUS_THRIFT_PORT": "http"}}, "NIMBUS_THRIFT_PORT: port must be an integer"),
    ({"args": ["--max-frame-size", "10"]}, "--max-frame-size must be at least 64"),
])
def test_bad_configuration_is_one_sentence_and_exit_2(tmp_path: Path, setup: dict,
                                                      message: str) -> None:
    args = list(setup.get("args", []))
    if "yaml" in setup:
        (tmp_path / "c.yaml").write_text(setup["yaml"])
        args += ["--config", str(tmp_path / "c.yaml")]
    result = subprocess.run(CLI + ["nimbus", "--data-dir", str(tmp_path / "d"), *args],
                            capture_output=True, text=True, timeout=60,
                            env={**os.environ, **setup.get("env", {})})
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "d").exists()


def test_upload_resumes_after_sigkill(data_dir: Path) -> None:
    code = make_zip({**{"wordcount/__init__.py": "", "wordcount/components.py":
                        "class SentenceSpout: pass\nclass SplitBolt: pass\n"
                        "class CountBolt: pass\n"},
                     "pad.bin": os.urandom(50_000)})
    d = DaemonProcess(data_dir)
    with _client(d.port) as client:
        location = client.beginFileUpload()
        client.uploadChunk(location, code[:20_000])
        client.uploadChunk(location, code[20_000:40_000])
    d.sigkill()
    d = DaemonProcess(data_dir)
    try:
        with _client(d.port) as client:
            client.uploadChunk(location, code[40_000:])      # acknowledged bytes were kept
            client.finishFileUpload(location)
            client.submitTopology("wc", location, "{}", wordcount())
            tid = next(t.id for t in client.getClusterInfo().topologies)
            dest = data_dir.parent / "back.zip"
            client.download_file(tid, dest)
        assert dest.read_bytes() == code
    finally:
        d.sigterm()


def test_acknowledged_state_survives_sigkill(data_dir: Path) -> None:
    d = DaemonProcess(data_dir)
    with _client(d.port) as client:
        location = _upload(client, make_zip())
        client.submitTopology("a", location, "{}", wordcount())
        client.submitTopologyWithOpts("b", location, "{}", wordcount(),
                                      N.SubmitOptions(initial_status=2))
        client.killTopologyWithOpts("a", N.KillOptions(wait_secs=3600))
        client.rebalance("b", N.RebalanceOptions(wait_secs=3600, num_workers=5))
        before = {t.name: (t.id, t.status) for t in client.getClusterInfo().topologies}
    d.sigkill()
    d = DaemonProcess(data_dir)
    try:
        with _client(d.port) as client:
            after = {t.name: (t.id, t.status) for t in client.getClusterInfo().topologies}
            with pytest.raises(N.AlreadyAliveException, match=r"KILLED, removed in 3\d\d\d s"):
                client.submitTopology("a", location, "{}", wordcount())
        assert after == before == {"a": (before["a"][0], "KILLED"),
                                   "b": (before["b"][0], "REBALANCING")}
    finally:
        d.sigterm()


def test_sigkill_at_random_moments_loses_nothing_acknowledged(data_dir: Path) -> None:
    """A client submits and kills as fast as it can while the daemon is SIGKILLed at a
    random moment, four times over. After each restart every acknowledged call is
    there, and every upload the database calls complete is whole and checksummed."""
    rng = random.Random(20261121)
    acked_submits: dict[str, bytes] = {}      # name -> code uploaded for it
    acked_kills: set[str] = set()
    sent_kills: set[str] = set()              # asked for: committed or not, acked or not
    counter = 0
    for round_no in range(4):
        d = DaemonProcess(data_dir)
        _check_invariants(d.port, data_dir, acked_submits, acked_kills, sent_kills)
        stop = threading.Event()
        # The client thread's own generator: sharing the main thread's would make the
        # sequence (and so a failure) depend on how the two threads interleave.
        client_rng = random.Random(rng.random())

        def work() -> None:
            nonlocal counter
            try:
                with _client(d.port) as client:
                    while not stop.is_set():
                        counter += 1
                        name = f"t{counter}"
                        code = make_zip({**_wc_code(), "pad.bin": os.urandom(
                            client_rng.randrange(1, 200_000))})
                        location = _upload(client, code)
                        client.submitTopology(name, location, "{}", wordcount())
                        acked_submits[name] = code
                        if counter % 3 == 0:
                            sent_kills.add(name)
                            client.killTopologyWithOpts(name, N.KillOptions(wait_secs=3600))
                            acked_kills.add(name)
            except (NimbusClientError, OSError):
                pass                              # the daemon died under us: expected

        worker = threading.Thread(target=work)
        worker.start()
        # Let some calls land, then kill at a random point of the stream of calls.
        target = len(acked_submits) + rng.randrange(1, 4)
        deadline_ok = _wait_for(lambda: len(acked_submits) >= target, 60)
        assert deadline_ok, "no progress before the kill"
        threading.Event().wait(rng.random() * 0.05)
        d.sigkill()
        stop.set()
        worker.join(30)
    d = DaemonProcess(data_dir)
    try:
        _check_invariants(d.port, data_dir, acked_submits, acked_kills, sent_kills)
    finally:
        d.sigterm()
    assert len(acked_submits) >= 4


def _wc_code() -> dict[str, str | bytes]:
    return {"wordcount/__init__.py": "", "wordcount/components.py":
            "class SentenceSpout: pass\nclass SplitBolt: pass\nclass CountBolt: pass\n"}


def _wait_for(predicate: Any, timeout: float) -> bool:
    done = threading.Event()
    end = 0.0
    import time
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        done.wait(0.01)
    return False


def _check_invariants(port: int, data_dir: Path, acked_submits: dict[str, bytes],
                      acked_kills: set[str], sent_kills: set[str]) -> None:
    with _client(port) as client:
        listed = {t.name: t for t in client.getClusterInfo().topologies}
        for name, code in acked_submits.items():
            assert name in listed, f"acknowledged submit of {name} was lost"
            # A kill the daemon committed but died before acknowledging may be either.
            expected = {"KILLED"} if name in acked_kills else \
                {"ACTIVE", "KILLED"} if name in sent_kills else {"ACTIVE"}
            assert listed[name].status in expected, (name, listed[name].status)
            conf = json.loads(client.getTopologyConf(listed[name].id))
            assert conf["nimbus-thrift.code.sha256"] == hashlib.sha256(code).hexdigest()
    db = sqlite3.connect(f"file:{data_dir / 'nimbus.sqlite3'}?mode=ro", uri=True)
    try:
        for upload_id, state, size, sha in db.execute(
                "SELECT id, state, bytes, sha256 FROM uploads"):
            path = data_dir / "inbox" / f"{upload_id}.{'zip' if state == 'complete' else 'part'}"
            assert path.stat().st_size == size, f"{state} upload {upload_id} has a torn file"
            if state == "complete":
                assert hashlib.sha256(path.read_bytes()).hexdigest() == sha
    finally:
        db.close()


@pytest.mark.parametrize("name", ["a\u202eb\u0085\u2028c", "x" * 250, "wc\u200b"])
def test_names_that_cannot_be_a_directory_or_spoof_output_are_refused(
        daemon: NimbusDaemon, name: str) -> None:
    port = port_of(daemon)
    with NimbusClient("127.0.0.1", port, timeout=10) as client:
        assert client.isTopologyNameAllowed(name) is False
        assert client.isTopologyNameAllowed("wc") is True
        location = _upload(client, make_zip())
        with pytest.raises(N.InvalidTopologyException) as info:
            client.submitTopology(name, location, "{}", wordcount())
        assert ("bytes of UTF-8; the limit is 223" in info.value.msg
                or "U+" in info.value.msg)
        assert "/" not in info.value.msg             # no daemon path in the sentence
        assert client.getClusterInfo().topologies == []
    assert list((daemon.config.data_dir / "topologies").iterdir()) == []


def test_a_conf_with_two_to_the_forty_workers_is_refused_and_list_still_works(
        daemon: NimbusDaemon) -> None:
    port = port_of(daemon)
    with NimbusClient("127.0.0.1", port, timeout=10) as client:
        location = _upload(client, make_zip())
        with pytest.raises(N.InvalidTopologyException,
                           match="topology.workers is 1099511627776; the limit is 2048"):
            client.submitTopology("wc", location, json.dumps({"topology.workers": 2**40}),
                                  wordcount())
    submit(port, "wc")
    assert cli(port, "list").exit_code == 0


def test_the_servers_deadlines_and_bounds_are_daemon_settings(tmp_path: Path) -> None:
    config = load_config(env={"NIMBUS_THRIFT_PARK_TIMEOUT": "3"}, flags={"ui_port": 0,
        "data_dir": str(tmp_path / "data"), "port": 0, "first_request_timeout": 5,
        "min_frame_rate": 100, "write_timeout": 7, "frame_read_timeout": 9,
        "max_connections_per_peer": 3, "max_unsent_reply_bytes": 1 << 20,
        "decoded_size_factor": 4})
    d = NimbusDaemon(config, launcher=FakeLauncher())
    d.start()
    try:
        assert d.server is not None
        o = d.server.options
        assert (o.first_request_timeout, o.min_frame_rate, o.park_timeout, o.write_timeout,
                o.frame_read_timeout, o.max_connections_per_peer,
                o.max_unsent_reply_bytes) == (5, 100, 3, 7, 9, 3, 1 << 20)
        assert d.server.dispatcher.decoded_size_factor == 4
    finally:
        d.stop(grace=5.0)
    # 0 (the default) leaves the per-address cap to the server: a quarter of the total.
    assert load_config(env={}, flags={"data_dir": str(tmp_path / "d2")}) \
        .max_connections_per_peer == 0
