"""A real Spark standalone cluster (one master, one or more workers) on 127.0.0.1, for
tests; with ``rest=True`` the master's REST submission server is on (cluster deploy
mode), on a port chosen by the OS as well.

Started from the pyspark installation's ``spark-class``, on ports chosen by the OS
(``--port 0``); the real ports are read back from the logs, never guessed. Every JVM
runs in its own session and is ended by PID when the cluster stops.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pyspark

SPARK_HOME = Path(pyspark.__file__).resolve().parent
START_TIMEOUT = 90.0


def _wait_for(log: Path, pattern: str, proc: subprocess.Popen[bytes], timeout: float) -> str:
    regex = re.compile(pattern)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.exists() else ""
        match = regex.search(text)
        if match:
            return match.group(1)
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[2]} exited with {proc.returncode}:\n{text[-2000:]}")
        time.sleep(0.2)
    raise TimeoutError(f"no {pattern!r} in {log} after {timeout} s")


class StandaloneCluster:
    """``with StandaloneCluster(tmp_path, cores=2) as cluster: cluster.url``"""

    def __init__(self, work: Path, cores: int = 2, memory: str = "2g", *,
                 workers: int = 1, rest: bool = False, worker_timeout: int = 60):
        self.work = Path(work)
        self.cores = cores
        self.memory = memory
        self.worker_count = workers
        self.rest = rest
        #: Seconds without a heartbeat before the master takes a worker for lost
        #: (spark.worker.timeout; Spark's default is 60).
        self.worker_timeout = worker_timeout
        self.procs: list[subprocess.Popen[bytes]] = []
        self.workers: list[subprocess.Popen[bytes]] = []
        self.worker_logs: list[Path] = []
        self.url = ""
        self.ui_port = 0
        self.rest_port = 0

    def _spawn(self, name: str, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
        log = self.work / f"{name}.log"
        env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
               # The standalone REST submission server binds a fixed port (6066)
               # unless told 0.
               "SPARK_MASTER_OPTS": (f"-Dspark.master.rest.enabled="
                                     f"{str(self.rest).lower()} "
                                     "-Dspark.master.rest.port=0 "
                                     f"-Dspark.worker.timeout={self.worker_timeout}"),
               "SPARK_LOG_DIR": str(self.work), "SPARK_PID_DIR": str(self.work)}
        with open(log, "wb") as out:
            proc = subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), *args],
                                    stdout=out, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)
        self.procs.append(proc)
        return proc, log

    def start(self) -> "StandaloneCluster":
        self.work.mkdir(parents=True, exist_ok=True)
        master, log = self._spawn("master", "org.apache.spark.deploy.master.Master",
                                  "--host", "127.0.0.1", "--port", "0", "--webui-port", "0")
        self.url = _wait_for(log, r"Starting Spark master at (spark://[\d.]+:\d+)", master,
                             START_TIMEOUT)
        self.ui_port = int(_wait_for(log, r"MasterWebUI.*started at http://[\w.]+:(\d+)",
                                     master, START_TIMEOUT))
        if self.rest:
            self.rest_port = int(_wait_for(
                log, r"StandaloneRestServer: Started REST server .* port (\d+)", master,
                START_TIMEOUT))
        for index in range(self.worker_count):
            self.add_worker(index)
        return self

    def add_worker(self, index: int) -> subprocess.Popen[bytes]:
        """Start worker ``index`` and wait until the master has registered it."""
        worker, wlog = self._spawn(
            f"worker{index}", "org.apache.spark.deploy.worker.Worker", "--host",
            "127.0.0.1", "--port", "0", "--webui-port", "0", "--cores", str(self.cores),
            "--memory", self.memory, "--work-dir", str(self.work / f"worker{index}"),
            self.url)
        _wait_for(wlog, r"(Successfully registered with master)", worker, START_TIMEOUT)
        self.workers.append(worker)
        self.worker_logs.append(wlog)
        return worker

    def kill_worker_of(self, worker_port: int) -> None:
        """SIGKILL the worker listening on ``worker_port``, with everything it started
        (its session: the drivers and executors it runs), as a host lost would."""
        for worker, log in zip(self.workers, self.worker_logs):
            text = log.read_text(errors="replace")
            if re.search(rf"Successfully started service 'sparkWorker' on port "
                         rf"{worker_port}\b", text):
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait()
                return
        raise LookupError(f"no worker of this cluster listens on port {worker_port}")

    @property
    def ui_url(self) -> str:
        return f"http://127.0.0.1:{self.ui_port}"

    @property
    def rest_url(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    def state(self) -> dict[str, Any]:
        """The master's ``/json/`` status (workers, active and completed apps)."""
        with urllib.request.urlopen(self.ui_url + "/json/", timeout=5) as resp:
            return json.loads(resp.read())

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.procs.clear()

    def __enter__(self) -> "StandaloneCluster":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()
