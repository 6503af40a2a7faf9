"""The CLI's words (issue 30): one meaning per flag, errors naming the flag typed,
NO_COLOR / FORCE_COLOR, a short help per command, ``python -m nimbus_thrift``, ``ui``
naming the running daemon's bound URL, and completion asking the daemon."""

from __future__ import annotations

import io
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import click
import pytest
import structlog
from click.shell_completion import ShellComplete
from click.testing import CliRunner
from support.nimbus import port_of
from support.rawthrift import refused_port

from nimbus_thrift import logs
from nimbus_thrift.cli import main
from nimbus_thrift.cli.param_types import Wait
from nimbus_thrift.cli.submit_command import _timeouts
from nimbus_thrift.client.blobs import upload_blob
from nimbus_thrift.client.client import NimbusClient
from nimbus_thrift.client.defaults import DEFAULT_TIMEOUT
from nimbus_thrift.nimbus import NimbusDaemon, load_config
from nimbus_thrift.nimbus.web.address import UI_URL_FILE

WORDCOUNT = Path(__file__).parents[1] / "topologies_submit" / "wordcount" / "wordcount.py"


def start_daemon(data_dir: Path, **flags: Any) -> NimbusDaemon:
    config = load_config(env={}, flags={"ui_port": 0, "data_dir": str(data_dir), "port": 0,
                                        "launcher": "none", "unix_socket": "", **flags})
    daemon = NimbusDaemon(config)
    daemon.start()
    return daemon


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[NimbusDaemon]:
    running = start_daemon(tmp_path / "data")
    try:
        yield running
    finally:
        running.stop(grace=5.0)


# --- python -m, short helps, flags named as typed ---------------------------------------

def test_python_dash_m_runs_the_cli(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "nimbus_thrift", "--help"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: nimbus-thrift [OPTIONS] COMMAND")
    assert "submit" in done.stdout


def _commands(group: click.Group, prefix: str = "") -> Iterator[tuple[str, click.Command]]:
    for name, command in group.commands.items():
        yield prefix + name, command
        if isinstance(command, click.Group):
            yield from _commands(command, prefix + name + " ")


def test_every_command_has_a_whole_short_help() -> None:
    commands = dict(_commands(main))
    assert {"submit", "kill", "blob", "blob cat", "ui"} <= commands.keys()
    for name, command in commands.items():
        text = command.get_short_help_str(limit=45)
        assert command.short_help, f"{name} has no short_help: click cuts its docstring"
        assert text.endswith(".") and "..." not in text and len(text) <= 55, (name, text)


@pytest.mark.parametrize("args, message", [
    (["--workers", "0"], "Error: --workers must be at least 1, not 0"),
    (["--port", "70000"], "Error: --port must be between 0 and 65535, not 70000"),
    (["--max-frame-size", "1"], "Error: --max-frame-size must be at least 64, not 1"),
])
def test_a_bad_daemon_flag_is_named_as_typed(args: list[str], message: str,
                                             tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["nimbus", "--launcher", "none", "--data-dir",
                                       str(tmp_path / "d"), *args], env={})
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1] == message
    assert "worker_threads" not in result.stderr and "max_frame_size" not in result.stderr
    assert not (tmp_path / "d").exists()         # refused before anything started


def test_a_bad_setting_from_the_environment_keeps_its_name(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["nimbus", "--launcher", "none", "--data-dir",
                                       str(tmp_path / "d")],
                                env={"NIMBUS_THRIFT_WORKER_THREADS": "0"})
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1] == \
        "Error: invalid configuration: worker_threads must be at least 1, not 0"


# --- colour ---------------------------------------------------------------------------

@pytest.mark.parametrize("env, choice", [
    ({}, None), ({"NO_COLOR": "1"}, False), ({"FORCE_COLOR": "1"}, True),
    ({"NO_COLOR": ""}, None), ({"NO_COLOR": "1", "FORCE_COLOR": "1"}, False),
])
def test_color_choice_follows_no_color_and_force_color(env: dict[str, str],
                                                       choice: bool | None) -> None:
    assert logs.color_choice(env) is choice


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        structlog.reset_defaults()


@pytest.mark.parametrize("env, tty, colored", [
    ({"FORCE_COLOR": "1"}, False, True), ({"NO_COLOR": "1"}, True, False),
    ({}, True, True), ({}, False, False),
])
def test_the_console_log_is_coloured_as_the_environment_says(
        env: dict[str, str], tty: bool, colored: bool, monkeypatch: pytest.MonkeyPatch,
        restore_logging: None) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    stream = _Terminal() if tty else io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    logs.configure("info", "console")
    structlog.get_logger("colour-test").info("hello")
    assert "hello" in stream.getvalue()
    assert ("\x1b[" in stream.getvalue()) is colored


# --- submit: --wait SECONDS, --timeout per reply ------------------------------------------

