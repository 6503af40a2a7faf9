"""Numbers through every grouping, named streams, object fields and both kinds of
stateful bolt; and an endless spout for the driver's stop and pause tests."""

from __future__ import annotations

import time

from nimbus_thrift.topology import Bolt, Grouping, Spout, StatefulBolt, Stream, Topology

from .wordcount import task_share


class NumberSpout(Spout):
    """The numbers ``0 .. numbers - 1`` (topology conf), task ``t`` of ``n`` reading
    ``i * n + t`` at offset ``i``; each with ``key = number % 7``."""

    outputs = {"n": int, "key": int}

    def initialize(self, conf, context):
        self.total = int(conf.get("numbers", 100))

    def available(self):
        return task_share(self.total, self.context.task, self.context.parallelism)

    def read(self, start, end):
        n, t = self.context.parallelism, self.context.task
        return [(i * n + t, (i * n + t) % 7) for i in range(start, end)]


class WhereBolt(Bolt):
    """Emits ``(n, key, task)``: which task saw each number."""

    outputs = {"n": int, "key": int, "task": int}

    def process(self, tup):
        yield (tup.n, tup.key, self.context.task)


class MixedBolt(Bolt):
    """Two inputs: emits ``(source component, n, key, task)``."""

    outputs = {"source": str, "n": int, "key": int, "task": int}

    def process(self, tup):
        yield (tup.component, tup.n, tup.key, self.context.task)


class Groupings(Topology):
    numbers = NumberSpout.spec(par=2)
    to_all = WhereBolt.spec(inputs={numbers: Grouping.all}, par=3)
    to_one = WhereBolt.spec(inputs={numbers: getattr(Grouping, "global")}, par=3)
    by_key = WhereBolt.spec(inputs={numbers: Grouping.fields("key")}, par=3)
    local = WhereBolt.spec(inputs={numbers: Grouping.local_or_shuffle}, par=1)
    mixed = MixedBolt.spec(inputs={numbers: Grouping.fields("key"), local: Grouping.all},
                           par=2)


class ClassifyBolt(Bolt):
    """Even numbers on stream ``even``; odd ones on ``odd`` with an object field."""

    outputs = [Stream("even", {"n": int, "bucket": int}),
               Stream("odd", {"n": int, "bucket": int, "info": object})]

    def process(self, tup):
        if tup.n % 2 == 0:
            self.emit((tup.n, tup.n % 3), "even")
        else:
            self.emit((tup.n, tup.n % 3, {"digits": [int(d) for d in str(tup.n)]}), "odd")


class EvenBolt(Bolt):
    """Emits where its tuples came from, to check the tuple's attributes."""

    outputs = {"n": int, "source": str, "stream_name": str}

    def process(self, tup):
        return [(tup.n, tup.component, tup.stream)]


class DigitsBolt(Bolt):
    outputs = {"n": int, "digit_sum": int}

    def process(self, tup):
        return [(tup.n, sum(tup.info["digits"]))]


class BucketSum(StatefulBolt):
    """Sum of the numbers of each bucket over both streams; emits the running sum."""

    outputs = {"bucket": int, "total": int}

    def initial_state(self, key):
        return 0

    def process(self, tup, state):
        state.value += tup.n
        return [(tup.bucket, state.value)]


class EvenCount(StatefulBolt):
    """Counts the even numbers of each bucket once per batch (process_key)."""

    outputs = {"bucket": int, "count": int}

    def initial_state(self, key):
        return 0

    def process_key(self, tuples, state):
        state.value += len(tuples)
        return [(state.key[0], state.value)]


class DoubleBolt(Bolt):
    """Downstream of a stateful bolt (runs in the batch sink): doubles the total."""

    outputs = {"bucket": int, "twice": int}

    def process(self, tup):
        return [(tup.bucket, 2 * tup.total)]


class Streams(Topology):
    numbers = NumberSpout.spec(par=2)
    classify = ClassifyBolt.spec(inputs={numbers: Grouping.shuffle}, par=2)
    evens = EvenBolt.spec(inputs={classify["even"]: Grouping.shuffle}, par=1)
    digits = DigitsBolt.spec(inputs={classify["odd"]: Grouping.shuffle}, par=2)
    sums = BucketSum.spec(inputs={classify["even"]: Grouping.fields("bucket"),
                                  classify["odd"]: Grouping.fields("bucket")}, par=2)
    even_count = EvenCount.spec(inputs={classify["even"]: Grouping.fields("bucket")},
                                par=2)
    doubled = DoubleBolt.spec(inputs={sums: Grouping.shuffle}, par=2)


class FailingBolt(Bolt):
    outputs = {"n": int}

    def process(self, tup):
        if tup.n == 42:
            raise ValueError("no answers here")
        return [(tup.n,)]


class Failing(Topology):
    numbers = NumberSpout.spec(par=2)
    fails = FailingBolt.spec(inputs={numbers: Grouping.shuffle}, par=2)


class TickSpout(Spout):
    """Endless: ``tick_rate`` (conf) new offsets per second per task since start."""

    outputs = {"n": int}

    def initialize(self, conf, context):
        self.start = time.monotonic()
        self.rate = float(conf.get("tick_rate", 100))

    def available(self):
        return int((time.monotonic() - self.start) * self.rate)

    def read(self, start, end):
        n, t = self.context.parallelism, self.context.task
        return [(i * n + t,) for i in range(start, end)]


class SquareBolt(Bolt):
    outputs = {"n": int, "square": int}

    def process(self, tup):
        return [(tup.n, tup.n * tup.n)]


class Ticks(Topology):
    ticks = TickSpout.spec(par=2)
    squares = SquareBolt.spec(inputs={ticks: Grouping.shuffle}, par=2)
