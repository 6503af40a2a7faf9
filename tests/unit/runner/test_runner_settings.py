"""Run-time settings inside a topology's processes: named loggers' levels with Storm's
reset timeout (runner/loglevels.py, with a fake clock), the settings file followed
without a restart (runner/settings.py), and tuple sampling (runner/sampling.py)."""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from nimbus_thrift.runner.loglevels import LogLevels, jvm_level, python_level
from nimbus_thrift.runner.plan import build_plan
from nimbus_thrift.runner.rundir import LoggerSetting, RunDir, RunSettings, Sampling
from nimbus_thrift.runner.sampling import SAMPLE_LOGGER, TupleSampler
from nimbus_thrift.runner.local import spec_of
from nimbus_thrift.runner.settings import SettingsWatcher
from nimbus_thrift.runner.tasks import BoltTask, SpoutTask

from support.nimbus import FakeClock
from topologies.wordcount import WordCount

NAME = "nimbus_thrift_tests.levels"


@pytest.fixture
def loggers() -> Iterator[None]:
    """The test's logger and the root logger's level put back afterwards."""
    root = logging.getLogger()
    saved = root.level
    logging.getLogger(NAME).setLevel(logging.NOTSET)
    yield
    root.setLevel(saved)
    logging.getLogger(NAME).setLevel(logging.NOTSET)


def level(name: str) -> int:
    return (logging.getLogger() if name == "ROOT" else logging.getLogger(name)).level


def test_level_names_map_to_python_and_to_log4j() -> None:
    assert python_level("debug") == logging.DEBUG
    assert python_level("WARN") == python_level("WARNING") == logging.WARNING
    assert python_level("TRACE") < logging.DEBUG < python_level("INFO")
    assert python_level("OFF") > logging.CRITICAL and python_level("ALL") == 1
    assert jvm_level("warning") == "WARN" and jvm_level("Critical") == "FATAL"
    with pytest.raises(ValueError, match="'LOUD' is not a log level"):
        python_level("LOUD")


def test_a_level_is_set_and_goes_back_to_what_it_was_after_its_timeout(loggers: None) -> None:
    clock = FakeClock()
    logging.getLogger(NAME).setLevel(logging.ERROR)
    levels = LogLevels(clock)
    levels.apply({NAME: LoggerSetting("DEBUG", reset_at=clock.now + 30, timeout_secs=30)})
    assert level(NAME) == logging.DEBUG
    assert levels.next_reset() == clock.now + 30
    clock.advance(29)
    levels.tick()
    assert level(NAME) == logging.DEBUG
    clock.advance(1)
    levels.tick()
    assert level(NAME) == logging.ERROR
    # The same (expired) setting read again does not set it again.
    levels.apply({NAME: LoggerSetting("DEBUG", reset_at=clock.now - 1, timeout_secs=30)})
    assert level(NAME) == logging.ERROR


def test_a_reset_level_given_is_where_it_goes_after_the_timeout(loggers: None) -> None:
    clock = FakeClock()
    levels = LogLevels(clock)
    levels.apply({NAME: LoggerSetting("DEBUG", reset_at=clock.now + 5, reset_level="WARN")})
    clock.advance(5)
    levels.tick()
    assert level(NAME) == logging.WARNING
    # Removing the setting afterwards puts back the level from before any change.
    levels.apply({})
    assert level(NAME) == logging.NOTSET


def test_changes_in_a_row_go_back_to_the_level_before_the_first(loggers: None) -> None:
    levels = LogLevels(FakeClock())
    logging.getLogger(NAME).setLevel(logging.INFO)
    levels.apply({NAME: LoggerSetting("DEBUG")})
    levels.apply({NAME: LoggerSetting("ERROR")})
    assert level(NAME) == logging.ERROR
    levels.apply({})                                   # Storm's REMOVE
    assert level(NAME) == logging.INFO
    assert levels.original == {} and levels.active == {}


def test_a_setting_already_expired_when_first_seen_is_not_applied(loggers: None) -> None:
    # A relaunched application reading an old file.
    clock = FakeClock()
    logging.getLogger(NAME).setLevel(logging.WARNING)
    levels = LogLevels(clock)
    levels.apply({NAME: LoggerSetting("DEBUG", reset_at=clock.now - 60)})
    assert level(NAME) == logging.WARNING
    levels.apply({NAME: LoggerSetting("DEBUG", reset_at=clock.now - 60, reset_level="ERROR")})
    assert level(NAME) == logging.ERROR