def test_wait_and_timeout_mean_one_thing(capsys: pytest.CaptureFixture[str]) -> None:
    assert _timeouts(Wait(60.0, bare=False), 5.0, None) == (5.0, 60.0)
    assert _timeouts(Wait(300.0, bare=True), None, None) == (DEFAULT_TIMEOUT, 300.0)
    assert _timeouts(None, None, None) == (DEFAULT_TIMEOUT, None)
    assert capsys.readouterr().err == ""
    # The old spellings still mean what they meant, with a warning naming the new one.
    assert _timeouts(Wait(300.0, bare=True), 45.0, 7.0) == (7.0, 45.0)
    err = capsys.readouterr().err
    assert "--call-timeout is deprecated: write --timeout" in err
    assert "'--wait --timeout 45' is deprecated: write --wait 45" in err


def submit(daemon: NimbusDaemon, tmp_path: Path, *args: str) -> Any:
    project = tmp_path / "wordcount"
    shutil.copytree(WORDCOUNT.parent, project, dirs_exist_ok=True)
    return CliRunner().invoke(main, ["submit", str(project / "wordcount.py"), *args,
                                     "--port", str(port_of(daemon))])


def test_submit_wait_takes_seconds_and_the_old_spelling_warns(daemon: NimbusDaemon,
                                                              tmp_path: Path) -> None:
    result = submit(daemon, tmp_path, "--name", "a", "--wait", "5", "--timeout", "10")
    assert result.exit_code == 1                # launcher none: it will not run
    assert "will not run: unscheduled" in result.stderr
    assert "deprecated" not in result.stderr
    result = submit(daemon, tmp_path, "--name", "b", "--wait", "--timeout", "10")
    assert result.exit_code == 1
    assert "'--wait --timeout 10' is deprecated: write --wait 10" in result.stderr
    result = submit(daemon, tmp_path, "--name", "c", "--wait", "0")
    assert result.exit_code == 2 and "the wait must be more than 0 seconds" in result.stderr


# --- ui: the running daemon's bound URL -------------------------------------------------

def test_ui_names_the_running_daemons_bound_url(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = {"NIMBUS_THRIFT_DATA_DIR": str(data), "NIMBUS_THRIFT_UI_PORT": "-1"}
    running = start_daemon(data, ui_port=-1)      # any free port: only it knows which
    try:
        assert running.ui_url is not None and ":8080/" not in running.ui_url
        result = CliRunner().invoke(main, ["ui"], env=env)
        assert result.exit_code == 0, result.output
        assert result.stdout == running.ui_url + "\n"
    finally:
        running.stop(grace=5.0)
    assert not (data / UI_URL_FILE).exists()
    result = CliRunner().invoke(main, ["ui"], env=env)
    assert result.exit_code == 1
    assert f"no daemon is running on {data}" in result.stderr


def test_ui_ignores_the_record_of_a_daemon_that_is_gone(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True, timeout=60)
    # As a crashed daemon leaves it: the URL and the id of a process that has exited.
    (data / UI_URL_FILE).write_text(f"http://127.0.0.1:1234/\n{gone.stdout.strip()}\n")
    env = {"NIMBUS_THRIFT_DATA_DIR": str(data), "NIMBUS_THRIFT_UI_PORT": "8123"}
    result = CliRunner().invoke(main, ["ui"], env=env)
    assert result.exit_code == 0
    assert result.stdout.endswith(":8123/\n")
    (data / UI_URL_FILE).write_text(f"http://127.0.0.1:1234/\n{os.getpid()}\n")
    assert CliRunner().invoke(main, ["ui"], env=env).stdout == "http://127.0.0.1:1234/\n"


# --- completion -------------------------------------------------------------------------

def completions(args: list[str], incomplete: str) -> list[str]:
    complete = ShellComplete(main, {}, "nimbus-thrift", "_NIMBUS_THRIFT_COMPLETE")
    return [item.value for item in complete.get_completions(args, incomplete)]


def test_completion_offers_topology_names_and_blob_keys(daemon: NimbusDaemon,
                                                        tmp_path: Path) -> None:
    port = str(port_of(daemon))
    with NimbusClient("127.0.0.1", port_of(daemon), timeout=10) as client:
        for name in ("words", "wordsmith", "other"):
            client.submit_topology(WORDCOUNT, name=name)
        for key in ("lexicon", "lists"):
            upload_blob(client, key, io.BytesIO(b"x"), create=True)
    assert completions(["kill", "--port", port], "word") == ["words", "wordsmith"]
    assert completions(["info", "--port", port], "") == ["other", "words", "wordsmith"]
    assert completions(["blob", "cat", "--port", port], "l") == ["lexicon", "lists"]
    assert completions(["blob", "delete", "--port", port, "lexicon"], "li") == ["lists"]


def test_completion_without_a_daemon_offers_nothing(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    with refused_port() as port:
        assert completions(["kill", "--port", str(port)], "") == []
        assert completions(["blob", "cat", "--port", str(port)], "") == []
