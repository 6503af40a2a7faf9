"""A flat project: the topology and its components in one file (module ``wordcount``)."""

from nimbus_thrift.topology import Bolt, Grouping, Spout, Topology

SENTENCES = ["the cow jumped over the moon", "an apple a day keeps the doctor away"]


class SentenceSpout(Spout):
    outputs = {"sentence": str}

    def available(self):
        return len(SENTENCES)

    def read(self, start, end):
        for offset in range(start, end):
            yield [SENTENCES[offset]]


class SplitBolt(Bolt):
    outputs = {"word": str}

    def process(self, tup):
        for word in tup.sentence.split():
            yield [word]


class CountBolt(Bolt):
    outputs = {"word": str, "count": int}

    def process(self, tup):
        yield [tup.word, 1]


class WordCount(Topology):
    config = {"topology.workers": 1, "topology.max.spout.pending": 100}

    sentences = SentenceSpout.spec(par=2)
    split = SplitBolt.spec(inputs={sentences: Grouping.shuffle}, par=2)
    count = CountBolt.spec(inputs={split: Grouping.fields("word")}, par=2)
