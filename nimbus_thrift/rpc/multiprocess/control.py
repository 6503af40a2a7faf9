"""The messages of a multi-process server's control channel (rpc/multiprocess/processes.py is the
parent's end, rpc/multiprocess/child.py the child's), without sockets: encoding, decoding and the
joining of an answer sent in pieces.

One SOCK_SEQPACKET pair per child, so each send is one message of at most
:data:`CONTROL_MAX` bytes::

    parent -> child              child -> parent
                                 b"ready"                        (once serving)
    b"metrics <seq>"             b"metrics <seq> <json>"         a MetricsSnapshot
    b"methods <seq>"             b"methods <seq> <i> <n> <part>" for i = 0 .. n-1
    b"stop <grace> <settle>"     once stopped, its last words:
                                 b"methods 0 <i> <n> <part>"     (if it has figures)
                                 b"bye <json>"                   its last snapshot

``<seq>`` is the parent's request number (from 1; 0 is the last words), so an answer
to an earlier request that comes late is never taken for the current one.

Per-method figures (methodstats.py) travel as one JSON document, cut into ``n``
parts of at most :data:`METHODS_PART_MAX` bytes::

    {"<method>": [[ok, declared, failed], [count per bucket ...], seconds_sum], ...}

Why parts: a snapshot is ~700 bytes, but the figures grow with the IDL (~200 bytes a
method), and a service of a few hundred methods would pass CONTROL_MAX. Raising the
cap for one message would not do: a datagram's size is bounded by the socket's send
buffer (~208 KiB by default). The parts are bounded too (:data:`METHODS_MAX_PARTS`):
a child whose figures would pass that sends the busiest methods that fit (and logs
it); the parent keeps the figures it had for the others.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from ..methodstats import BUCKETS, OUTCOMES, MethodSnapshot
from ..metrics import MetricsSnapshot

#: Largest control message: a metrics snapshot as JSON is about 700 bytes, a part of
#: the per-method figures at most this.
CONTROL_MAX = 64 * 1024
#: Room for ``methods <seq> <i> <n> `` in front of a part (a 20-digit seq included).
_HEAD_ROOM = 64
#: Largest part of the per-method figures' JSON in one message.
METHODS_PART_MAX = CONTROL_MAX - _HEAD_ROOM
#: Most parts one answer may have: 4 MiB of JSON, ~20,000 methods, far beyond any IDL;
#: checked before the parent keeps a part, so a garbled count cannot make it hold more.
METHODS_MAX_PARTS = 64
#: The ``<seq>`` of a child's last words.
FINAL_SEQ = 0


def parse_seq(arg: bytes) -> int | None:
    """The request number in a parent's request, or None if it is not one."""
    return int(arg) if arg.isdigit() and len(arg) <= 20 else None


# ----------------------------------------------------------------- snapshots

def encode_snapshot(kind: bytes, snapshot: MetricsSnapshot, seq: int | None = None) -> bytes:
    head = kind if seq is None else kind + b" %d" % seq
    return head + b" " + json.dumps(snapshot.as_dict(), separators=(",", ":")).encode()


def decode_snapshot(message: bytes, kind: bytes, seq: int | None = None) -> MetricsSnapshot | None:
    """The snapshot in a child's ``kind`` message, or None if the message is another
    (a late answer to an earlier request, say) or unreadable."""
    parts = message.split(b" ", 2 if seq is not None else 1)
    if parts[0] != kind or len(parts) != (3 if seq is not None else 2):
        return None
    if seq is not None and parts[1] != b"%d" % seq:
        return None
    try:
        values = json.loads(parts[-1])
        return MetricsSnapshot(**{k: int(v) for k, v in values.items()})
    except (ValueError, TypeError, AttributeError, RecursionError):
        return None


class SnapshotReply:
    """The answer to ``metrics <seq>``: :meth:`feed` it what the child sends."""

    def __init__(self, seq: int) -> None:
        self.seq = seq
        self.complete = False
        self.snapshot: MetricsSnapshot | None = None

    def feed(self, message: bytes) -> bool:
        """Take ``message`` if it is the answer; True if it was."""
        snap = decode_snapshot(message, b"metrics", self.seq)
        if snap is None:
            return False
        self.snapshot, self.complete = snap, True
        return True


# ----------------------------------------------------------------- per-method figures