def test_root_changes_reach_the_hook_and_come_back_as_none(loggers: None) -> None:
    seen: list[str | None] = []
    clock = FakeClock()
    levels = LogLevels(clock, on_root=seen.append)
    before = logging.getLogger().level
    levels.apply({"root": LoggerSetting("WARNING", reset_at=clock.now + 1)})
    assert level("ROOT") == logging.WARNING
    clock.advance(1)
    levels.tick()
    assert level("ROOT") == before and seen == ["WARN", None]


def test_settings_round_trip_through_their_file(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path)
    assert run_dir.read_settings() == RunSettings()
    settings = RunSettings({"ROOT": LoggerSetting("DEBUG", 1.5e9, "INFO", 30)},
                           {"": Sampling(True, 10.0), "split": Sampling(False, 50.0)})
    run_dir.write_settings(settings)
    assert run_dir.read_settings() == settings
    assert settings.sample_percent("split") == 0.0        # its own setting: off
    assert settings.sample_percent("count") == 10.0       # the topology's
    assert RunSettings().sample_percent("count") == 0.0


def test_the_watcher_applies_a_changed_file_without_a_restart(tmp_path: Path,
                                                              loggers: None) -> None:
    clock = FakeClock()
    run_dir = RunDir(tmp_path)
    watcher = SettingsWatcher(run_dir, LogLevels(clock))
    assert watcher.refresh() == RunSettings()
    run_dir.write_settings(RunSettings({NAME: LoggerSetting("DEBUG")}))
    assert watcher.refresh().loggers[NAME].level == "DEBUG"
    assert level(NAME) == logging.DEBUG
    # A bad file keeps what was applied.
    run_dir.settings.write_text("{not json")
    os.utime(run_dir.settings, ns=(1, 1))
    assert watcher.refresh().loggers[NAME].level == "DEBUG"
    assert level(NAME) == logging.DEBUG
    run_dir.settings.unlink()
    assert watcher.refresh() == RunSettings()
    assert level(NAME) == logging.NOTSET


def test_the_watcher_resets_levels_whose_time_is_up(tmp_path: Path, loggers: None) -> None:
    clock = FakeClock()
    run_dir = RunDir(tmp_path)
    run_dir.write_settings(RunSettings({NAME: LoggerSetting("DEBUG", clock.now + 10)}))
    watcher = SettingsWatcher(run_dir, LogLevels(clock))
    watcher.refresh()
    assert level(NAME) == logging.DEBUG
    clock.advance(10)
    watcher.refresh()                   # the file did not change; the time did
    assert level(NAME) == logging.NOTSET


def test_the_sampler_logs_the_chosen_share_of_tuples(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=SAMPLE_LOGGER)
    every = TupleSampler("wc", "split", 1, 7, 100.0)
    every.rows("default", [("a",), ("b",)])
    every.columns("default", 2, [pa.array(["c", "d"])])
    lines = [r.getMessage() for r in caplog.records if r.name == SAMPLE_LOGGER]
    assert lines == [f"tuple of split task 1 stream default batch 7 in wc: ('{w}',)"
                     for w in "abcd"]
    some = TupleSampler("wc", "split", 0, None, 10.0, rng=random.Random(1))
    some.rows("default", [(i,) for i in range(10_000)])
    assert 800 < some.logged < 1200
    none = TupleSampler("wc", "split", 0, None, 0.0)
    none.rows("default", [(1,)] * 100)
    assert none.logged == 0


def test_tasks_sample_what_they_emit_when_the_settings_say_so(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=SAMPLE_LOGGER)
    plan = build_plan(spec_of(WordCount, {"sentences": 3}))
    split = plan.nodes["split"]
    on = RunSettings(sampling={"split": Sampling(True, 100.0)})
    task = BoltTask("WordCount", split, 0, 3, on)
    column = split.slots[0].columns[0].name        # the runner's name of "sentence"
    task.feed(pa.RecordBatch.from_pydict({column: ["a b", "c"], "_task": [0, 0]}))
    words = [r.getMessage() for r in caplog.records if r.name == SAMPLE_LOGGER]
    assert [w.rsplit(": ", 1)[1] for w in words] == ["('a',)", "('b',)", "('c',)"]
    # Only the component named (and the topology-wide key for the others).
    caplog.clear()
    spout = SpoutTask("WordCount", plan.nodes["sentences"], 0, 3, on)
    list(spout.read(0, 2))
    assert [r for r in caplog.records if r.name == SAMPLE_LOGGER] == []
    everyone = RunSettings(sampling={"": Sampling(True, 100.0)})
    list(SpoutTask("WordCount", plan.nodes["sentences"], 0, 3, everyone).read(0, 2))
    assert len([r for r in caplog.records if r.name == SAMPLE_LOGGER]) == 2
