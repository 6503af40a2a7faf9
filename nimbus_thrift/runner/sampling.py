"""Storm's ``debug``: a sample of the tuples a component emits, logged to the topology's
log (Storm writes them to its event logger; here they are log lines).

:class:`TupleSampler` is given each part of what one component instance emitted on a
stream (a list of tuples, or columns) when the emitter turns it into output, and logs
each tuple with probability ``percent / 100`` on the :data:`SAMPLE_LOGGER` logger at
INFO, which stays at INFO whatever the root logger's level (the user asked for these
lines). The cost while sampling is off is one attribute test per part.

No PySpark here.
"""

from __future__ import annotations

import logging
import random
from typing import Any, Sequence

#: The logger of sampled tuples.
SAMPLE_LOGGER = "nimbus_thrift.tuples"
log = logging.getLogger(SAMPLE_LOGGER)
log.setLevel(logging.INFO)


class TupleSampler:
    """Logs ``percent`` % of one component instance's emitted tuples.

    Args:
        topology, component, task, batch_id: what each line says the tuple is.
        percent: 0 to 100.
        rng: the random source (tests give a seeded one).
    """

    def __init__(self, topology: str, component: str, task: int, batch_id: int | None,
                 percent: float, rng: random.Random | None = None):
        self.topology = topology
        self.component = component
        self.task = task
        self.batch_id = batch_id
        self.fraction = max(0.0, min(100.0, percent)) / 100.0
        self.rng = rng if rng is not None else random.Random()
        self.logged = 0

    def rows(self, stream: str, rows: Sequence[Any]) -> None:
        """Sample a list of tuples emitted on ``stream``."""
        for index in self._picks(len(rows)):
            self._log(stream, tuple(rows[index]))

    def columns(self, stream: str, count: int, values: Sequence[Any]) -> None:
        """Sample ``count`` tuples emitted as columns (one sequence per field: lists,
        numpy arrays or pyarrow Arrays)."""
        for index in self._picks(count):
            self._log(stream, tuple(_python(column[index]) for column in values))

    def _picks(self, count: int) -> list[int]:
        if self.fraction >= 1.0:
            return list(range(count))
        random_ = self.rng.random
        fraction = self.fraction
        return [i for i in range(count) if random_() < fraction]

    def _log(self, stream: str, values: tuple[Any, ...]) -> None:
        self.logged += 1
        batch = "" if self.batch_id is None else f" batch {self.batch_id}"
        log.info("tuple of %s task %d stream %s%s in %s: %r", self.component, self.task,
                 stream, batch, self.topology, values)


def _python(value: Any) -> Any:
    as_py = getattr(value, "as_py", None)            # a pyarrow scalar
    if as_py is not None:
        return as_py()
    item = getattr(value, "item", None)              # a numpy scalar
    return item() if item is not None and not isinstance(value, (str, bytes)) else value
