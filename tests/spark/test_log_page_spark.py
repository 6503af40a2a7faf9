"""Run-time log levels, tuple sampling and page info on a real Spark application: a
Nimbus handler in this process (with the log and page calls) and the Spark launcher,
which runs a paced word count with spark-submit.

One test, in the order a user would go: the figures of a running topology are non-zero
and, once it is paused, the page-info figures are exactly getTopologyInfo's; a logger
raised to DEBUG with a reset timeout shows its lines in the topology's log and stops
after the timeout, without a restart; the root logger's level reaches Spark's own
log, and goes back when removed; sampling logs the component's tuples.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from nimbus_thrift.nimbus.config import load_config
from nimbus_thrift.nimbus.service.handler import NimbusHandler
from nimbus_thrift.nimbus.spark.launcher import SparkLauncher
from nimbus_thrift.nimbus.state.store import Store
from nimbus_thrift.topology.package import prepare
from support.nimbus import N, upload
from support.spark import FAST_JVM
from support.spark_daemon import wait_until

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
TOPOLOGY = ROOT / "tests" / "topologies_submit" / "logging_wordcount" / "logwc.py"
MARKER = "logwc split finished batch"
#: How long the DEBUG level lasts before Storm's reset timeout puts it back.
RESET_SECS = 20




@pytest.fixture
def handler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[NimbusHandler]:
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", FAST_JVM)
    config = load_config(env={}, flags={"data_dir": str(tmp_path / "data"),
                                        "launcher": "spark", "spark_master": "local[2]"})
    config.data_dir.mkdir(parents=True)
    store = Store(config.data_dir / "nimbus.sqlite3")
    launcher = SparkLauncher(config, cache_dir=False)
    h = NimbusHandler(N, config, store, launcher)
    h.recover()
    try:
        yield h
    finally:
        for summary in h.getClusterInfo().topologies:
            launcher.stop(summary.id, 10)       # control=stop: it exits by itself
        h.close()
        launcher.close()
        store.close()


#: A log line of Spark's (log4j's default layout) at INFO.
SPARK_INFO = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d INFO ", re.MULTILINE)


def lines(log: Path, text: str) -> int:
    try:
        return log.read_text(errors="replace").count(text)
    except FileNotFoundError:
        return 0


def spark_info_lines(log: Path) -> int:
    return len(SPARK_INFO.findall(log.read_text(errors="replace")))


def figures(info: Any, component: str) -> tuple[int, int]:
    """(emitted, executed) of ``component`` summed over getTopologyInfo's executors."""
    emitted = executed = 0
    for e in info.executors:
        if e.component_id == component and e.stats is not None:
            emitted += sum(e.stats.emitted[":all-time"].values())
            bolt = e.stats.specific.bolt
            if bolt is not None:
                executed += sum(bolt.executed[":all-time"].values())
    return emitted, executed


