"""``nimbus-thrift logs`` against a real daemon (``--launcher none``, its web side on any
free port, found through the record in its data directory): the last lines of a
topology's log written where the launcher sends it, a component's lines, ``--follow``
as a user runs it (a process of its own) through a rotation, ended by Ctrl-C with
status 0 and nothing else said; a log not yet written and a killed topology."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest
from click.testing import CliRunner

from nimbus_thrift.cli import main
from nimbus_thrift.client.client import NimbusClient
from nimbus_thrift.nimbus import NimbusDaemon, load_config

from support.nimbus import port_of
from support.rawthrift import wait_for

WORDCOUNT = Path(__file__).parents[1] / "topologies_submit" / "wordcount" / "wordcount.py"
#: Seconds a line printed by the follower may take to arrive (it asks every second).
LINE_TIMEOUT = 30.0


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[NimbusDaemon]:
    config = load_config(env={}, flags={"ui_port": -1, "data_dir": str(tmp_path / "data"),
                                        "port": 0, "launcher": "none", "unix_socket": ""})
    running = NimbusDaemon(config)
    running.start()
    try:
        yield running
    finally:
        running.stop(grace=5.0)


def submit(daemon: NimbusDaemon, name: str) -> Path:
    """Submit the word count as ``name``; the file its log would be in."""
    with NimbusClient("127.0.0.1", port_of(daemon), timeout=10) as client:
        client.submit_topology(WORDCOUNT, name=name)
        tid = next(t.id for t in client.getClusterInfo().topologies if t.name == name)
    assert daemon.handler is not None
    return daemon.handler.topologies_dir / tid / "logs" / "stderr"


def cli(daemon: NimbusDaemon, *args: str) -> Any:
    env = {"NIMBUS_THRIFT_DATA_DIR": str(daemon.config.data_dir)}
    return CliRunner().invoke(main, [*args, "--port", str(port_of(daemon))], env=env)


def write_log(path: Path, text: str, mode: str = "a") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open(mode) as log:
        log.write(text)


def test_the_last_lines_and_a_components(daemon: NimbusDaemon) -> None:
    log = submit(daemon, "wc")
    write_log(log, "".join(f"INFO line {i}\n" for i in range(30)) +
              "INFO tuple of split task 0 stream default: ('cow',)\n"
              "ERROR bolt 'count' raised KeyError: 'x'\n  File \"wordcount.py\", line 9\n"
              "INFO last\n")
    result = cli(daemon, "logs", "wc", "-n", "3")
    assert result.exit_code == 0, result.output
    assert result.stdout == "ERROR bolt 'count' raised KeyError: 'x'\n" \
                            "  File \"wordcount.py\", line 9\nINFO last\n"
    result = cli(daemon, "logs", "wc", "--component", "split")
    assert result.stdout == "INFO tuple of split task 0 stream default: ('cow',)\n"
    result = cli(daemon, "logs", "wc", "--lines", "100")
    assert result.stdout.count("\n") == 34


def test_a_log_not_written_yet_and_a_killed_topology(daemon: NimbusDaemon) -> None:
    submit(daemon, "quiet")
    result = cli(daemon, "logs", "quiet")
    assert result.exit_code == 1
    assert "topology quiet has written no log yet" in result.stderr
    assert cli(daemon, "kill", "quiet", "-w", "0").exit_code == 0
    with NimbusClient("127.0.0.1", port_of(daemon), timeout=10) as client:
        wait_for(lambda: not client.getClusterInfo().topologies, timeout=30,
                 what="the killed topology removed")
    result = cli(daemon, "logs", "quiet")
    assert result.exit_code == 1
    assert result.stderr.strip().endswith("no topology named 'quiet' (see 'nimbus-thrift "
                                          "list')")


class Lines:
    """The lines a process prints, read by a thread, each waited for in turn."""

    def __init__(self, stream: Any) -> None:
        self.queue: queue.Queue[str] = queue.Queue()
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream: Any) -> None:
        for line in stream:
            self.queue.put(line)
        self.queue.put("")                  # the end

    def next(self) -> str:
        return self.queue.get(timeout=LINE_TIMEOUT)


def test_follow_through_a_rotation_and_ctrl_c(daemon: NimbusDaemon) -> None:
    log = submit(daemon, "wc")
    write_log(log, "first\nsecond\n")
    env = {**os.environ, "NIMBUS_THRIFT_DATA_DIR": str(daemon.config.data_dir),
           "NIMBUS_THRIFT_PORT": str(port_of(daemon))}
    follower = subprocess.Popen(
        [sys.executable, "-m", "nimbus_thrift", "logs", "wc", "--follow", "-n", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    out, err = Lines(follower.stdout), Lines(follower.stderr)
    try:
        assert out.next() == "second\n"
        write_log(log, "third\n")
        assert out.next() == "third\n"
        # Rotated: the file replaced by a new, shorter one.
        replacement = log.with_name("stderr.new")
        replacement.write_text("new\n")
        os.replace(replacement, log)
        assert out.next() == "new\n"
        assert "the log was truncated or replaced" in err.next()
        follower.send_signal(signal.SIGINT)
        assert follower.wait(LINE_TIMEOUT) == 0
        assert out.next() == "" and err.next() == ""      # nothing more was said
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
        out.thread.join(LINE_TIMEOUT)
        err.thread.join(LINE_TIMEOUT)
        for stream in (follower.stdout, follower.stderr):
            assert stream is not None
            stream.close()


def test_a_reader_that_goes_away_ends_it_quietly(daemon: NimbusDaemon) -> None:
    # `logs NAME | head -1`: the pipe closed while lines are still being written.
    log = submit(daemon, "wc")
    write_log(log, "".join(f"line {i} {'x' * 100}\n" for i in range(5000)))
    env = {**os.environ, "NIMBUS_THRIFT_DATA_DIR": str(daemon.config.data_dir)}
    reader = subprocess.Popen(
        [sys.executable, "-m", "nimbus_thrift", "logs", "wc", "-n", "5000", "--port",
         str(port_of(daemon))], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert reader.stdout is not None and reader.stderr is not None
    assert reader.stdout.readline().startswith(b"line 0 ")
    reader.stdout.close()
    assert reader.wait(LINE_TIMEOUT) == 0
    assert reader.stderr.read() == b""
    reader.stderr.close()
