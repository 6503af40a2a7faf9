"""Nimbus daemons with the Spark launcher, for the Spark tier: started in this process or
as child processes, waited on, and cleaned up so that no Spark application outlives
its test.

A test module keeps its own fixture (its flags, its cache directory) and builds it
from these.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

import pytest

from nimbus_thrift.client.client import NimbusClient
from nimbus_thrift.nimbus import NimbusDaemon, load_config
from nimbus_thrift.nimbus.spark.launcher import SparkLauncher
from nimbus_thrift.nimbus.spark.proctree import session_members
from nimbus_thrift.nimbus.spark.standby_app import STANDBY_DIR
from support.daemon_process import DaemonProcess
from support.polling import wait_for_value
from support.spark import FAST_JVM

#: Generous: the first micro-batch of a fresh application takes 10-60 s on 2 busy cores.
SPARK_TIMEOUT = 240.0
#: FAST_JVM as a child daemon's environment: start-up flags that save the JVM about 2 s
#: (C1 only, serial GC); not the launcher's default, as they cost a running topology a
#: third of its throughput.
FAST_JVM_ENV = {"JAVA_TOOL_OPTIONS": FAST_JVM}


def wait_until(what: str, check: Callable[[], Any], timeout: float = SPARK_TIMEOUT,
               every: float = 0.25) -> Any:
    """:func:`~support.polling.wait_for_value` with Spark's generous deadline."""
    return wait_for_value(check, what, timeout, every)


def client_of(d: DaemonProcess) -> NimbusClient:
    """A client of a child daemon, with timeouts that allow for a busy Spark."""
    return NimbusClient("127.0.0.1", d.port, timeout=60, connect_timeout=5)


@contextmanager
def in_process_daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                      standbys: bool = False, **flags: Any
                      ) -> Iterator[tuple[NimbusDaemon, tuple[str, int], SparkLauncher]]:
    """A started NimbusDaemon with the Spark launcher (local[2]) on 127.0.0.1 port 0,
    its address and its launcher (keeping standby drivers with ``standbys``); ``flags``
    add to or override the configuration. Whatever the test leaves running is stopped
    afterwards."""
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", FAST_JVM)
    config = load_config(env={}, flags={"ui_port": 0, "port": 0, "launcher": "spark",
                                        "data_dir": str(tmp_path / "data"),
                                        "spark_master": "local[2]", **flags})
    launcher = SparkLauncher(config, cache_dir=False, standbys=standbys)
    d = NimbusDaemon(config, launcher=launcher)
    address = d.start()
    try:
        yield d, address, launcher
    finally:
        if d.handler is not None:
            for topology_id in d.handler.store.topology_ids():
                launcher.stop(topology_id, 10)     # control=stop: it exits by itself
        d.stop(grace=5.0)


class SparkDaemons:
    """Starts ``nimbus-thrift nimbus --launcher spark`` child processes on one data
    directory (a restart is a second start); :meth:`stop_all` ends them and then kills
    any process of a topology or standby driver they left behind."""

    def __init__(self, data_dir: Path, cache_dir: Path, env: dict[str, str] | None = None):
        self.data_dir = data_dir
        self.env = {"XDG_CACHE_HOME": str(cache_dir), **(env or {})}
        self.started: list[DaemonProcess] = []

    def start(self, *args: str, env: dict[str, str] | None = None) -> DaemonProcess:
        d = DaemonProcess(self.data_dir, "--launcher", "spark", *args,
                          env={**self.env, **(env or {})})
        self.started.append(d)
        return d

    def stop_all(self) -> None:
        for d in self.started:
            if d.proc.poll() is None:
                d.sigterm()
        # Whatever a failed test left: no process of a standby or topology survives it.
        records = list(self.data_dir.glob("*/*/launch.json"))
        records += list((self.data_dir / STANDBY_DIR).glob("*/standby.json"))
        for path in records:
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if record.get("pid"):
                for p in session_members(record["pid"], record.get("start_ticks", 0)):
                    os.kill(p.pid, signal.SIGKILL)
