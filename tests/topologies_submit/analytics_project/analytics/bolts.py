from nimbus_thrift.topology import Bolt, StatefulBolt

from tools.text import words


class TokenBolt(Bolt):
    outputs = {"word": str}

    def process(self, tup):
        for word in words(tup.line):
            yield [word]


class TallyBolt(StatefulBolt):
    outputs = {"word": str, "count": int}

    def process(self, tup, state):
        state.value = (state.value or 0) + 1
        yield [tup.word, state.value]
