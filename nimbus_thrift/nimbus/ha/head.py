"""The journal's head node, ``/journal``, and positions.

The journal is kept in generations, ``/log/g-<g>/e-<seq>``; each generation after the
first starts with a snapshot of the state (a copy of a store's SQLite file in
``shared_dir``, its sha256 in the head), so older generations can be deleted and a
nimbus that joins late, or fell behind them, installs the snapshot and replays what
came after. The head says::

    {"cluster": <id>, "generation": g, "oldest": o, "snapshot": null | {
        "position": p, "file": "journal/snapshot-<p>.sqlite3", "sha256": ...}}

``generation``: where the leader writes; ``oldest``: the first generation still kept
(set before older ones are deleted, so a reader that misses an entry knows why);
``cluster``: which cluster a store's copy belongs to (its meta says the same).

A position is ``generation << 32 | (seq + 1)``: a store's copy holds the position of
the last entry it has, and positions grow across generations.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import NoNodeError

from .coordinator import Coordinator

HEAD = "/journal"
GENERATIONS = "/log"


@dataclass(frozen=True)
class Snapshot:
    position: int
    file: str                   # relative to shared_dir
    sha256: str


@dataclass(frozen=True)
class Head:
    cluster: str
    generation: int
    oldest: int
    snapshot: Snapshot | None
    version: int                # the node's version, for a checked rewrite

    def encode(self) -> bytes:
        snap = None if self.snapshot is None else {
            "position": self.snapshot.position, "file": self.snapshot.file,
            "sha256": self.snapshot.sha256}
        return json.dumps({"cluster": self.cluster, "generation": self.generation,
                           "oldest": self.oldest, "snapshot": snap}).encode()


def read_head(coordinator: Coordinator) -> Head | None:
    """The head, or None before the first nimbus made it."""
    try:
        data, stat = coordinator.client.get(HEAD)
    except NoNodeError:
        return None
    raw: dict[str, Any] = json.loads(data)
    snap = raw.get("snapshot")
    return Head(str(raw["cluster"]), int(raw["generation"]), int(raw["oldest"]),
                None if snap is None else Snapshot(int(snap["position"]), str(snap["file"]),
                                                   str(snap["sha256"])),
                stat.version)


def generation_path(generation: int) -> str:
    return f"{GENERATIONS}/g-{generation:010d}"


def entry_path(generation: int, seq: int) -> str:
    return f"{generation_path(generation)}/e-{seq:010d}"


def position(generation: int, seq: int) -> int:
    """The position of entry ``seq`` of ``generation``."""
    return generation << 32 | (seq + 1)


def next_entry(pos: int) -> tuple[int, int]:
    """(generation, seq) of the entry after position ``pos`` in its generation."""
    return pos >> 32, pos & 0xFFFFFFFF


def seq_of(path: str) -> int:
    return int(path.rsplit("-", 1)[1])
