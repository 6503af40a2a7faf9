"""No cheap request holds shared state for long (issue 13, rows 1, 2, 8, 10, 13), with
fakes: a launcher that blocks, a code check that blocks, rows written by hand."""

from __future__ import annotations

import json
import sqlite3
import threading
import zipfile
from pathlib import Path
from typing import Any, Callable

import pytest
from thriftpy2.protocol import TBinaryProtocolFactory
from thriftpy2.utils import serialize

from support.nimbus import (BlockingLauncher, FakeClock, FakeLauncher, N, common,
                            make_zip, shell, shuffle, upload, wordcount)
from nimbus_thrift.nimbus.service import topologies as topologies_module
from nimbus_thrift.nimbus.service import listing as listing_module
from nimbus_thrift.nimbus.config import load_config
from nimbus_thrift.nimbus.service.handler import NimbusHandler
from nimbus_thrift.nimbus.state.store import Store, TopologyRecord
from nimbus_thrift.topology import code as code_module
from nimbus_thrift.topology.code import CodeArchive, CodeError

#: A call that must not wait behind the blocked one gets this long (generous: a loaded
#: 2-core machine); the blocked one waits 30 s, so a hang is unmistakable.
PROMPT = 5.0


class Env:
    def __init__(self, data_dir: Path, launcher: FakeLauncher | None = None,
                 **config: Any):
        data_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir = data_dir
        self.clock = FakeClock()
        self.launcher = launcher or FakeLauncher()
        self.config = load_config(env={}, flags={"data_dir": str(data_dir),
                                                 "launcher": "none", **config})
        self.store = Store(data_dir / "nimbus.sqlite3")
        self.handler = NimbusHandler(N, self.config, self.store, self.launcher,
                                     clock=self.clock)
        self.handler.recover()
        assert self.handler.background.wait_idle(10)

    def submit(self, name: str, topology: Any = None, code: bytes | None = None) -> str:
        location = upload(self.handler, code if code is not None else make_zip())
        self.handler.submitTopology(name, location, "{}",
                                    topology if topology is not None else wordcount())
        return next(t.id for t in self.handler.getClusterInfo().topologies
                    if t.name == name)

    def names(self) -> list[str]:
        return [t.name for t in self.handler.getClusterInfo().topologies]

    def close(self) -> None:
        self.handler.close()
        self.store.close()


def promptly(func: Callable[[], Any], limit: float = PROMPT) -> Any:
    """Run ``func`` on a thread; fail (instead of hanging) if it takes over ``limit``."""
    result: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            result.append(func())
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(limit)
    assert not thread.is_alive(), f"{func} took over {limit} s: it waited behind a lock"
    if errors:
        raise errors[0]
    return result[0] if result else None


# --- row 2: a slow launcher holds nothing ----------------------------------------------

def test_blocked_stop_blocks_neither_reads_nor_other_topologies(tmp_path: Path) -> None:
    launcher = BlockingLauncher("stop")
    env = Env(tmp_path / "data", launcher)
    try:
        a = env.submit("a")
        env.submit("b")
        env.handler.killTopologyWithOpts("a", N.KillOptions(wait_secs=0))
        promptly(env.handler.timers.run_due)        # the timer thread is not held either
        assert launcher.entered["stop"].wait(PROMPT)
        # While a's stop is blocked: reads, and b's commands, answer at once.
        info = promptly(env.handler.getClusterInfo)
        assert {t.name: t.status for t in info.topologies} == {"a": "KILLED",
                                                               "b": "ACTIVE"}
        promptly(env.handler.getNimbusConf)
        promptly(lambda: env.handler.getTopologyInfo(a))
        promptly(lambda: env.handler.isTopologyNameAllowed("c"))
        promptly(lambda: env.handler.deactivate("b"))
        assert env.store.topology_named("b").status == "INACTIVE"    # type: ignore[union-attr]
        assert env.names() == ["a", "b"]            # not removed before its stop returns
        launcher.release()
        assert env.handler.background.wait_idle(PROMPT)
        assert env.names() == ["b"]
        assert not (env.data_dir / "topologies" / a).exists()
    finally:
        launcher.release()
        env.close()


