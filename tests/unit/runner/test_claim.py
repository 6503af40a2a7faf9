"""Fakes tier: the fence of cluster mode (runner/claim.py): who holds driver.claim, the
driver's poll, and the places a batch asks before its side effects (the spouts' offsets
and acks, the foreachBatch sink)."""

from __future__ import annotations

import pickle
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from nimbus_thrift.runner import claim as cl
from nimbus_thrift.runner import source
from nimbus_thrift.runner.claim import (Claim, ClaimLost, ClaimUnreadable, DriverFence,
                                        Fence, read_claim, write_claim)
from nimbus_thrift.runner.dataflow import BatchSink
from nimbus_thrift.runner.local import spec_of
from nimbus_thrift.runner.plan import build_plan
from nimbus_thrift.runner.rundir import RunDir
from nimbus_thrift.runner.source import SpoutReader
from nimbus_thrift.topology import Spout, Topology

ACKED: list[tuple[int, int]] = []


class Plenty(Spout):
    """100 tuples per task, acks recorded."""

    outputs = {"n": int}

    def initialize(self, conf: Any, context: Any) -> None:
        self.task = context.task

    def available(self) -> int:
        return 100

    def read(self, start: int, end: int) -> Any:
        for i in range(start, end):
            yield (i,)

    def ack(self, offset: int) -> None:
        ACKED.append((self.task, offset))


class PlentyTopology(Topology):
    numbers = Plenty.spec(par=2)


def reader(tmp_path: Path, fence: Fence) -> SpoutReader:
    node = build_plan(spec_of(PlentyTopology)).nodes["numbers"]
    source = SimpleNamespace(node=node, topology="PlentyTopology", work_dir=str(tmp_path),
                             max_batch=1000, pausable=True, accumulator=None, fence=fence)
    return SpoutReader(source)  # type: ignore[arg-type]


def claim(token: str, attempt: int = 1) -> Claim:
    return Claim(token=token, attempt=attempt, driver_id="driver-1-0002", host="other",
                 pid=42, at=5.0)


@pytest.fixture
def fence(tmp_path: Path) -> Fence:
    path = RunDir(tmp_path).claim
    write_claim(path, claim("mine"))
    return Fence(str(path), "mine")


def test_a_claim_round_trips_and_garbage_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "driver.claim"
    write_claim(path, claim("t"))
    assert read_claim(path) == claim("t")
    path.write_text('{"token": 3, "attempt": 1}')
    with pytest.raises(ValueError):
        read_claim(path)


def test_the_fence_holds_only_its_own_token(fence: Fence) -> None:
    path = Path(fence.path)
    assert fence.check() == cl.HELD and fence.holds()
    write_claim(path, claim("theirs", 2))
    assert fence.check() == cl.LOST
    path.write_text("not json")             # no driver writes that: not ours either
    assert fence.check() == cl.LOST
    path.unlink()                           # withdrawn (or the directory is gone)
    assert fence.check() == cl.LOST
    path.mkdir()                            # a directory is refused, as untrusted input
    assert fence.check() == cl.LOST


def test_a_claim_that_cannot_be_read_is_not_known(fence: Fence, monkeypatch) -> None:
    def unreadable(path: Path) -> Claim:
        raise PermissionError(13, "Permission denied", str(path))
    monkeypatch.setattr(cl, "read_claim", unreadable)
    assert fence.check() == cl.UNKNOWN and not fence.holds()


def test_the_fence_pickles_as_the_spouts_carry_it(fence: Fence) -> None:
    assert pickle.loads(pickle.dumps(fence)) == fence


def test_the_driver_is_superseded_once_with_one_line(fence: Fence, capsys) -> None:
    driver = DriverFence(fence)
    assert driver.poll() and not driver.superseded
    write_claim(Path(fence.path), claim("theirs", 7))
    assert not driver.poll() and driver.superseded
    assert not driver.poll()                        # sticky, and said once
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "superseded: driver driver-1-0002 on other (pid 42, attempt 7)" in err


def test_a_claim_unreadable_for_long_fails_the_driver(fence: Fence) -> None:
    now = [0.0]
    unknown = SimpleNamespace(check=lambda: cl.UNKNOWN, path=fence.path)
    driver = DriverFence(unknown, clock=lambda: now[0])  # type: ignore[arg-type]
    assert driver.poll()                            # a moment's trouble: go on
    now[0] = cl.CLAIM_UNREADABLE_SECS - 1
    assert driver.poll()
    now[0] = cl.CLAIM_UNREADABLE_SECS + 1
    with pytest.raises(ClaimUnreadable):
        driver.poll()
    driver.fence = fence                            # readable again: the count restarts
    assert driver.poll()


def test_spouts_plan_no_batch_and_ack_nothing_without_the_claim(tmp_path: Path,
                                                                fence: Fence,
                                                                monkeypatch) -> None:
    ACKED.clear()
    followed: list[Path] = []
    monkeypatch.setattr(source, "follow_logs", followed.append)
    r = reader(tmp_path, fence)
    start = {"0": 10, "1": 20}
    assert r.latestOffset(start, ReadAllAvailable()) == {"0": 100, "1": 100}
    r.commit({"0": 7})
    assert ACKED == [(0, 7)]
    write_claim(Path(fence.path), claim("theirs"))
    assert r.latestOffset(start, ReadAllAvailable()) == start
    r.commit({"0": 9})
    assert ACKED == [(0, 7)]
    # The source runner of a cluster-mode driver writes to the work directory's logs.
    assert followed == [tmp_path / "logs"]


def test_the_sink_runs_no_batch_without_the_claim(fence: Fence) -> None:
    write_claim(Path(fence.path), claim("theirs"))
    sink = BatchSink(plan=None, accumulator=None, collected=None,  # type: ignore[arg-type]
                     work_dir="", fence=fence)
    with pytest.raises(ClaimLost, match="another one took over"):
        sink(batch=None, batch_id=3)                # type: ignore[arg-type]
