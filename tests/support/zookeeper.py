"""A real ZooKeeper server for the HA tests: Debian's (scripts/install_zookeeper.sh),
standalone, on a free loopback port, its data in a temporary directory; stopped by its
PID. Each test takes a root path of its own under it, so tests share one server (a JVM
takes seconds to start) without seeing each other's nodes."""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path

from support.polling import wait_for_value

JARS = [Path("/usr/share/java/zookeeper.jar"), Path("/usr/share/java/slf4j-simple.jar")]
#: Short ticks: sessions of a second or two make failover tests quick.
TICK_MS = 200


def available() -> str | None:
    """None when a server can be started here, else why not."""
    if shutil.which("java") is None:
        return "no java on PATH"
    if not JARS[0].is_file():
        return f"{JARS[0]} is missing (scripts/install_zookeeper.sh installs it)"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(b"ruok")
            return sock.recv(4) == b"imok"
    except OSError:
        return False


class ZooKeeperServer:
    """One standalone server; ``address`` is ``127.0.0.1:<port>``."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="nt-zk-"))
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self._roots = itertools.count(1)

    def start(self) -> ZooKeeperServer:
        (self.dir / "data").mkdir()
        (self.dir / "zoo.cfg").write_text(
            f"tickTime={TICK_MS}\ndataDir={self.dir / 'data'}\nclientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n"
            "minSessionTimeout=400\nmaxSessionTimeout=30000\n"
            "4lw.commands.whitelist=ruok,srvr\n")
        classpath = ":".join(str(jar) for jar in JARS if jar.is_file())
        log = open(self.dir / "server.log", "wb")
        self.proc = subprocess.Popen(
            ["java", "-Xmx256m", "-cp", classpath,
             "org.apache.zookeeper.server.ZooKeeperServerMain", str(self.dir / "zoo.cfg")],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        wait_for_value(lambda: self.proc is not None and
                       (self.proc.poll() is not None or _answers(self.port)),
                       f"ZooKeeper on {self.address}", timeout=60, every=0.1)
        if self.proc.poll() is not None:
            raise RuntimeError(f"ZooKeeper exited: {(self.dir / 'server.log').read_text()}")
        return self

    def root(self) -> str:
        """A fresh root path for one test (its nodes are nobody else's)."""
        return f"/t{os.getpid()}-{next(self._roots)}"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