def test_page_info_log_levels_and_sampling_of_a_running_word_count(
        handler: NimbusHandler, tmp_path: Path) -> None:
    prepared = prepare(TOPOLOGY, tmp_path / "code.zip", conf={"logwc.rate": 200})
    location = upload(handler, prepared.code.path.read_bytes())
    handler.submitTopology(prepared.name, location, prepared.json_conf, prepared.struct)
    [tid] = [t.id for t in handler.getClusterInfo().topologies]
    work = Path(handler.topologies_dir) / tid
    log = work / "logs" / "stderr"

    # Running: page info has non-zero figures.
    def split_executed() -> int:
        page = handler.getTopologyPageInfo(tid, ":all-time", False)
        split = page.id_to_bolt_agg_stats["split"]
        return split.specific_stats.bolt.executed if split.specific_stats else 0
    wait_until("the split bolt's first tuples in page info", split_executed)
    assert lines(log, MARKER) == 0                  # DEBUG is off: logwc.split is WARNING

    # A logger raised to DEBUG for RESET_SECS: its lines appear without a restart ...
    # and ROOT at ERROR: Spark's own INFO lines (a progress report per batch) stop.
    update = N.LogLevelAction.UPDATE
    handler.setLogConfig(tid, N.LogConfig(named_logger_level={
        "logwc.split": N.LogLevel(action=update, target_log_level="DEBUG",
                                  reset_log_level_timeout_secs=RESET_SECS),
        "ROOT": N.LogLevel(action=update, target_log_level="ERROR")}))
    set_at = time.time()
    wait_until("DEBUG lines of logwc.split in the topology's log",
               lambda: lines(log, MARKER), timeout=RESET_SECS)
    # The JVM's level follows a moment after the Python workers' (the driver polls the
    # settings twice a second, and lines already written may still be in the pipe):
    # wait for Spark's INFO lines to stop, then check that they stay stopped.
    def info_lines_stopped() -> bool:
        before = spark_info_lines(log)
        time.sleep(1.5)
        return spark_info_lines(log) == before
    wait_until("Spark's INFO lines to stop at ROOT=ERROR", info_lines_stopped,
               timeout=RESET_SECS / 2)
    quiet = spark_info_lines(log)
    time.sleep(3)                   # a few batches, which Spark reports at INFO
    assert spark_info_lines(log) == quiet, "Spark's INFO lines went on at ROOT=ERROR"
    # ... and stop once the level is back to what it was.
    wait_until("the reset time", lambda: time.time() > set_at + RESET_SECS + 3,
               timeout=RESET_SECS + 10)
    after_reset = lines(log, MARKER)
    assert handler.getLogConfig(tid).named_logger_level["logwc.split"] \
        .reset_log_level_timeout_secs == RESET_SECS

    # Sampling: every tuple the split bolt emits is logged.
    handler.debug(prepared.name, "split", True, 100.0)
    wait_until("sampled tuples of split", lambda: lines(log, "tuple of split task 0"))
    handler.debug(prepared.name, "split", False, 100.0)
    assert lines(log, MARKER) == after_reset, "DEBUG lines went on after the reset"
    # ROOT's setting removed: Spark logs at the level it started with again.
    handler.setLogConfig(tid, N.LogConfig(named_logger_level={
        "ROOT": N.LogLevel(action=N.LogLevelAction.REMOVE)}))
    wait_until("Spark's INFO lines again", lambda: spark_info_lines(log) > quiet)
    assert set(handler.getLogConfig(tid).named_logger_level) == {"logwc.split"}

    # Paused: the figures stop moving and page info says exactly what getTopologyInfo
    # says, in every window (the run is younger than 10 minutes).
    handler.deactivate(prepared.name)
    settled: list[Any] = []

    def still() -> bool:
        info = handler.getTopologyInfo(tid)
        settled.append((figures(info, "sentences"), figures(info, "split")))
        return len(settled) > 4 and len(set(settled[-4:])) == 1
    wait_until("the figures to settle after the pause", still)
    info = handler.getTopologyInfo(tid)
    page = handler.getTopologyPageInfo(tid, ":all-time", False)
    spout = page.id_to_spout_agg_stats["sentences"].common_stats
    split = page.id_to_bolt_agg_stats["split"]
    assert spout.emitted == figures(info, "sentences")[0] > 0
    assert (split.common_stats.emitted, split.specific_stats.bolt.executed) == \
        figures(info, "split") and split.specific_stats.bolt.executed > 0
    executed = split.specific_stats.bolt.executed
    assert 6 * executed <= split.common_stats.emitted <= 8 * executed   # words/sentence
    # Measured task time: a per-tuple execute latency and a capacity in (0, 1].
    assert split.specific_stats.bolt.execute_latency_ms > 0
    assert 0 < split.specific_stats.bolt.capacity <= 1
    recent = handler.getComponentPageInfo(tid, "split", "600", False)
    assert recent.window_to_stats["600"] == recent.window_to_stats[":all-time"]
    assert sum(e.stats.specific_stats.bolt.executed for e in recent.exec_stats) == \
        split.specific_stats.bolt.executed
    [worker] = page.workers
    assert worker.topology_id == tid and worker.uptime_secs >= 0
    assert json.loads(page.topology_conf)["logwc.rate"] == 200
