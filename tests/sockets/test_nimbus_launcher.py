"""Choosing the launcher (built-in name or module:factory) and the built-in 'none'."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support.nimbus import FakeLauncher, make_zip, wordcount
from nimbus_thrift.client.client import NimbusClient
from nimbus_thrift.nimbus import DaemonError, NimbusDaemon, load_config
from nimbus_thrift.nimbus.launcher import LauncherError
from nimbus_thrift.nimbus.launcher_choice import UnscheduledLauncher, load_launcher

CLI = [str(Path(sys.executable).with_name("nimbus-thrift"))]
CREATED: list[Any] = []


def fake_factory(config: Any) -> FakeLauncher:
    """A factory reachable as ``test_nimbus_launcher:fake_factory``."""
    CREATED.append(config)
    return FakeLauncher()


def exploding_factory(config: Any) -> Any:
    raise RuntimeError("no cluster here")


def test_builtin_none() -> None:
    launcher = load_launcher("none", None)
    assert isinstance(launcher, UnscheduledLauncher)
    status = launcher.status("x")
    assert status.state == "unscheduled" and not status.assigned
    assert status.detail.startswith("unscheduled: ")
    assert "no execution backend" in status.detail


def test_module_factory_gets_the_config() -> None:
    launcher = load_launcher("test_nimbus_launcher:fake_factory", {"k": 1})
    assert isinstance(launcher, FakeLauncher) and CREATED[-1] == {"k": 1}


@pytest.mark.parametrize("spec, message", [
    ("spork", "unknown launcher 'spork': use one of none, spark or 'module:factory'"),
    ("no_such_module_xyz:f", "cannot load launcher 'no_such_module_xyz:f'"),
    ("test_nimbus_launcher:missing", "cannot load launcher 'test_nimbus_launcher:missing'"),
    ("test_nimbus_launcher:exploding_factory",
     "launcher 'test_nimbus_launcher:exploding_factory' failed to start: "
     "RuntimeError: no cluster here"),
])
def test_bad_launchers(spec: str, message: str) -> None:
    with pytest.raises(LauncherError) as info:
        load_launcher(spec, None)
    assert str(info.value).startswith(message)


def test_daemon_with_a_bad_launcher_does_not_start(tmp_path: Path) -> None:
    config = load_config(env={}, flags={"ui_port": 0, "data_dir": str(tmp_path / "d"), "port": 0,
                                        "launcher": "spork"})
    daemon = NimbusDaemon(config)
    with pytest.raises(DaemonError, match="unknown launcher 'spork'"):
        daemon.start()
    # Nothing is left held: a daemon with a good launcher can use the directory now.
    good = NimbusDaemon(load_config(env={}, flags={"ui_port": 0, "data_dir": str(tmp_path / "d"),
                                                   "port": 0, "launcher": "none"}))
    good.start()
    good.stop()


def test_cli_bad_launcher_is_one_sentence(tmp_path: Path) -> None:
    result = subprocess.run(CLI + ["nimbus", "--port", "0", "--data-dir", str(tmp_path),
                                   "--launcher", "spork"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "Error: unknown launcher 'spork'" in result.stderr
    assert "Traceback" not in result.stderr


def test_none_launcher_end_to_end(tmp_path: Path) -> None:
    """A daemon without execution accepts and controls topologies and says they do not
    run."""
    config = load_config(env={}, flags={"ui_port": 0, "data_dir": str(tmp_path / "d"), "port": 0,
                                        "launcher": "none"})
    with NimbusDaemon(config) as daemon:
        port = daemon.handler.address[1]          # type: ignore[union-attr]
        with NimbusClient("127.0.0.1", port, timeout=10) as client:
            location = client.beginFileUpload()
            client.uploadChunk(location, make_zip())
            client.finishFileUpload(location)
            client.submitTopology("wc", location, json.dumps({}), wordcount())
            (summary,) = client.getClusterInfo().topologies
            info = client.getTopologyInfo(summary.id)
            assert client.getClusterInfo().supervisors == []
    assert summary.status == "ACTIVE"
    # Storm's short column; the launcher's sentence (DETAIL) is the web page's.
    assert summary.sched_status == "unscheduled"
    assert info.executors == [] and info.sched_status == "unscheduled"
