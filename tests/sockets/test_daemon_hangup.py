"""Issue 27, item 7: SIGHUP (a closed terminal, a dropped SSH session) stops the daemon
gracefully, as SIGTERM does: before, its default action killed it and left the Unix
socket behind, with calls in flight cut off. A real ``nimbus-thrift nimbus`` process."""

from __future__ import annotations

import fcntl
import os
import signal
from pathlib import Path

from click.testing import CliRunner

from nimbus_thrift.cli import main
from nimbus_thrift.client import NimbusClient

from support.attacked_daemon import AttackedDaemon


def test_sighup_stops_the_daemon_gracefully_and_it_starts_again(tmp_path: Path) -> None:
    daemon = AttackedDaemon(tmp_path)
    try:
        socket_path = Path(daemon.events("nimbus_started")[0]["unix_socket"])
        assert socket_path.exists()
        with NimbusClient("127.0.0.1", daemon.port, timeout=30) as client:
            assert client.call("getClusterInfo").supervisors is not None
        daemon.proc.send_signal(signal.SIGHUP)
        assert daemon.wait(30) == 0
    finally:
        daemon.stop()
    assert daemon.events("stopping") and daemon.events("nimbus_stopped")
    assert not socket_path.exists()
    # The data directory is unlocked: the lock file is free to take...
    fd = os.open(daemon.data_dir / "nimbus.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
    # ... and a daemon starts on it again.
    again = AttackedDaemon(tmp_path)
    try:
        with NimbusClient("127.0.0.1", again.port, timeout=30) as client:
            client.call("getClusterInfo")
    finally:
        again.stop()


def test_the_help_says_sighup_stops_and_does_not_reload() -> None:
    result = CliRunner().invoke(main, ["nimbus", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert "until SIGTERM, SIGHUP or Ctrl-C" in text
    assert "SIGHUP (a closed terminal) stops; it does not reload settings" in text
