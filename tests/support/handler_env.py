"""A Nimbus handler for the fakes tier: over a real Store in a data directory, with a
fake clock and a fake launcher; restarted over the same directory as a daemon would be.
Test files subclass :class:`HandlerEnv` with their own helpers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nimbus_thrift.nimbus.config import load_config
from nimbus_thrift.nimbus.service.handler import NimbusHandler
from nimbus_thrift.nimbus.state.store import Store

from support.nimbus import FakeClock, FakeLauncher, N


class HandlerEnv:
    """A handler over ``data_dir`` (made if missing) with ``config`` as daemon flags
    (the launcher is ``none``: the fake stands in for it)."""

    #: Whether :meth:`restart` closes the old handler first (:meth:`close`), or only
    #: its store.
    restart_closes: bool = False

    def __init__(self, data_dir: Path, **config: Any):
        self.data_dir = data_dir
        data_dir.mkdir(parents=True, exist_ok=True)
        self.clock = FakeClock()
        self.launcher = self.new_launcher()
        self.config = load_config(env={}, flags={"data_dir": str(data_dir),
                                                 "launcher": "none", **config})
        self.open()

    def new_launcher(self) -> FakeLauncher:
        """The launcher of a new handler (at start and at each restart)."""
        return FakeLauncher()

    def open(self) -> None:
        """A handler over the data directory, recovered, its background work done."""
        self.store = Store(self.data_dir / "nimbus.sqlite3")
        self.handler = NimbusHandler(N, self.config, self.store, self.launcher,
                                     clock=self.clock)
        self.handler.recover()
        assert self.handler.background.wait_idle(10)

    def close(self) -> None:
        self.handler.close()
        self.store.close()

    def restart(self) -> None:
        """A new handler, with a new launcher, over the same data directory (what a
        daemon restart does)."""
        if self.restart_closes:
            self.close()
        else:
            self.store.close()
        self.launcher = self.new_launcher()
        self.open()
