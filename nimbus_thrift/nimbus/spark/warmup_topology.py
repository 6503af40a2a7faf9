"""The topology :mod:`.warmup` runs to record the classes a Spark driver loads.

It has the shape of a typical topology (a spout, a shuffle-grouped stateless bolt, a
fields-grouped stateful bolt and a sink), so the classes its driver JVM loads are the
ones a user's topology needs at start-up: the class archive made from them covers
those. Spark's Python processes import it from the package, so it needs no code upload.
"""

from __future__ import annotations

import time
from typing import Any, Iterator, Sequence

from ...topology import Bolt, Context, Grouping, KeyState, Spout, StatefulBolt, Topology

#: Tuples per second per spout task: enough for each batch to carry data through every
#: stage, little enough to stay cheap.
RATE = 2000


class NumberSpout(Spout):
    outputs = {"n": int}

    def initialize(self, conf: dict[str, Any], context: Context) -> None:
        self.began = time.time()

    def available(self) -> int | None:
        return int((time.time() - self.began) * RATE)

    def read(self, start: int, end: int) -> Iterator[tuple[int]]:
        for offset in range(start, end):
            yield (offset,)


class DigitBolt(Bolt):
    outputs = {"digit": str}

    def process(self, tup: Any) -> Iterator[tuple[str]]:
        yield (str(tup.n % 10),)


class DigitCount(StatefulBolt):
    outputs = {"digit": str, "count": int}

    def initial_state(self, key: tuple[Any, ...]) -> int:
        return 0

    def process_key(self, tuples: Sequence[Any], state: KeyState) -> Iterator[tuple[str, int]]:
        state.value += len(tuples)
        yield (state.key[0], state.value)


class Discard(Bolt):
    outputs = ()

    def process(self, tup: Any) -> None:
        pass


class WarmUp(Topology):
    numbers = NumberSpout.spec(par=1)
    digits = DigitBolt.spec(inputs={numbers: Grouping.shuffle}, par=1)
    counts = DigitCount.spec(inputs={digits: Grouping.fields("digit")}, par=1)
    sink = Discard.spec(inputs={counts: Grouping.shuffle}, par=1)
