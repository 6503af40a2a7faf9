"""A word count that also tries to reach what is not its own: the real-Spark test of
run_as_user (tests/spark/test_run_as_user.py) runs one for each of two principals and
checks that each counted right and was refused everything else.

The targets come in the conf (``walls.targets``: a name -> path mapping, and
``walls.pids``: name -> pid). Each Python worker that runs the sink tries every
target once and writes what happened to ``probes-<pid>.json`` in its work directory:
``{"read:state": "PermissionError", ...}`` (the exception's name, or ``"ok"``).
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

from nimbus_thrift.topology import Bolt, Context, Grouping, Spout, Topology

SENTENCES = ("the cow jumped over the moon", "an apple a day keeps the doctor away")
WORK_DIR_ENV = "NIMBUS_THRIFT_WORK_DIR"


def _outcome(action: Any) -> str:
    try:
        action()
    except OSError as exc:
        return type(exc).__name__
    return "ok"


def _read(path: str) -> None:
    if os.path.isdir(path):
        os.listdir(path)
    else:
        with open(path, "rb") as f:
            f.read(1)


def _write(path: str) -> None:
    target = os.path.join(path, "walls-was-here") if os.path.isdir(path) else path
    with open(target, "ab") as f:
        f.write(b"x")


def probe(conf: dict[str, Any]) -> dict[str, str]:
    """Try each target: read and write each path, signal each pid (signal 0)."""
    found: dict[str, str] = {"whoami": str(os.getuid())}
    for name, path in (conf.get("walls.targets") or {}).items():
        found[f"read:{name}"] = _outcome(lambda: _read(path))
        found[f"write:{name}"] = _outcome(lambda: _write(path))
    for name, pid in (conf.get("walls.pids") or {}).items():
        found[f"signal:{name}"] = _outcome(lambda: os.kill(int(pid), 0))
    return found


class Sentences(Spout):
    outputs = {"sentence": str}

    def initialize(self, conf: dict[str, Any], context: Context) -> None:
        self.total = int(conf.get("walls.total", 200))

    def available(self) -> int:
        return self.total

    def read(self, start: int, end: int) -> list[tuple[str]]:
        return [(SENTENCES[i % len(SENTENCES)],) for i in range(start, end)]


class Split(Bolt):
    outputs = {"word": str}

    def process(self, tup: Any) -> list[tuple[str]]:
        return [(word,) for word in tup.sentence.split()]


class Sink(Bolt):
    """Counts into ``counts.sqlite`` in the work directory; probes once a process."""

    outputs: list[str] = []

    def initialize(self, conf: dict[str, Any], context: Context) -> None:
        self.dir = Path(os.environ[WORK_DIR_ENV])
        self.counts: dict[str, int] = {}
        (self.dir / f"probes-{os.getpid()}.json").write_text(json.dumps(probe(conf)))

    def process(self, tup: Any) -> None:
        self.counts[tup.word] = self.counts.get(tup.word, 0) + 1

    def end_batch(self, batch_id: int) -> None:
        db = sqlite3.connect(self.dir / "counts.sqlite", timeout=30)
        try:
            with db:
                db.execute("CREATE TABLE IF NOT EXISTS counts (word TEXT PRIMARY KEY, "
                           "count INTEGER)")
                db.executemany("INSERT INTO counts VALUES (?, ?) ON CONFLICT(word) DO "
                               "UPDATE SET count = count + excluded.count",
                               self.counts.items())
        finally:
            db.close()
        self.counts = {}


class Walls(Topology):
    config = {"topology.workers": 1}

    sentences = Sentences.spec(par=1)
    split = Split.spec(inputs={sentences: Grouping.shuffle}, par=1)
    sink = Sink.spec(inputs={split: Grouping.fields("word")}, par=1)
