"""Word count: sentences (par 2) -> shuffle -> split (par 2) -> fields(word) -> count.

The spout's task ``t`` of ``n`` reads sentence ``i * n + t`` at its offset ``i``, so the
whole topology reads sentences ``0 .. total - 1`` exactly once whatever the parallelism
and batch size; :func:`expected_counts` is the answer.
"""

from __future__ import annotations

from collections import Counter

from nimbus_thrift.topology import Bolt, Grouping, Spout, StatefulBolt, Topology

SENTENCES = ["the cow jumped over the moon",
             "an apple a day keeps the doctor away",
             "four score and seven years ago",
             "snow white and the seven dwarfs",
             "i am at two with nature"]


def sentence(index: int) -> str:
    return SENTENCES[index % len(SENTENCES)]


def task_share(total: int, task: int, tasks: int) -> int:
    """How many of ``total`` sentences task ``task`` of ``tasks`` reads."""
    return total // tasks + (1 if task < total % tasks else 0)


def expected_counts(total: int) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for i in range(total):
        counts.update(sentence(i).split())
    return dict(counts)


class SentenceSpout(Spout):
    """``sentences`` (topology conf, default 1000) sentences, split over the tasks."""

    outputs = {"sentence": str}

    def initialize(self, conf, context):
        self.total = int(conf.get("sentences", 1000))

    def available(self):
        return task_share(self.total, self.context.task, self.context.parallelism)

    def read(self, start, end):
        n, t = self.context.parallelism, self.context.task
        return [(sentence(i * n + t),) for i in range(start, end)]


class SplitBolt(Bolt):
    outputs = {"word": str}

    def process(self, tup):
        return [(word,) for word in tup.sentence.split()]


class CountBolt(StatefulBolt):
    """Emits ``(word, count so far)`` for every word."""

    outputs = {"word": str, "count": int}

    def initial_state(self, key):
        return 0

    def process(self, tup, state):
        state.value += 1
        return [(tup.word, state.value)]


class WordCount(Topology):
    sentences = SentenceSpout.spec(par=2)
    split = SplitBolt.spec(inputs={sentences: Grouping.shuffle}, par=2)
    count = CountBolt.spec(inputs={split: Grouping.fields("word")}, par=2)


class FastCountBolt(StatefulBolt):
    """Counts a key's words of a batch at once and emits ``(word, count)`` once."""

    outputs = {"word": str, "count": int}

    def initial_state(self, key):
        return 0

    def process_key(self, tuples, state):
        state.value += len(tuples)
        return [(state.key[0], state.value)]


class FileSinkBolt(Bolt):
    """Writes each batch's tuples to ``<conf out_dir>/<batch>-<task>.json`` in
    ``end_batch``: a replayed batch rewrites the same file (idempotent per batch)."""

    outputs = []

    def initialize(self, conf, context):
        self.out_dir = conf["out_dir"]
        self.rows = []

    def process(self, tup):
        self.rows.append(list(tup))

    def end_batch(self, batch_id):
        import json
        import os
        path = os.path.join(self.out_dir, f"{batch_id}-{self.context.task}.json")
        with open(path + ".tmp", "w") as out:
            json.dump(self.rows, out)
        os.replace(path + ".tmp", path)


class WordCountToFiles(Topology):
    """Word count whose counts (one per word and batch) go to files: a tail bolt."""

    sentences = SentenceSpout.spec(par=2)
    split = SplitBolt.spec(inputs={sentences: Grouping.shuffle}, par=2)
    count = FastCountBolt.spec(inputs={split: Grouping.fields("word")}, par=2)
    sink = FileSinkBolt.spec(inputs={count: Grouping.shuffle}, par=2)


def final_counts(rows):
    """The last count of each word among ``(word, count)`` rows."""
    counts: dict[str, int] = {}
    for word, count in rows:
        counts[word] = max(counts.get(word, 0), count)
    return counts
