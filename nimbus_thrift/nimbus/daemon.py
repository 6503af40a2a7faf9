"""The nimbus daemon: state, launcher, handler and the Thrift server, started and
stopped in the right order.

    data_dir/
      nimbus.lock          held (flock) while a daemon uses the directory
      nimbus.sqlite3       state (WAL: also -wal and -shm files)
      inbox/               uploads: <id>.part while open, <id>.zip once finished
      topologies/<id>/     per-topology work directory (the launcher's; for the spark
                           launcher see nimbus_thrift/runner/rundir.py)
"""

from __future__ import annotations

import fcntl
import os
import time
from typing import Callable

import structlog

from ..idl import nimbus_idl
from ..rpc.server import Server, make_server
from .config import NimbusConfig
from .handler import NimbusHandler
from .launcher import Launcher
from .launchers import load_launcher
from .store import Store

log = structlog.get_logger(__name__)


class DaemonError(Exception):
    """The daemon cannot start; the message says why."""


class NimbusDaemon:
    """One nimbus: ``start()`` returns once it listens, ``stop()`` is graceful."""

    def __init__(self, config: NimbusConfig, *, launcher: Launcher | None = None,
                 clock: Callable[[], float] = time.time):
        self.config = config
        self._launcher = launcher
        self._clock = clock
        self._lock_fd: int | None = None
        self.store: Store | None = None
        self.handler: NimbusHandler | None = None
        self.server: Server | None = None

    def start(self) -> tuple[str, int]:
        """Open the data directory, recover, and serve.

        Raises:
            DaemonError: the directory is unusable or in use, the launcher cannot start.
            OSError: the address cannot be bound.
        """
        config = self.config
        try:
            config.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise DaemonError(f"cannot create data directory {config.data_dir}: "
                              f"{exc.strerror or exc}") from None
        self._lock_data_dir()
        try:
            from .launcher import LauncherError
            from .store import StoreError
            try:
                self.store = Store(config.data_dir / "nimbus.sqlite3")
                launcher = self._launcher or load_launcher(config.launcher, config)
            except (StoreError, LauncherError) as exc:
                raise DaemonError(str(exc)) from None
            self.handler = NimbusHandler(nimbus_idl(), config, self.store, launcher,
                                         clock=self._clock)
            self.handler.recover()
            self.server = make_server(
                nimbus_idl().Nimbus, self.handler, host=config.host, port=config.port,
                worker_threads=config.worker_threads, max_frame_size=config.max_frame_size,
                max_read_buffer_bytes=config.max_read_buffer_bytes,
                max_connections=config.max_connections, idle_timeout=config.idle_timeout)
            address = self.server.start()
            self.handler.start(address)
        except BaseException:
            self._close_state()
            raise
        log.info("nimbus_started", host=address[0], port=address[1],
                 data_dir=str(config.data_dir), launcher=config.launcher,
                 topologies=len(self.store.topologies()))
        return address

    def stop(self, grace: float = 10.0) -> None:
        """Stop serving (in-flight calls finish within ``grace``), then close state.
        Running topologies are left running: a restarted daemon adopts them."""
        if self.server is not None:
            self.server.stop(grace=grace)
            self.server = None
        self._close_state()
        log.info("nimbus_stopped")

    def _close_state(self) -> None:
        if self.handler is not None:
            self.handler.close()
            self.handler.launcher.close()
            self.handler = None
        if self.store is not None:
            self.store.close()
            self.store = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _lock_data_dir(self) -> None:
        path = self.config.data_dir / "nimbus.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise DaemonError(f"data directory {self.config.data_dir} is in use by another "
                              f"nimbus (pid {owner})") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    def __enter__(self) -> "NimbusDaemon":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
