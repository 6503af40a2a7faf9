"""The `nimbus-thrift` command, as a user runs it: a real process, real signals."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

from thriftpy2.rpc import make_client
from thriftpy2.transport import TFramedTransportFactory

CLI = [str(Path(sys.executable).with_name("nimbus-thrift"))]


def start_demo(*args: str) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(CLI + ["demo", "--port", "0", "--log-format", "json", *args],
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:          # the banner comes once the port is listening
        match = re.search(r"on 127\.0\.0\.1:(\d+)", line)
        if match:
            return proc, int(match.group(1))
    proc.kill()
    raise AssertionError(f"demo exited before listening (rc={proc.wait()})")


def test_demo_serves_and_stops_gracefully_on_sigterm(demo):
    proc, port = start_demo("--workers", "2")
    try:
        client = make_client(demo.Echo, "127.0.0.1", port,
                             trans_factory=TFramedTransportFactory(), timeout=5000)
        assert client.echo("cli") == "cli"
        client.close()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    events = [json.loads(line)["event"] for line in err.splitlines() if line.startswith("{")]
    assert "stopping" in events and "stopped" in events


def test_bad_option_is_one_sentence_and_exit_2():
    result = subprocess.run(CLI + ["demo", "--max-frame-size", "0"], capture_output=True,
                            text=True, timeout=30)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "--max-frame-size" in result.stderr


def test_port_in_use_is_one_sentence_and_exit_1():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(CLI + ["demo", "--port", str(port)], capture_output=True,
                                text=True, timeout=30)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