def encode_methods(seq: int, figures: dict[str, MethodSnapshot]) -> tuple[list[bytes], int]:
    """The messages that carry ``figures`` as the answer to request ``seq``, and how
    many methods were left out to stay within METHODS_MAX_PARTS (the least called)."""
    budget = METHODS_MAX_PARTS * METHODS_PART_MAX - 2     # the braces
    entries: list[bytes] = []
    omitted = 0
    busiest = sorted(figures.items(), key=lambda item: (-sum(item[1].outcomes.values()),
                                                         item[0]))
    for name, fig in busiest:
        entry = (json.dumps(name) + ":" + json.dumps(
            [[fig.outcomes.get(o, 0) for o in OUTCOMES], list(fig.bucket_counts),
             fig.seconds_sum], separators=(",", ":"))).encode()
        if len(entry) + 1 > budget:
            omitted += 1
            continue
        budget -= len(entry) + 1
        entries.append(entry)
    body = b"{" + b",".join(entries) + b"}"
    parts = [body[i:i + METHODS_PART_MAX] for i in range(0, len(body), METHODS_PART_MAX)]
    return [b"methods %d %d %d " % (seq, i, len(parts)) + part
            for i, part in enumerate(parts)], omitted


def _counts(value: object, length: int) -> bool:
    return isinstance(value, list) and len(value) == length and \
        all(type(x) is int and x >= 0 for x in value)


def decode_methods(body: bytes) -> dict[str, MethodSnapshot] | None:
    """The figures in a joined JSON document, or None if it is unreadable (not JSON,
    or an entry of the wrong shape: every count a non-negative integer, the seconds a
    finite non-negative number)."""
    try:
        values = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(values, dict):
        return None
    figures = {}
    for name, entry in values.items():
        if not (isinstance(entry, list) and len(entry) == 3):
            return None
        outcomes, buckets, seconds = entry
        if not (_counts(outcomes, len(OUTCOMES)) and _counts(buckets, len(BUCKETS) + 1)
                and type(seconds) in (int, float) and math.isfinite(seconds) and seconds >= 0):
            return None
        figures[name] = MethodSnapshot(dict(zip(OUTCOMES, outcomes)), tuple(buckets),
                                       float(seconds))
    return figures


@dataclass
class _Part:
    seq: int
    index: int
    count: int
    data: bytes


def _parse_part(message: bytes) -> _Part | None:
    fields = message.split(b" ", 4)
    if len(fields) != 5 or fields[0] != b"methods":
        return None
    seq, index, count = (parse_seq(f) for f in fields[1:4])
    if seq is None or index is None or count is None:
        return None
    return _Part(seq, index, count, fields[4])


class MethodsReply:
    """The answer to ``methods <seq>`` (or a child's last figures, ``FINAL_SEQ``),
    joined from its parts: :meth:`feed` it what the child sends. Complete once every
    part has come; :attr:`figures` is then None if the whole was unreadable."""

    def __init__(self, seq: int) -> None:
        self.seq = seq
        self.complete = False
        self.figures: dict[str, MethodSnapshot] | None = None
        self._parts: list[bytes] = []
        self._count = 0

    def feed(self, message: bytes) -> bool:
        """Take ``message`` if it is the next part of this answer; True if it was.
        A part out of turn (something was garbled) is not taken: the answer then
        never completes, and the parent's timeout leaves the child out."""
        part = _parse_part(message)
        # The count is checked before the part is kept: at most METHODS_MAX_PARTS
        # messages of CONTROL_MAX bytes are ever held for one answer.
        if part is None or part.seq != self.seq or self.complete or \
                not 1 <= part.count <= METHODS_MAX_PARTS or part.index >= part.count:
            return False
        if part.index == 0:
            self._parts, self._count = [], part.count
        elif part.index != len(self._parts) or part.count != self._count:
            return False
        self._parts.append(part.data)
        if len(self._parts) == self._count:
            self.complete = True
            self.figures = decode_methods(b"".join(self._parts))
            self._parts = []
        return True


class Farewell:
    """A stopping child's last words: its last per-method figures (if it had any),
    then ``bye`` and its last snapshot. Said once the snapshot has come."""

    def __init__(self) -> None:
        self.methods = MethodsReply(FINAL_SEQ)
        self.snapshot: MetricsSnapshot | None = None

    @property
    def said(self) -> bool:
        return self.snapshot is not None

    def feed(self, message: bytes) -> bool:
        """Take ``message`` if it is part of the last words; True if it was."""
        if self.said:
            return False
        if self.methods.feed(message):
            return True
        self.snapshot = decode_snapshot(message, b"bye")
        return self.snapshot is not None
