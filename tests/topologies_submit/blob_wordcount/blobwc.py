"""A word count that leaves out the stop words of a blob: the real-Spark test of Storm
2.x's API (tests/spark/test_storm2_e2e.py) maps the blob through
``topology.blobstore.map``, updates it while the topology runs and watches the counts
of each batch change, and raises the split bolt's logger to DEBUG to see its line.

sentences -> split (drops the stop words) -> sink (each batch's word counts into the
SQLite file ``blobwc.db``: table ``counts(batch, word, count)``). Small and paced, so
that it leaves the machine's two cores to the rest.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections import Counter
from typing import Any

from nimbus_thrift.topology import Bolt, Context, Grouping, Spout, Topology, load_blob

#: The local name of the stop-word blob in the work directory (the test maps its key
#: to this name).
STOPWORDS = "stopwords.txt"
#: What the test raises to DEBUG.
LOGGER = "blobwc.split"
#: The DEBUG line, once per batch and split task: the stop words that batch used.
MARKER = "blobwc split batch"
SENTENCES = ("the cow jumped over the moon", "an apple a day keeps the doctor away")

log = logging.getLogger(LOGGER)


def stop_words(data: bytes) -> frozenset[str]:
    """The blob's words, one or more a line; ``#`` starts a comment line."""
    return frozenset(word for line in data.decode().splitlines()
                     if not line.startswith("#") for word in line.split())


class Sentences(Spout):
    """``blobwc.rate`` sentences per second, for ever."""

    outputs = {"sentence": str}

    def initialize(self, conf: dict[str, Any], context: Context) -> None:
        self.rate = float(conf.get("blobwc.rate", 100))
        self.began = time.time()

    def available(self) -> int:
        return int((time.time() - self.began) * self.rate)

    def read(self, start: int, end: int) -> list[tuple[str]]:
        return [(SENTENCES[i % len(SENTENCES)],) for i in range(start, end)]


class Split(Bolt):
    """Words that are not stop words. The stop words are read once per batch, so a
    batch uses one version of the blob, and an update shows from the next batch on."""

    outputs = {"word": str}

    def initialize(self, conf: dict[str, Any], context: Context) -> None:
        self.stop: frozenset[str] | None = None

    def process(self, tup: Any) -> list[tuple[str]]:
        if self.stop is None:
            self.stop = load_blob(STOPWORDS, stop_words)
        return [(word,) for word in tup.sentence.split() if word not in self.stop]

    def end_batch(self, batch_id: int) -> None:
        if self.stop is not None:
            log.debug("%s %d stop words: %s", MARKER, batch_id, " ".join(sorted(self.stop)))
        self.stop = None


class Sink(Bolt):
    """Each batch's count of each word. Rows are keyed by batch and word, so a replayed
    batch writes the same rows again."""

    outputs: list[str] = []

    def initialize(self, conf: dict[str, Any], context: Context) -> None:
        self.path = conf["blobwc.db"]
        self.counts: Counter[str] = Counter()

    def process(self, tup: Any) -> None:
        self.counts[tup.word] += 1

    def end_batch(self, batch_id: int) -> None:
        if not self.counts:
            return
        db = sqlite3.connect(self.path, timeout=30)
        try:
            with db:
                db.execute("CREATE TABLE IF NOT EXISTS counts (batch INTEGER, word TEXT, "
                           "count INTEGER, PRIMARY KEY (batch, word))")
                db.executemany("INSERT OR REPLACE INTO counts VALUES (?, ?, ?)",
                               [(batch_id, w, c) for w, c in self.counts.items()])
        finally:
            db.close()
        self.counts.clear()


class BlobWordCount(Topology):
    config = {"topology.max.spout.pending": 2000}

    sentences = Sentences.spec(par=1)
    split = Split.spec(inputs={sentences: Grouping.shuffle}, par=1)
    sink = Sink.spec(inputs={split: Grouping.fields("word")}, par=1)
