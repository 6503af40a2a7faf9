"""The rows of the state database as typed values (store.py reads and writes them;
every room that asks the store gets them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TopologyRecord:
    id: str
    name: str
    status: str
    prev_status: str | None
    owner: str
    submitted_at: float
    num_workers: int
    executors: dict[str, int]
    tasks: dict[str, int]
    conf: dict[str, Any]
    topology: bytes
    code_upload: str
    code_sha256: str
    code_bytes: int


@dataclass(frozen=True)
class TopologyListing:
    """The small columns of a topology row, as stored (not decoded: a listing must
    survive a row it cannot decode; the reader checks each value)."""

    id: Any
    name: Any
    status: Any
    prev_status: Any
    owner: Any
    submitted_at: Any
    num_workers: Any
    executors: Any                  # JSON text
    tasks: Any                      # JSON text


@dataclass(frozen=True)
class Action:
    topology_id: str
    kind: str                       # 'remove' or 'rebalance'
    due_at: float
    options: dict[str, Any]


@dataclass(frozen=True)
class Blob:
    """A blob store key's current version. ``acl`` is JSON: ``[[type, name, access]]``."""

    key: str
    version: int
    file: str                       # the id of its data file in <data>/blobs
    bytes: int
    sha256: str
    acl: str
    created_at: float
    updated_at: float


@dataclass(frozen=True)
class BlobUpload:
    """A blob upload in progress: a create of a new key or an update of one."""

    id: str                         # also the id of its data file
    key: str
    kind: str                       # 'create' or 'update'
    acl: str | None                 # a create's ACL (JSON, as Blob.acl); None for updates
    bytes: int                      # acknowledged bytes
    owner: str | None               # the principal that began it
    created_at: float
    touched_at: float


@dataclass(frozen=True)
class Upload:
    id: str
    location: str
    state: str                      # 'open' or 'complete'
    bytes: int
    sha256: str | None
    created_at: float
    touched_at: float
    completed_at: float | None