def test_kill_answers_before_a_blocked_launcher_finishes(tmp_path: Path) -> None:
    launcher = BlockingLauncher("pause")
    env = Env(tmp_path / "data", launcher, launcher_reply_wait_secs=0.2)
    try:
        tid = env.submit("a")
        promptly(lambda: env.handler.killTopologyWithOpts("a", N.KillOptions(wait_secs=60)))
        assert env.handler.background.busy(tid)     # the pause is still running
        assert promptly(env.handler.getClusterInfo).topologies[0].status == "KILLED"
        launcher.release()
        assert env.handler.background.wait_idle(PROMPT)
        assert launcher.methods(tid) == ["launch", "pause"]
    finally:
        launcher.release()
        env.close()


def test_launcher_calls_of_one_topology_keep_their_order(tmp_path: Path) -> None:
    launcher = BlockingLauncher("pause")
    env = Env(tmp_path / "data", launcher, launcher_reply_wait_secs=0.1)
    try:
        tid = env.submit("a")
        env.handler.deactivate("a")                 # its pause blocks
        env.handler.activate("a")                   # queued behind it
        env.handler.killTopologyWithOpts("a", N.KillOptions(wait_secs=0))
        env.handler.timers.run_due()                # the stop is queued last
        launcher.release()
        assert env.handler.background.wait_idle(PROMPT)
        assert launcher.methods(tid) == ["launch", "pause", "resume", "pause", "stop"]
        assert env.names() == []
    finally:
        launcher.release()
        env.close()


