"""The submit path at scale (issue 26): the admission ledger keeps what the kept
topologies take exactly through submit, kill, removal, rebalance and restart; the
code check caches by content, so a second submit of the same code is checked as the
first was and changed code is checked again; the open uploads are counted as they
come and go."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.handler_env import HandlerEnv
from support.nimbus import WORDCOUNT_CODE, N, make_zip, upload, wordcount
from nimbus_thrift.nimbus.admission import AdmissionLedger
from nimbus_thrift.nimbus.transfers import uploads as uploads_module

GIB = 1 << 30


class Env(HandlerEnv):
    restart_closes = True

    def close(self) -> None:
        self.handler.topologies.code_checker.close()
        super().close()

    def submit(self, name: str, memory: int = 0, code: bytes | None = None) -> None:
        location = upload(self.handler, code if code is not None else make_zip())
        self.handler.submitTopology(name, location,
                                    json.dumps({"fake.memory.bytes": memory}), wordcount())

    def tick(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.handler.timers.run_due()
        assert self.handler.background.wait_idle(10)

    def names(self) -> list[str]:
        return sorted(t.name for t in self.handler.getClusterInfo().topologies)

    def assert_ledger_exact(self) -> None:
        """The ledger as a sum over every stored topology would make it."""
        ledger = self.handler.topologies.admission
        kept = self.store.topology_count()
        ledger.sync(kept, self.store.topology_ids, lambda tid: None)    # no-op when exact
        stored = [self.store.topology(tid) for tid in self.store.topology_ids()]
        assert len(ledger) == kept
        assert ledger.total == sum(self.launcher.memory_request(rec.conf)
                                   for rec in stored if rec is not None)


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    env = Env(tmp_path / "data", spark_memory_budget=10 * GIB)
    yield env
    env.close()


# --- the admission ledger ---------------------------------------------------------------

def test_the_ledger_reads_only_confs_it_has_not_recorded() -> None:
    def size(conf: Any) -> int:
        if conf.get("bad"):
            raise ValueError("spark.driver.memory is not a size")
        return int(conf["size"])
    confs = {"a": {"size": 1}, "b": {"size": 2}, "c": {"bad": True}}
    read: list[str] = []

    def conf_of(tid: str) -> dict[str, Any] | None:
        read.append(tid)
        return confs.get(tid)
    ledger = AdmissionLedger(size)
    ledger.sync(3, lambda: ["a", "b", "c", "gone"], conf_of)
    assert (len(ledger), ledger.total, read) == (3, 3, ["a", "b", "c", "gone"])
    ledger.add("d", {"size": 4})
    ledger.sync(4, lambda: [], conf_of)              # as many rows as recorded: no pass
    assert (len(ledger), ledger.total) == (4, 7)
    read.clear()
    ledger.sync(2, lambda: ["b", "d"], conf_of)      # two removed: only ids are listed
    assert (len(ledger), ledger.total, read) == (2, 6, [])


def test_admission_stays_exact_through_submit_kill_removal_and_rebalance(env: Env) -> None:
    env.submit("a", 4 * GIB)
    env.submit("b", 3 * GIB)
    env.assert_ledger_exact()
    assert env.handler.topologies.admission.total == 7 * GIB
    with pytest.raises(N.InvalidTopologyException, match=r"take 7\.0 GiB of the 10\.0 GiB"):
        env.submit("c", 4 * GIB)
    env.handler.killTopologyWithOpts("a", N.KillOptions(wait_secs=5))
    env.assert_ledger_exact()
    with pytest.raises(N.InvalidTopologyException, match="3.0 GiB are free"):
        env.submit("c", 4 * GIB)            # killed, not yet removed: still counted
    env.tick(5)
    assert env.names() == ["b"]
    env.submit("c", 4 * GIB)                # the removal made room
    env.assert_ledger_exact()
    assert env.handler.topologies.admission.total == 7 * GIB
    env.handler.rebalance("b", N.RebalanceOptions(wait_secs=0, num_workers=2))
    env.tick(0)
    env.assert_ledger_exact()
    assert env.handler.topologies.admission.total == 7 * GIB
    with pytest.raises(N.InvalidTopologyException, match="3.0 GiB are free"):
        env.submit("d", 4 * GIB)
    env.restart()                           # a new ledger, filled from the store
    with pytest.raises(N.InvalidTopologyException, match="3.0 GiB are free"):
        env.submit("d", 4 * GIB)
    env.assert_ledger_exact()
    env.submit("d", 3 * GIB)
    env.assert_ledger_exact()
    assert env.handler.topologies.admission.total == 10 * GIB


def test_max_topologies_counts_rows_removed_behind_the_ledger(tmp_path: Path) -> None:
    env = Env(tmp_path / "data", max_topologies=2)
    try:
        env.submit("a")
        env.submit("b")
        with pytest.raises(N.InvalidTopologyException, match=r"keeps 2 topologies"):
            env.submit("c")
        env.handler.killTopologyWithOpts("a", N.KillOptions(wait_secs=0))
        env.tick(0)
        env.submit("c")
        env.assert_ledger_exact()
        assert env.names() == ["b", "c"]
    finally:
        env.close()


# --- the code check, cached by content ---------------------------------------------------

def test_a_second_submit_of_the_same_code_is_checked_as_the_first(env: Env) -> None:
    checker = env.handler.topologies.code_checker
    env.submit("a")
    env.submit("b")                                 # the same bytes: from the cache
    assert checker.spawned == 1 and len(checker.cache) == 1
    # The same module name without the class a component names: parsed, and refused.
    changed = dict(WORDCOUNT_CODE, **{"wordcount/components.py": "class SentenceSpout:\n"
                                      "    pass\n\nclass SplitBolt:\n    pass\n"})
    with pytest.raises(N.InvalidTopologyException, match="defines no top-level 'CountBolt'"):
        env.submit("c", code=make_zip(changed))
    with pytest.raises(N.InvalidTopologyException, match="defines no top-level 'CountBolt'"):
        env.submit("c", code=make_zip(changed))     # its names from the cache: refused
    env.submit("c")                                 # the good code again: accepted
    assert env.names() == ["a", "b", "c"]
    assert checker.spawned == 1


# --- open uploads counted as they come and go -------------------------------------------

def test_open_uploads_are_counted_through_finish_discard_expiry_and_restart(
        env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(uploads_module, "MAX_OPEN_UPLOADS", 2)
    transfers = env.handler.transfers
    first = transfers.begin_upload()
    second = transfers.begin_upload()
    with pytest.raises(uploads_module.TransferRefused, match=r"2 uploads are already open "
                                                            r"\(limit 2\)"):
        transfers.begin_upload()
    transfers.upload_chunk(first, b"x")
    transfers.finish_upload(first)                  # finished: no longer open
    third = transfers.begin_upload()
    env.restart()                                   # counted again from the rows
    transfers = env.handler.transfers
    with pytest.raises(uploads_module.TransferRefused, match="2 uploads are already open"):
        transfers.begin_upload()
    env.clock.advance(env.config.file_copy_expiration_secs + 1)
    transfers.sweep()                               # both expire
    transfers.begin_upload()
    transfers.begin_upload()
    with pytest.raises(uploads_module.TransferRefused, match="2 uploads are already open"):
        transfers.begin_upload()
    assert {second, third}.isdisjoint(up.location for up in env.store.uploads())


def test_the_sweep_keeps_uploads_in_use_and_deletes_them_once_unused(env: Env) -> None:
    env.submit("a")
    env.submit("b", code=make_zip({**WORDCOUNT_CODE, "extra.py": "X = 1\n"}))
    spare = upload(env.handler, b"not a zip, never submitted")
    used = {rec.code_upload for rec in env.store.topologies()}
    env.clock.advance(env.config.upload_retention_secs)
    env.handler.transfers.sweep()
    assert {up.id for up in env.store.uploads()} == used      # only the spare went
    assert env.handler.transfers.completed(spare) is None
    env.handler.killTopologyWithOpts("a", N.KillOptions(wait_secs=0))
    env.tick(0)
    env.handler.transfers.sweep()
    assert [up.id for up in env.store.uploads()] == \
        [rec.code_upload for rec in env.store.topologies()]
