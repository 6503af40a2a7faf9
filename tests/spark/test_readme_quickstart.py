"""The README's quick start, run as written (issue 30): its commands are read from
README.md's "Quick start" section and run in an empty folder, against a daemon started
by its ``nimbus-thrift nimbus`` line. Two flags are added to the daemon only (``--port 0
--ui-port -1``: this machine's 6627 and 8080 may be taken), and its data directory is a
temporary one (XDG_DATA_HOME), so the client commands find it through its Unix socket
as they would the default one. The ``logs ... -f`` line is read until the sink's count
line arrives, then stopped with Ctrl-C, which must end it with status 0."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Iterator

import pytest

from support.spark import FAST_JVM

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
#: Seconds for the daemon to start, and for the sink's first line after the submit.
START_TIMEOUT = 60.0
COUNTS_TIMEOUT = 180.0


def quick_start_blocks() -> list[list[str]]:
    """The quick start's sh blocks, each as its commands (comments and blanks out)."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    return [[line.split("  #")[0].strip() for line in block.splitlines()
             if line.strip() and not line.lstrip().startswith("#")] for block in blocks]


def lines_of(stream: object) -> "queue.Queue[str]":
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in stream:                             # type: ignore[attr-defined]
            lines.put(line)
        lines.put("")

    threading.Thread(target=pump, daemon=True).start()
    return lines


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    venv_bin = str(Path(sys.executable).parent)
    return {**{k: v for k, v in os.environ.items() if not k.startswith("NIMBUS_THRIFT_")},
            "PATH": venv_bin + os.pathsep + os.environ.get("PATH", ""),
            "XDG_DATA_HOME": str(tmp_path / "data-home"), "JAVA_TOOL_OPTIONS": FAST_JVM}


@pytest.fixture
def daemon(env: dict[str, str], tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    first = quick_start_blocks()[0]
    assert first[-1] == "nimbus-thrift nimbus"
    process = subprocess.Popen([*first[-1].split(), "--port", "0", "--ui-port", "-1"],
                               cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    lines = lines_of(process.stderr)
    try:
        while "web UI, REST API and /metrics at" not in (line := lines.get(
                timeout=START_TIMEOUT)):
            assert line, "the daemon exited before it served"
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stderr.close()


def test_the_quick_start_shows_the_counts(daemon: subprocess.Popen[str],
                                          env: dict[str, str], tmp_path: Path) -> None:
    work = tmp_path / "empty"
    work.mkdir()
    write, submit, follow, kill = quick_start_blocks()[1]
    assert write.startswith("nimbus-thrift example wordcount > wordcount.py")
    for command in (write, submit):
        done = subprocess.run(command, shell=True, cwd=work, env=env, capture_output=True,
                              text=True, timeout=COUNTS_TIMEOUT)
        assert done.returncode == 0, f"{command}: {done.stderr}"
    assert follow.startswith("nimbus-thrift logs wordcount") and "-f" in follow.split()
    reader = subprocess.Popen(follow.split(), cwd=work, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        out = lines_of(reader.stdout)
        while not re.search(r"sink: top words: the \d+", line := out.get(
                timeout=COUNTS_TIMEOUT)):
            assert line, f"logs ended: {reader.wait()}"
        reader.send_signal(signal.SIGINT)
        assert reader.wait(60) == 0
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()
        for stream in (reader.stdout, reader.stderr):
            assert stream is not None
            stream.close()
    done = subprocess.run(kill, shell=True, cwd=work, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in work.iterdir()) == ["wordcount.py"]
