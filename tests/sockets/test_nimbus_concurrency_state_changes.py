"""State changes do not wait behind reads (issue 26), over real sockets: while reads are
stuck in the middle of their work (a launcher's status that does not answer, holding no
lock a state change needs), deactivate, activate and rebalance of the same topology are
answered, committed and seen by the next read; the stuck reads then finish with the
state as it is when they end, and the daemon's workers are all free again."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest

from support.nimbus import FakeLauncher, N, make_zip, port_of, wordcount
from nimbus_thrift.client.client import NimbusClient
from nimbus_thrift.nimbus import NimbusDaemon, load_config
from nimbus_thrift.nimbus.launcher import RunStatus

#: A hang bound only: a call that waits this long is stuck behind something.
HANG = 20.0
#: The daemon's workers in these tests, and the reads stuck at once: half of them.
WORKERS = 8
STUCK_READS = WORKERS // 2


class StuckStatus(FakeLauncher):
    """A FakeLauncher whose status() waits, while ``stuck`` is set, until released."""

    def __init__(self) -> None:
        super().__init__()
        self.stuck = False
        self.waiting = 0
        self._cond = threading.Condition()
        self._gate = threading.Event()

    def status(self, topology_id: str) -> RunStatus:
        if self.stuck:
            with self._cond:
                self.waiting += 1
                self._cond.notify_all()
            try:
                if not self._gate.wait(HANG):
                    raise RuntimeError("status was never released")
            finally:
                with self._cond:
                    self.waiting -= 1
                    self._cond.notify_all()
        return super().status(topology_id)

    def wait_for(self, count: int) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self.waiting >= count, HANG)

    def release(self) -> None:
        self.stuck = False
        self._gate.set()


@pytest.fixture
def launcher() -> Iterator[StuckStatus]:
    stuck = StuckStatus()
    yield stuck
    stuck.release()


@pytest.fixture
def daemon(tmp_path: Path, launcher: StuckStatus) -> Iterator[NimbusDaemon]:
    config = load_config(env={}, flags={"ui_port": 0, "data_dir": str(tmp_path / "data"),
                                        "port": 0, "worker_threads": WORKERS})
    d = NimbusDaemon(config, launcher=launcher)
    d.start()
    try:
        yield d
    finally:
        d.stop(grace=5.0)


def client(daemon: NimbusDaemon) -> NimbusClient:
    return NimbusClient("127.0.0.1", port_of(daemon), timeout=HANG)


def submit(daemon: NimbusDaemon, name: str) -> str:
    with client(daemon) as c:
        location = c.beginFileUpload()
        c.uploadChunk(location, make_zip())
        c.finishFileUpload(location)
        c.submitTopology(name, location, json.dumps({}), wordcount())
        return next(t.id for t in c.getClusterInfo().topologies if t.name == name)


def stuck_reads(daemon: NimbusDaemon, launcher: StuckStatus, topology_id: str
                ) -> tuple[list[threading.Thread], list[Any]]:
    """STUCK_READS getTopologyInfo calls, each on its own connection, stopped inside the
    launcher's status; returns their threads and (once they end) their answers."""
    answers: list[Any] = []

    def read() -> None:
        with client(daemon) as c:
            answers.append(c.getTopologyInfo(topology_id))

    launcher.stuck = True
    threads = [threading.Thread(target=read, daemon=True) for _ in range(STUCK_READS)]
    for thread in threads:
        thread.start()
    assert launcher.wait_for(STUCK_READS), "the reads never reached the launcher"
    return threads, answers


def test_state_changes_answer_while_reads_are_stuck(daemon: NimbusDaemon,
                                                    launcher: StuckStatus) -> None:
    tid = submit(daemon, "wc")
    threads, answers = stuck_reads(daemon, launcher, tid)
    try:
        with client(daemon) as c:
            c.deactivate("wc")
            assert daemon.handler is not None
            assert daemon.handler.store.topology(tid).status == "INACTIVE"  # type: ignore[union-attr]
            c.activate("wc")
            c.rebalance("wc", N.RebalanceOptions(wait_secs=600, num_workers=2))
            # A read that does not ask the launcher sees each commit at once.
            assert json.loads(c.getTopologyConf(tid))["storm.id"] == tid
        assert launcher.waiting == STUCK_READS      # the reads were stuck all along
        assert daemon.handler.store.topology(tid).status == "REBALANCING"  # type: ignore[union-attr]
    finally:
        launcher.release()
        for thread in threads:
            thread.join(HANG)
    assert not any(thread.is_alive() for thread in threads)
    assert [a.id for a in answers] == [tid] * STUCK_READS
    # Every worker is free again: as many calls at once as there are workers answer.
    done = threading.Barrier(WORKERS + 1, timeout=HANG)

    def read() -> None:
        with client(daemon) as c:
            c.getTopologyInfo(tid)
        done.wait()

    for _ in range(WORKERS):
        threading.Thread(target=read, daemon=True).start()
    done.wait()
    assert launcher.methods(tid)[-3:] == ["pause", "resume", "pause"]


def test_a_kill_answers_while_reads_are_stuck(daemon: NimbusDaemon,
                                              launcher: StuckStatus) -> None:
    tid = submit(daemon, "wc")
    submit(daemon, "other")
    threads, answers = stuck_reads(daemon, launcher, tid)
    try:
        with client(daemon) as c:
            c.killTopologyWithOpts("wc", N.KillOptions(wait_secs=60))
            c.deactivate("other")
        assert daemon.handler is not None
        assert daemon.handler.store.topology(tid).status == "KILLED"  # type: ignore[union-attr]
        assert launcher.waiting == STUCK_READS
    finally:
        launcher.release()
        for thread in threads:
            thread.join(HANG)
    assert not any(thread.is_alive() for thread in threads)
    assert len(answers) == STUCK_READS
