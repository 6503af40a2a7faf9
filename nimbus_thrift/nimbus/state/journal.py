"""The state changes a store commits, as entries another store can replay: how the
leader's commits reach the other nimbuses in HA mode (issue 28).

Every write of :class:`~.store.Store` goes through one funnel (``Store._run``), as an
SQL statement and its parameters, computed by the leader (ids, times and counters are
parameters, never SQLite's own functions), so replaying the same statements in the same
order on a store that holds the same rows gives the same rows, rowids included. A
transaction's statements are one :class:`Change`; the store hands it to its
:class:`Journal` just before its commit, and commits only if the journal took it: a
journal that refuses (this daemon is no longer the leader, or its session with the
coordinator is gone) makes the transaction roll back and the caller get the refusal,
so nothing is acknowledged that the other nimbuses will not see.

The encoding is JSON: the statements' parameters are text, numbers, None and bytes
(the topology's structure), the last as ``{"b64": ...}``.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class Statement:
    """One write: SQL, its parameters, and the topology it changes (watchers are told)."""

    sql: str
    params: tuple[Any, ...]
    topology: str | None = None


@dataclass(frozen=True)
class Change:
    """One committed transaction's writes, in order."""

    statements: tuple[Statement, ...]

    def encode(self) -> bytes:
        return json.dumps([[s.sql, [_param_out(p) for p in s.params], s.topology]
                           for s in self.statements], separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> Change:
        """Raises JournalError on bytes that are not an encoded Change."""
        try:
            raw = json.loads(data)
            return cls(tuple(Statement(str(sql), tuple(_param_in(p) for p in params),
                                       None if topology is None else str(topology))
                             for sql, params, topology in raw))
        except (ValueError, TypeError, KeyError) as exc:
            raise JournalError(f"not a journal entry: {exc}") from None


class JournalError(Exception):
    """A change the journal could not take or give back (the message says why)."""


class Journal(Protocol):
    """Where a store's commits go before they are committed."""

    def record(self, change: Change) -> int | None:
        """Make ``change`` durable for every replica, or raise (the commit is undone);
        return its position in the journal, which the store keeps with it."""


def _param_out(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"b64": base64.b64encode(bytes(value)).decode("ascii")}
    return value


def _param_in(value: Any) -> Any:
    if isinstance(value, dict):
        return base64.b64decode(value["b64"])
    return value
