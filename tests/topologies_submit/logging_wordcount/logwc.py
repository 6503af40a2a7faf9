"""A word count whose split bolt logs at DEBUG after each batch: the real-Spark test of
run-time log levels (tests/spark/test_log_page_spark.py) watches for that line in the
topology's log. Small and paced, so that it leaves the machine's two cores to the rest."""

from __future__ import annotations

import logging
import time
from typing import Any, Sequence

from nimbus_thrift.topology import Bolt, Grouping, KeyState, Spout, StatefulBolt, Topology

#: What the test raises to DEBUG.
LOGGER = "logwc.split"
#: The DEBUG line, once per batch and task that split sentences.
MARKER = "logwc split finished batch"
SENTENCES = ("the cow jumped over the moon", "an apple a day keeps the doctor away")

log = logging.getLogger(LOGGER)


class Sentences(Spout):
    """``logwc.rate`` sentences per second, for ever."""

    outputs = {"sentence": str}

    def initialize(self, conf: dict[str, Any], context: Any) -> None:
        self.rate = float(conf.get("logwc.rate", 200))
        self.began = time.time()

    def available(self) -> int:
        return int((time.time() - self.began) * self.rate)

    def read(self, start: int, end: int) -> list[tuple[str]]:
        return [(SENTENCES[i % len(SENTENCES)],) for i in range(start, end)]


class Split(Bolt):
    outputs = {"word": str}

    def process(self, tup: Any) -> list[tuple[str]]:
        return [(word,) for word in tup.sentence.split()]

    def end_batch(self, batch_id: int) -> None:
        log.debug("%s %d", MARKER, batch_id)


class Count(StatefulBolt):
    outputs = {"word": str, "count": int}

    def initial_state(self, key: tuple[Any, ...]) -> int:
        return 0

    def process_key(self, tuples: Sequence[Any], state: KeyState) -> list[tuple[str, int]]:
        state.value += len(tuples)
        return [(state.key[0], state.value)]


class LogWordCount(Topology):
    config = {"topology.max.spout.pending": 2000}

    sentences = Sentences.spec(par=1)
    split = Split.spec(inputs={sentences: Grouping.shuffle}, par=1)
    count = Count.spec(inputs={split: Grouping.fields("word")}, par=1)
