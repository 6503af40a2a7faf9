"""``nimbus-thrift logs`` with fakes: a fake client (the cluster summary, the topology's
components, getNimbusConf) and the fake log route on port 0 (support/log_route.py).
Where the web UI is found (--ui, the daemon's ui_port at the host reached, a local
daemon's record), --lines, --component, --follow through a rotation until the topology
is gone, and each error in one sentence."""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator

import pytest
from click.testing import CliRunner

from nimbus_thrift.cli import logs_command, main
from nimbus_thrift.nimbus.web.address import write_bound_url

from support.log_route import TID, FakeLogRoute, serving


class FakeClient:
    def __init__(self, ui_port: int, address: str = "127.0.0.1:6627",
                 ui_host: str = "") -> None:
        self.address = address
        self.conf = {"nimbus-thrift.ui_port": ui_port, "nimbus-thrift.ui_host": ui_host,
                     "nimbus-thrift.host": "127.0.0.1"}

    def getClusterInfo(self) -> Any:
        return SimpleNamespace(topologies=[SimpleNamespace(name="wc", id=TID)])

    def getUserTopology(self, tid: str) -> Any:
        assert tid == TID
        return SimpleNamespace(spouts={"sentences": 1}, bolts={"split": 1, "count": 1})

    def getNimbusConf(self) -> str:
        return json.dumps(self.conf)


@pytest.fixture
def route() -> Iterator[tuple[FakeLogRoute, str]]:
    fake = FakeLogRoute()
    with serving(fake) as url:
        yield fake, url


def port_of(url: str) -> int:
    return int(url.rstrip("/").rpartition(":")[2])


def invoke(monkeypatch: pytest.MonkeyPatch, client: FakeClient, *args: str,
           env: dict[str, str] | None = None) -> Any:
    @contextmanager
    def connected(target: Any, timeout: float) -> Iterator[FakeClient]:
        yield client

    monkeypatch.setattr(logs_command, "connected_client", connected)
    return CliRunner().invoke(main, ["logs", *args], env=env or {})


@pytest.fixture
def no_local_daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A data directory with no daemon's record in it, for the settings to name."""
    monkeypatch.setenv("NIMBUS_THRIFT_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def test_the_last_lines_from_the_daemons_ui_port(route: tuple[FakeLogRoute, str],
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 no_local_daemon: Path) -> None:
    fake, url = route
    fake.write("".join(f"line {i}\n" for i in range(20)))
    result = invoke(monkeypatch, FakeClient(port_of(url)), "wc")
    assert result.exit_code == 0, result.output
    assert result.stdout == "".join(f"line {i}\n" for i in range(10, 20))
    result = invoke(monkeypatch, FakeClient(port_of(url)), "wc", "-n", "2")
    assert result.stdout == "line 18\nline 19\n"


def test_ui_given_wins_and_a_component_filters(route: tuple[FakeLogRoute, str],
                                               monkeypatch: pytest.MonkeyPatch,
                                               no_local_daemon: Path) -> None:
    fake, url = route
    fake.write("a tuple of split\nb tuple of count\n  its frame\nc split again\nd partial")
    client = FakeClient(1)                  # the daemon's ui_port is wrong: --ui wins
    result = invoke(monkeypatch, client, "wc", "--ui", url.rstrip("/"), "-c", "count")
    assert result.exit_code == 0, result.output
    assert result.stdout == "b tuple of count\n  its frame\n"
    result = invoke(monkeypatch, client, "wc", "-c", "split", "-n", "1",
                    env={"NIMBUS_THRIFT_UI_URL": url})
    assert result.stdout == "c split again\n"
    result = invoke(monkeypatch, client, "wc", "--ui", url)
    assert result.stdout.endswith("c split again\nd partial\n")


