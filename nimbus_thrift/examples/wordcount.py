"""Word count: sentences -> split into words -> count per word -> SQLite.

Write it out (it ships with the package), then run it for a while without a daemon:

    nimbus-thrift example wordcount > wordcount.py
    nimbus-thrift run wordcount.py --for 30

or submit it to a running nimbus and watch the counts its sink logs every 5 s:

    nimbus-thrift submit wordcount.py --wait
    nimbus-thrift logs wordcount --component sink --follow

The whole table is in SQLite (``sqlite3 /tmp/nimbus-wordcount.sqlite 'SELECT word,
count FROM counts ORDER BY count DESC LIMIT 10'``).

Settings (``--conf key=value``): ``wordcount.rate`` sentences per second per spout task
(default 5000; 0 = as fast as Spark goes), ``wordcount.total`` sentences per task for a
finite run (default unbounded; paced by the rate too), ``wordcount.db`` the SQLite file the counts land in.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from typing import Any, Iterator, Sequence

import numpy as np

from nimbus_thrift.topology import Bolt, Context, Grouping, KeyState, Spout, StatefulBolt, Topology

log = logging.getLogger(__name__)
# The topology's log shows WARNING and above unless told otherwise (`nimbus-thrift
# set-log-level`); the sink's lines of top words are INFO, so this logger says INFO.
log.setLevel(logging.INFO)

#: Seconds between two lines of top words in the log (the sink ends a batch far more
#: often). Kept per process: the sink's instances there share it.
REPORT_EVERY_S = 5.0
_reported_at = [0.0]

SENTENCES = (
    "the cow jumped over the moon",
    "an apple a day keeps the doctor away",
    "four score and seven years ago",
    "snow white and the seven dwarfs",
    "i am at two with nature",
)


def sentence_at(task: int, offset: int) -> str:
    """The sentence at ``offset`` of spout task ``task``: always the same one."""
    return SENTENCES[(offset * 7 + task) % len(SENTENCES)]


class SentenceSpout(Spout):
    """Endless (or ``wordcount.total``) sentences; offset i of task t is always the same
    sentence, so a replayed batch reads exactly what it read the first time."""

    outputs = {"sentence": str}

    def initialize(self, conf: dict[str, Any], context: Context) -> None:
        self.task = context.task
        self.rate = float(conf.get("wordcount.rate", 5000))
        self.total = conf.get("wordcount.total")
        self.began = time.time()

    def available(self) -> int | None:
        end = 2**62 if self.total is None else int(self.total)
        if self.rate <= 0:
            return end
        # Offsets grow with time at the configured rate; the runner caps each batch
        # (topology.max.spout.pending), so a long pause does not mean a huge batch.
        return min(end, int((time.time() - self.began) * self.rate))

    def read(self, start: int, end: int) -> Iterator[tuple[str]]:
        for offset in range(start, end):
            yield (sentence_at(self.task, offset),)


class SplitBolt(Bolt):
    outputs = {"word": str}

    def process(self, tup: Any) -> Iterator[tuple[str]]:
        for word in tup.sentence.split():
            yield (word,)


class CountBolt(StatefulBolt):
    """The running count of each word, kept in Spark's checkpointed state."""

    outputs = {"word": str, "count": int}

    def initial_state(self, key: tuple[Any, ...]) -> int:
        return 0

    def process_key(self, tuples: Sequence[Any], state: KeyState) -> dict[str, Any]:
        # All of a word's tuples of one micro-batch at once: one Python call per word
        # per batch instead of one per tuple, with the same output as counting them one
        # by one (a running count per input word, as Storm's word count emits). Returned
        # as columns, so no Python object per tuple: the word is the key (reading
        # tuples[0] would make every tuple), the counts one numpy range.
        first, n = state.value, len(tuples)
        state.value = first + n
        return {"word": [state.key[0]] * n, "count": np.arange(first + 1, first + n + 1)}


class SqliteSink(Bolt):
    """Writes the newest count of each word. Upserting a count is idempotent, so a
    replayed batch (after a crash) leaves the same table. Every REPORT_EVERY_S it logs
    the five most frequent words, naming itself (``sink: top words: the 1234, ...``)."""

    outputs = ()        # a sink: it emits nothing

    def initialize(self, conf: dict[str, Any], context: Context) -> None:
        self.path = conf.get("wordcount.db", "/tmp/nimbus-wordcount.sqlite")
        self.latest: dict[str, int] = {}

    def process(self, tup: Any) -> None:
        if tup.count > self.latest.get(tup.word, 0):
            self.latest[tup.word] = tup.count

    def end_batch(self, batch_id: int) -> None:
        if not self.latest:
            return
        db = sqlite3.connect(self.path, timeout=30)
        try:
            with db:
                db.execute("CREATE TABLE IF NOT EXISTS counts "
                           "(word TEXT PRIMARY KEY, count INTEGER, batch INTEGER)")
                db.executemany(
                    "INSERT INTO counts VALUES (?, ?, ?) ON CONFLICT(word) DO UPDATE SET "
                    "count = max(count, excluded.count), batch = excluded.batch",
                    [(w, c, batch_id) for w, c in self.latest.items()])
            now = time.monotonic()
            if now - _reported_at[0] >= REPORT_EVERY_S:
                _reported_at[0] = now
                top = db.execute("SELECT word, count FROM counts "
                                 "ORDER BY count DESC, word LIMIT 5").fetchall()
                log.info("%s: top words: %s", self.context.component,
                         ", ".join(f"{word} {count}" for word, count in top))
        finally:
            db.close()
        self.latest.clear()


class WordCount(Topology):
    config = {"topology.max.spout.pending": 50_000}

    sentences = SentenceSpout.spec(par=2)
    split = SplitBolt.spec(inputs={sentences: Grouping.shuffle}, par=2)
    count = CountBolt.spec(inputs={split: Grouping.fields("word")}, par=2)
    sink = SqliteSink.spec(inputs={count: Grouping.fields("word")}, par=1)
