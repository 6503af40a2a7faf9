"""What the word count's sink (examples/wordcount.py) has written to its SQLite file,
read the way the tests and benchmarks that watch it do: nothing yet is empty, never
an error (the table appears with the first batch)."""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path


def counts(db: Path) -> dict[str, int]:
    """Every word's count."""
    if not db.exists():
        return {}
    conn = sqlite3.connect(db, timeout=30)
    try:
        return dict(conn.execute("SELECT word, count FROM counts"))
    except sqlite3.OperationalError:       # the table is not created yet
        return {}
    finally:
        conn.close()


def top_count(db: Path) -> int:
    """The largest count (0 before the first batch)."""
    return max(counts(db).values(), default=0)


def expected_counts(per_task: int, tasks: int = 2) -> Counter[str]:
    """Word counts once the word count spout's ``tasks`` tasks emitted ``per_task``
    sentences each (``wordcount.total``): what a finite run ends with, exactly."""
    from examples import wordcount     # the repository's root is on the tests' path
    return Counter(word for task in range(tasks) for offset in range(per_task)
                   for word in wordcount.sentence_at(task, offset).split())