def test_a_kill_right_after_the_commit_queues_behind_the_launch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The narrow window between a submit's commit and its queued launch: a kill that
    comes in it (wait_secs 0, removal due at once) must reach the launcher after the
    launch. Before, its pause and stop could be queued first, and the launch then
    started a job for a topology already removed."""
    env = Env(tmp_path / "data", launcher_reply_wait_secs=0.1)
    killer: list[threading.Thread] = []
    real_spec = env.handler.launching.spec

    def spec_with_a_kill_in_between(rec: Any, plan: Any) -> Any:
        # Called after the row is committed, before the launch is queued.
        def kill() -> None:
            env.handler.killTopologyWithOpts(rec.name, N.KillOptions(wait_secs=0))
            env.handler.timers.run_due()
        thread = threading.Thread(target=kill)
        thread.start()
        killer.append(thread)
        thread.join(0.5)            # with the bug, the kill is done by now
        return real_spec(rec, plan)

    monkeypatch.setattr(env.handler.launching, "spec", spec_with_a_kill_in_between)
    try:
        location = upload(env.handler, make_zip())
        env.handler.submitTopology("a", location, "{}", wordcount())
        killer[0].join(PROMPT)
        assert not killer[0].is_alive()
        assert env.handler.background.wait_idle(PROMPT)
        ids = {t for _, t in env.launcher.calls}
        assert len(ids) == 1
        assert env.launcher.methods(ids.pop()) == ["launch", "pause", "stop"]
        assert env.names() == []
    finally:
        env.close()


def test_blocked_rebalance_does_not_block_other_topologies(tmp_path: Path) -> None:
    launcher = BlockingLauncher("rebalance")
    env = Env(tmp_path / "data", launcher)
    try:
        env.submit("a")
        env.submit("b")
        env.handler.rebalance("a", N.RebalanceOptions(wait_secs=0, num_workers=3))
        promptly(env.handler.timers.run_due)
        assert launcher.entered["rebalance"].wait(PROMPT)
        summary = {t.name: t for t in promptly(env.handler.getClusterInfo).topologies}
        assert (summary["a"].status, summary["a"].num_workers) == ("ACTIVE", 3)
        promptly(lambda: env.handler.killTopologyWithOpts("b", N.KillOptions(wait_secs=0)))
    finally:
        launcher.release()
        env.close()


# --- row 1: a slow code check holds nothing --------------------------------------------

def test_slow_code_check_holds_no_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                       ) -> None:
    env = Env(tmp_path / "data")
    gate, entered = threading.Event(), threading.Event()
    real = topologies_module.check_topology
    try:
        env.submit("b")

        def slow(topology: Any, conf: Any, code: Any) -> Any:
            if code is not None and topology.spouts.get("slow"):
                entered.set()
                gate.wait(30)
            return real(topology, conf, code)
        monkeypatch.setattr(topologies_module, "check_topology", slow)
        topo = wordcount()
        topo.spouts["slow"] = topo.spouts["sentences"]
        location = upload(env.handler, make_zip())
        submitter = threading.Thread(target=env.handler.submitTopology,
                                     args=("slow", location, "{}", topo), daemon=True)
        submitter.start()
        assert entered.wait(PROMPT)
        promptly(lambda: env.handler.deactivate("b"))
        promptly(env.handler.getClusterInfo)
        promptly(env.handler.getNimbusConf)
        promptly(lambda: env.submit("c"))           # another submit, its own check
        assert env.handler.isTopologyNameAllowed("slow")     # not taken until committed
        gate.set()
        submitter.join(PROMPT)
        assert sorted(env.names()) == ["b", "c", "slow"]
    finally:
        gate.set()
        env.close()


# --- row 1: code checks bounded ---------------------------------------------------------

def _spouts(n: int, script: str) -> Any:
    return N.StormTopology(
        spouts={f"s{i}": N.SpoutSpec(spout_object=shell(script),
                                     common=common(streams={"default": ["x"]}))
                for i in range(n)},
        bolts={}, state_spouts={})


def test_each_module_is_parsed_once_per_submit(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from nimbus_thrift.nimbus.service.codecheck import CodeChecker
    parses: list[str] = []
    real = CodeChecker.parse_uncached       # the daemon parses in a child process

    def counting(self: CodeChecker, member: str, source: bytes) -> frozenset[str]:
        parses.append(member)
        return real(self, member, source)
    monkeypatch.setattr(CodeChecker, "parse_uncached", counting)
    env = Env(tmp_path / "data")
    try:
        big = "class Spout:\n    pass\n" + "".join(f"x{i} = {i}\n" for i in range(15_000))
        env.submit("four", _spouts(4, "m.Spout"), make_zip({"m.py": big}))
        assert parses == ["m.py"]
    finally:
        env.close()


def test_archive_caches_names_and_counts_parsed_bytes(tmp_path: Path) -> None:
    path = tmp_path / "c.zip"
    path.write_bytes(make_zip({"m.py": "class A: pass\nclass B: pass\n", "n.py": "C = 1\n"}))
    with CodeArchive.open(path) as code:
        for script in ("m.A", "m.B", "m.A", "n.C"):
            code.resolve(script)
        assert code.parses == 2
        assert code.parsed_bytes == len("class A: pass\nclass B: pass\n") + len("C = 1\n")


def test_parse_budget_per_submit_refuses_with_the_limit(tmp_path: Path) -> None:
    env = Env(tmp_path / "data", max_code_parse_total_bytes=100)
    try:
        code = make_zip({"m.py": "class A: pass\n" + "#" * 60 + "\n",
                         "n.py": "class B: pass\n" + "#" * 60 + "\n"})
        topo = _spouts(1, "m.A")
        topo.spouts["t"] = N.SpoutSpec(spout_object=shell("n.B"),
                                       common=common(streams={"default": ["x"]}))
        with pytest.raises(N.InvalidTopologyException) as info:
            env.submit("wc", topo, code)
        assert "the limit is 100 (max_code_parse_total_bytes)" in info.value.msg
        assert env.names() == []
    finally:
        env.close()


def test_module_over_the_parse_cap_is_not_parsed(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(code_module.ast, "parse", lambda *a, **k: pytest.fail("parsed"))
    env = Env(tmp_path / "data", max_code_parse_bytes=10)
    try:
        env.submit("wc", _spouts(2, "m.Anything"), make_zip({"m.py": "not python " * 10}))
        assert env.names() == ["wc"]
    finally:
        env.close()


def test_components_limit(tmp_path: Path) -> None:
    env = Env(tmp_path / "data", max_components=3)
    try:
        env.submit("three")                         # wordcount has 3 components
        topo = wordcount()
        topo.bolts["more"] = N.Bolt(bolt_object=shell("wordcount.components.CountBolt"),
                                    common=common({("split", "default"): shuffle()}))
        with pytest.raises(N.InvalidTopologyException,
                           match=r"has 4 components; the limit is 3 \(max_components\)"):
            env.submit("four", topo)
    finally:
        env.close()


def test_member_count_is_read_before_zipfile_lists_members(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "many.zip"
    with zipfile.ZipFile(path, "w") as zf:
        for i in range(50):
            zf.writestr(f"{i}.py", "")
    monkeypatch.setattr(code_module, "MAX_MEMBERS", 10)
    monkeypatch.setattr(code_module.zipfile, "ZipFile",
                        lambda *a, **k: pytest.fail("zipfile parsed the directory"))
    with pytest.raises(CodeError, match="has 50 members; the limit is 10"):
        CodeArchive.open(path)


def test_directory_with_more_entries_than_declared_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "lying.zip"
    with zipfile.ZipFile(path, "w") as zf:
        for i in range(20):
            zf.writestr(f"{i}.py", "")
    data = bytearray(path.read_bytes())
    eocd = data.rfind(b"PK\x05\x06")
    data[eocd + 8:eocd + 12] = (1).to_bytes(2, "little") * 2     # declares one entry
    path.write_bytes(bytes(data))
    with pytest.raises(CodeError, match="more than 10 members; the limit is 10"):
        CodeArchive.open(path, max_members=10)
    assert CodeArchive.open(path, max_members=100).members == {f"{i}.py" for i in range(20)}


# --- rows 8 and 13: listing -------------------------------------------------------------

def _record(tid: str, name: str, **changes: Any) -> TopologyRecord:
    fields = dict(id=tid, name=name, status="ACTIVE", prev_status=None, owner="",
                  submitted_at=1_700_000_000.0, num_workers=1,
                  executors={"s": 1}, tasks={"s": 1}, conf={"big": "x" * 1000},
                  topology=serialize(wordcount(), TBinaryProtocolFactory()),
                  code_upload="none", code_sha256="", code_bytes=0)
    fields.update(changes)
    return TopologyRecord(**fields)


def test_a_bad_row_is_listed_on_its_own(tmp_path: Path) -> None:
    env = Env(tmp_path / "data")
    try:
        good = env.submit("good")
        for tid in ("huge-1-1", "broken-2-2"):
            (env.data_dir / "topologies" / tid).mkdir()
        env.store.insert_topology(_record("huge-1-1", "huge", num_workers=2**40,
                                          executors={"s": 2**40}))
        env.store.insert_topology(_record("broken-2-2", "broken"))
        raw = sqlite3.connect(env.data_dir / "nimbus.sqlite3")
        raw.execute("UPDATE topologies SET tasks='not json', submitted_at='x' "
                    "WHERE id='broken-2-2'")
        raw.commit()
        raw.close()
        info = env.handler.getClusterInfo()
        serialize(info, TBinaryProtocolFactory())   # what the wire encodes: no error
        listed = {t.name: t for t in info.topologies}
        assert set(listed) == {"good", "huge", "broken"}
        assert listed["good"].id == good and listed["good"].num_executors == 6
        assert not listed["good"].sched_status.startswith("invalid")
        huge = listed["huge"]
        assert (huge.num_workers, huge.num_executors) == (2**31 - 1, 2**31 - 1)
        assert huge.sched_status.startswith("invalid: stored num_workers 1099511627776 "
                                            "does not fit the IDL's i32")
        assert "stored tasks are not readable" in listed["broken"].sched_status
        assert listed["broken"].num_tasks == 0 and listed["broken"].num_executors == 1
    finally:
        env.close()


def test_listing_reads_no_conf_and_caches_counts(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    env = Env(tmp_path / "data")
    try:
        for i in range(5):
            env.submit(f"t{i}")
        env.handler.getClusterInfo()
        computed: list[Any] = []
        real = listing_module._sum_counts
        monkeypatch.setattr(listing_module, "_sum_counts",
                            lambda *a: computed.append(a) or real(*a))
        loads: list[int] = []
        real_loads = json.loads
        monkeypatch.setattr("nimbus_thrift.nimbus.state.store.json.loads",
                            lambda s, *a, **k: loads.append(len(s)) or real_loads(s, *a, **k))
        for _ in range(3):
            assert len(env.handler.getClusterInfo().topologies) == 5
        assert computed == [] and loads == []       # nothing re-derived, no conf parsed
        env.handler.rebalance("t0", N.RebalanceOptions(wait_secs=0, num_workers=2))
        env.handler.timers.run_due()
        assert env.handler.background.wait_idle(PROMPT)
        assert {t.name: t.num_workers for t in env.handler.getClusterInfo().topologies
                }["t0"] == 2                        # the changed row is recomputed
    finally:
        env.close()


def test_record_statics_cached_per_id_and_dropped_on_removal(tmp_path: Path) -> None:
    env = Env(tmp_path / "data")
    try:
        tid = env.submit("wc")
        env.handler.getTopologyConf(tid)
        assert tid in env.store.cached_ids()
        env.handler.killTopologyWithOpts("wc", N.KillOptions(wait_secs=0))
        env.handler.timers.run_due()
        assert env.handler.background.wait_idle(PROMPT)
        assert tid not in env.store.cached_ids()
        counts = env.handler.infos._counts
        assert len(counts) == 0 or tid not in counts._cache
    finally:
        env.close()


def test_reads_do_not_wait_for_the_writer(tmp_path: Path) -> None:
    store = Store(tmp_path / "nimbus.sqlite3")
    try:
        store.insert_topology(_record("a-1-1", "a"))
        with store.transaction():                   # a writer in the middle of a change
            store.set_status("a-1-1", "INACTIVE", None)
            # Another thread reads the last commit at once, without the writer's lock.
            rec = promptly(lambda: store.topology("a-1-1"))
            assert rec.status == "ACTIVE"
            assert store.topology("a-1-1").status == "INACTIVE"  # type: ignore[union-attr]
        assert promptly(lambda: store.topology("a-1-1")).status == "INACTIVE"
    finally:
        store.close()


# --- row 10: work directories -----------------------------------------------------------

def test_work_dir_failure_refuses_the_submit_and_leaves_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = Env(tmp_path / "data")
    try:
        monkeypatch.setattr(env.handler.launching, "work_dir",
                            lambda tid: env.data_dir / "absent" / tid)
        with pytest.raises(N.InvalidTopologyException) as info:
            env.submit("wc")
        assert "work directory cannot be created" in info.value.msg
        assert str(env.data_dir) not in info.value.msg and "/" not in info.value.msg
        assert env.names() == [] and env.handler.isTopologyNameAllowed("wc")
        assert env.launcher.calls == []
        monkeypatch.undo()
        env.submit("wc")                            # the name was never taken
    finally:
        env.close()


def test_start_sweeps_orphan_dirs_and_rows_without_dirs(tmp_path: Path) -> None:
    env = Env(tmp_path / "data")
    kept = env.submit("kept")
    lost = env.submit("lost")
    env.close()
    topologies = env.data_dir / "topologies"
    (topologies / lost).rmdir() if not any((topologies / lost).iterdir()) else None
    (topologies / "orphan-9-9").mkdir()
    (topologies / "orphan-9-9" / "file").write_text("x")
    env2 = Env(env.data_dir)
    try:
        assert not (topologies / "orphan-9-9").exists()
        assert (topologies / kept).is_dir()
        env2.handler.timers.run_due()
        assert env2.handler.background.wait_idle(PROMPT)
        assert env2.names() == ["kept"]
        assert env2.launcher.methods(lost) == ["stop"]          # told to stop, not launched
        assert env2.launcher.methods(kept) == ["launch"]
    finally:
        env2.close()