def test_a_local_daemons_record_names_a_port_chosen_at_start(
        route: tuple[FakeLogRoute, str], monkeypatch: pytest.MonkeyPatch,
        no_local_daemon: Path) -> None:
    fake, url = route
    fake.write("recorded\n")
    no_local_daemon.mkdir()
    write_bound_url(no_local_daemon, url)            # this process: alive
    result = invoke(monkeypatch, FakeClient(-1), "wc")   # ui_port -1: any free port
    assert result.exit_code == 0, result.output
    assert result.stdout == "recorded\n"
    # Through the Unix socket, the socket's folder is looked at first.
    other = no_local_daemon.parent / "other"
    other.mkdir()
    write_bound_url(other, url)
    os.remove(no_local_daemon / "ui.url")
    result = invoke(monkeypatch, FakeClient(-1, address=f"unix:{other}/nimbus.sock"), "wc")
    assert result.stdout == "recorded\n"


def test_follow_prints_on_through_a_rotation_until_the_topology_is_gone(
        route: tuple[FakeLogRoute, str], monkeypatch: pytest.MonkeyPatch,
        no_local_daemon: Path) -> None:
    fake, url = route
    monkeypatch.setattr("nimbus_thrift.cli.log_reader.FOLLOW_POLL_S", 0.01)
    fake.write("old 1\nold 2\n")

    def script(asks: int) -> None:     # each ask of the follower changes the log once
        if asks == 2:
            fake.write("old 3\n")
        elif asks == 4:
            fake.replace("new 1\n")     # a relaunch's new, shorter log
        elif asks == 6:
            fake.gone_after = asks      # killed and removed
    fake.on_ask = script
    result = invoke(monkeypatch, FakeClient(port_of(url)), "wc", "--follow", "-n", "1")
    assert result.exit_code == 0, result.output
    assert result.stdout == "old 2\nold 3\nnew 1\n"
    assert "the log was truncated or replaced" in result.stderr
    assert result.stderr.endswith("nimbus-thrift: topology wc is gone (killed)\n")


@pytest.mark.parametrize("args, ui_port, message", [
    (["nope"], 8080, "no topology named 'nope' (see 'nimbus-thrift list')"),
    (["wc", "-c", "sink"], 8080,
     "topology wc has no component 'sink' (it has count, sentences, split)"),
    (["wc"], 0, "the daemon's web UI is off (ui_port 0), and logs are read through it"),
    (["wc"], -1, "cannot tell where the daemon's web UI is (it listens on any free "
                 "port, ui_port -1, and no daemon on this machine recorded it): give "
                 "--ui with the URL"),
    (["wc", "--ui", "localhost:1"], 8080, "'localhost:1/' is not an http:// or https:// "
                                          "URL of the daemon's web UI"),
])
def test_errors_are_one_sentence(monkeypatch: pytest.MonkeyPatch, no_local_daemon: Path,
                                 args: list[str], ui_port: int, message: str) -> None:
    result = invoke(monkeypatch, FakeClient(ui_port), *args)
    assert result.exit_code in (1, 2)
    assert message in result.stderr and "Traceback" not in result.output


def test_a_log_not_written_yet(route: tuple[FakeLogRoute, str],
                               monkeypatch: pytest.MonkeyPatch, no_local_daemon: Path) -> None:
    result = invoke(monkeypatch, FakeClient(port_of(route[1])), "wc")
    assert result.exit_code == 1
    assert "topology wc has written no log yet (it starts when its Spark driver does): " \
           "try again in a moment, or add --follow to wait for it" in result.stderr


def test_a_remote_daemons_ui_is_at_the_host_reached(monkeypatch: pytest.MonkeyPatch,
                                                    no_local_daemon: Path) -> None:
    def address(client: FakeClient, tls: bool = False) -> str:
        target = SimpleNamespace(uses_tls=tls)
        return logs_command.web_address(client, target, None)

    assert address(FakeClient(8080, "nimbus.example.org:6627")) == \
        "http://nimbus.example.org:8080/"
    assert address(FakeClient(8443, "nimbus.example.org:6627"), tls=True) == \
        "https://nimbus.example.org:8443/"
    assert address(FakeClient(8080, "[::1]:6627")) == "http://[::1]:8080/"
    assert address(FakeClient(8080, "unix:/x/nimbus.sock", ui_host="10.0.0.5")) == \
        "http://10.0.0.5:8080/"
    assert address(FakeClient(8080, "unix:/x/nimbus.sock", ui_host="0.0.0.0")) == \
        "http://127.0.0.1:8080/"
