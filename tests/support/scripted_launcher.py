"""A launcher that plays a status script, loaded by a real daemon as
``support.scripted_launcher:factory`` (the daemon's ``module:factory`` launcher setting).

Each topology's configuration says what its status will be: the list under
:data:`SCRIPT_KEY` is one ``sched_status`` per ``status()`` call, the last one repeated
for ever (``["starting: spark-submit", "running: batch 0"]``); :data:`LAUNCH_ERROR_KEY`
makes ``launch`` raise, which the daemon records under ``__nimbus``. A topology
submitted inactive plays ``paused:`` where the script says ``running:``.

So a test drives ``submit --wait`` through the daemon with ``--conf`` alone.
"""

from __future__ import annotations

import threading
from typing import Any

from nimbus_thrift.nimbus.launcher import LauncherError, LaunchSpec, RunStatus
from nimbus_thrift.nimbus.launcher_choice import UnscheduledLauncher

SCRIPT_KEY = "test.status.script"
LAUNCH_ERROR_KEY = "test.launch.error"
DEFAULT_SCRIPT = ("running: scripted",)


class ScriptedLauncher(UnscheduledLauncher):
    """Pause, resume, rebalance, nodes and close do nothing, as in the ``none`` launcher."""

    name = "scripted"

    def __init__(self) -> None:
        self.scripts: dict[str, list[str]] = {}
        self.played: dict[str, int] = {}
        self.lock = threading.Lock()

    def launch(self, spec: LaunchSpec) -> None:
        error = spec.conf.get(LAUNCH_ERROR_KEY)
        if error:
            raise LauncherError(str(error))
        script = [str(s) for s in spec.conf.get(SCRIPT_KEY) or DEFAULT_SCRIPT]
        if not spec.active:
            script = ["paused:" + s[len("running:"):] if s.startswith("running:") else s
                      for s in script]
        with self.lock:
            self.scripts[spec.topology_id] = script
            self.played[spec.topology_id] = 0

    def status(self, topology_id: str) -> RunStatus:
        with self.lock:
            script = self.scripts.get(topology_id)
            if script is None:
                return RunStatus(state="unscheduled", detail="unscheduled: never launched")
            index = self.played[topology_id]
            self.played[topology_id] = index + 1
        detail = script[min(index, len(script) - 1)]
        state, _, why = detail.partition(": ")
        # As the Spark launcher: a failure's reason is one of the topology's errors.
        return RunStatus(state=state, detail=detail,
                         errors=(("__spark", why, 1),) if state == "failed" else ())

    def stop(self, topology_id: str, grace: float) -> None:
        with self.lock:
            self.scripts[topology_id] = ["stopped: killed"]


def factory(config: Any) -> ScriptedLauncher:
    return ScriptedLauncher()
