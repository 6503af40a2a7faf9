"""Word count hand-written in PySpark: the baseline scripts/bench/bench_topology.py compares
our runner against. The same work as examples/wordcount.py with a null sink: a Python
streaming data source of sentences (same generator, same partitions), a per-row Python
split in mapInArrow, a per-key count in applyInPandasWithState, run with availableNow.
"""

from __future__ import annotations

from typing import Any, Iterator

# The example's own generator: both pipelines read exactly the same sentences
# (examples/ is on the PYTHONPATH of every Spark Python process, see bench_topology).
from wordcount import sentence_at


def register(spark: Any) -> None:
    """Register the ``bench_sentences`` streaming source on ``spark``."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

    class Part(InputPartition):
        def __init__(self, task: int, start: int, end: int):
            self.task, self.start, self.end = task, start, end

    class Reader(DataSourceStreamReader, SupportsTriggerAvailableNow):
        def __init__(self, options: dict[str, str]):
            self.tasks = int(options["tasks"])
            self.total = int(options["total"])
            self.batch = int(options["batch"])
            self.target: dict[str, int] | None = None

        def initialOffset(self) -> dict[str, int]:
            return {str(t): 0 for t in range(self.tasks)}

        def prepareForTriggerAvailableNow(self) -> None:
            self.target = {str(t): self.total for t in range(self.tasks)}

        def latestOffset(self, start: dict[str, int], limit: Any) -> dict[str, int]:
            cap = self.target or {str(t): self.total for t in range(self.tasks)}
            return {t: min(cap[t], start[t] + self.batch) for t in start}

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[Part]:
            return [Part(int(t), start[t], end[t]) for t in sorted(start, key=int)]

        def read(self, partition: Part) -> Iterator[tuple[str]]:
            for offset in range(partition.start, partition.end):
                yield (sentence_at(partition.task, offset),)

        def commit(self, end: dict[str, int]) -> None:
            pass

    class Source(DataSource):
        @classmethod
        def name(cls) -> str:
            return "bench_sentences"

        def schema(self) -> str:
            return "sentence string"

        def streamReader(self, schema: Any) -> Reader:
            return Reader(self.options)

    spark.dataSource.register(Source)


def run(spark: Any, checkpoint: str, tasks: int, per_task: int, batch: int,
        par: int) -> int:
    """Run the pipeline to the end of the source; return the number of (word, count)
    tuples the count stage emitted (one per word read)."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa
    from pyspark.sql.streaming.state import GroupStateTimeout

    def split(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for rb in batches:
            words = [w for s in rb.column(0).to_pylist() for w in s.split()]
            yield pa.RecordBatch.from_arrays([pa.array(words, pa.string())], ["word"])

    def count(key: tuple[str], frames: Iterator[pd.DataFrame], state: Any
              ) -> Iterator[pd.DataFrame]:
        # Like the topology's CountBolt, one (word, running count) per input word, but
        # vectorised: what a Spark user would write.
        total = state.get[0] if state.exists else 0
        for frame in frames:
            n = len(frame)
            yield pd.DataFrame({"word": frame["word"].values,
                                "count": np.arange(total + 1, total + n + 1)})
            total += n
        state.update((total,))

    counted = [0]

    def sink(df: Any, batch_id: int) -> None:
        counted[0] += df.count()

    register(spark)
    spark.conf.set("spark.sql.shuffle.partitions", str(par))
    query = (spark.readStream.format("bench_sentences")
             .option("tasks", tasks).option("total", per_task).option("batch", batch).load()
             .repartition(par)
             .mapInArrow(split, "word string")
             .groupBy("word")
             .applyInPandasWithState(count, "word string, count long", "count long",
                                     "append", GroupStateTimeout.NoTimeout)
             .writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination()
    return counted[0]
