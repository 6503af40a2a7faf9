"""The examples run as documented, with exact results (in-process bounded runs), and
the README's way to try the word count: written out by ``nimbus-thrift example`` into
an empty folder and run there by ``nimbus-thrift run --for``."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from examples import weblogs, wordcount
from nimbus_thrift.runner.local import run_bounded
from support.spark import FAST_JVM, spark  # noqa: F401
from support.wordcounts import expected_counts

pytestmark = pytest.mark.spark

GOOD = '{host} - - [21/Nov/2026:10:00:{s:02d} +0000] "GET {path}?q={s} HTTP/1.1" {status} {size}'


def _rows(db: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return sorted(conn.execute(sql))


def test_wordcount_example_counts_exactly(spark, tmp_path: Path) -> None:  # noqa: F811
    db = tmp_path / "wc.sqlite"
    per_task = 2000
    run_bounded(wordcount.WordCount, spark, tmp_path / "run",
                conf={"wordcount.db": str(db), "wordcount.rate": 0,
                      "wordcount.total": per_task, "topology.max.spout.pending": 700},
                collect=False)
    assert dict(_rows(db, "SELECT word, count FROM counts")) == \
        dict(expected_counts(per_task))


def test_weblogs_example_aggregates_files_and_continues_from_its_checkpoint(
        spark, tmp_path: Path) -> None:  # noqa: F811
    inbox, db = tmp_path / "inbox", tmp_path / "report.sqlite"
    inbox.mkdir()
    expected: Counter[tuple[str, int]] = Counter()
    sizes: Counter[tuple[str, int]] = Counter()

    def land(name: str, lines: list[tuple[str, int, int]], bad: list[str]) -> None:
        text = [GOOD.format(host="10.0.0.1", s=i % 60, path=p, status=st, size=sz)
                for i, (p, st, sz) in enumerate(lines)] + bad
        (inbox / f".{name}").write_text("\n".join(text) + "\n")
        (inbox / f".{name}").rename(inbox / name)       # complete when it appears
        for p, st, sz in lines:
            expected[(p, st)] += 1
            sizes[(p, st)] += sz

    conf = {"weblogs.inbox": str(inbox), "weblogs.db": str(db)}
    land("0001.log", [("/", 200, 512), ("/a", 404, 0), ("/", 200, 100)] * 7, ["garbage"])
    land("0002.log", [("/b", 500, 10), ("/", 200, 1)] * 5, ["", "half a line ["])
    run_bounded(weblogs.WebLogs, spark, tmp_path / "run", conf=conf, collect=False)
    assert _rows(db, "SELECT path, status, hits, bytes FROM hits") == sorted(
        (p, st, n, sizes[(p, st)]) for (p, st), n in expected.items())
    assert _rows(db, "SELECT file, line, text FROM rejects") == [
        ("0001.log", 22, "garbage"), ("0002.log", 11, ""), ("0002.log", 12, "half a line [")]

    # A second run over the same work directory reads only the new file and adds to
    # the totals kept in the checkpoint's state.
    land("0003.log", [("/", 200, 1000)] * 3, [])
    run_bounded(weblogs.WebLogs, spark, tmp_path / "run", conf=conf, collect=False)
    assert _rows(db, "SELECT path, status, hits, bytes FROM hits") == sorted(
        (p, st, n, sizes[(p, st)]) for (p, st), n in expected.items())


def test_run_writes_the_packaged_word_count_and_runs_it_for_a_while(tmp_path: Path) -> None:
    # A process of its own: `run` makes (and stops) its own local session.
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "JAVA_TOOL_OPTIONS": FAST_JVM}
    cli = [sys.executable, "-m", "nimbus_thrift"]
    source = subprocess.run([*cli, "example", "wordcount"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=60, check=True).stdout
    (tmp_path / "wordcount.py").write_text(source)
    db = tmp_path / "counts.sqlite"
    done = subprocess.run([*cli, "run", "wordcount.py", "--for", "6", "--conf",
                           f"wordcount.db={db}", "--conf", "wordcount.rate=500"],
                          cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "run: WordCount runs for 6 s" in done.stderr
    # The sink's log line (at its first batch), and every component's figures.
    assert re.search(r"INFO wordcount \[pid \d+\]: sink: top words: the \d+", done.stderr)
    figures = dict(re.findall(r"^(\w+): emitted (\d+), processed \d+$", done.stdout, re.M))
    assert list(figures) == ["sentences", "split", "count", "sink"]
    assert int(figures["sentences"]) > 0
    counts = dict(_rows(db, "SELECT word, count FROM counts"))
    assert counts["the"] > 0 and "Traceback" not in done.stderr
