"""Results encoded once and sent to every caller: for a handler that returns the same
large value to many callers until it changes (a cluster's summary, read by every
dashboard), so the server neither encodes it per call nor holds a copy per slow reader.

A handler marks such a value with :func:`share` and returns it. The dispatcher then
encodes the method's result struct around it once per protocol (:func:`body`) and sends
each caller its own message header followed by that body, a :class:`SharedBuffer`. The
selector counts a :class:`SharedBuffer` once in ``max_unsent_reply_bytes`` however many
slow readers hold it (selector.py, ``_hold_output``): 100 dashboards reading an 860 KB
summary hold 860 KB, not 86 MB, and none of them is closed for it.

The contract: a shared value is never changed after it is marked (the handler builds a
new one instead). The marks are kept by object identity, with a weak reference, so they
cost nothing once the value is gone and change nothing for values never marked (and for
in-process callers of the handler, which get the value itself).
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, TypeVar

from .codec.replies import binary_around_list, result_body, struct_body

T = TypeVar("T")


class SharedBuffer(bytes):
    """The encoded body of a shared result: the bytes every reply carrying it sends."""

    __slots__ = ()


class _Mark:
    __slots__ = ("ref", "elements", "bodies")

    def __init__(self, ref: weakref.ref[Any], elements: str | None) -> None:
        self.ref = ref
        self.elements = elements
        #: (result struct class, protocol) -> its encoded body.
        self.bodies: dict[tuple[type, str], list[bytes]] = {}


#: id(value) -> its mark. Read on every call that returns a value (one dict lookup,
#: only while any value is marked); written by share and by the weak references.
MARKED: dict[int, _Mark] = {}
_lock = threading.Lock()


def share(value: T, elements: str | None = None) -> T:
    """Mark ``value`` (a thriftpy2 struct, or any object a weak reference can point to)
    as returned unchanged to every caller from now on; returns it.

    ``elements``: the name of a list-of-structs field whose items are themselves kept
    unchanged and mostly reused by the next value (a summary per topology, of which a
    state change replaces one): in binary, each item is encoded once while it lives,
    and a new value costs the encoding of its new items and a join, not a whole
    encoding (5,000 topologies: 2.5 ms a change, against about 0.5 ms)."""
    key = id(value)

    def forget(_ref: weakref.ref[Any]) -> None:
        # Runs when the value dies, before its id can be reused; leaves a newer mark of
        # the same value (share called twice) to its own reference.
        with _lock:
            if MARKED.get(key) is mark:
                del MARKED[key]

    mark = _Mark(weakref.ref(value, forget), elements)
    with _lock:
        MARKED[key] = mark
    return value


def mark_of(value: Any) -> _Mark | None:
    """The mark of ``value`` when it is shared, else None."""
    mark = MARKED.get(id(value))
    if mark is None or mark.ref() is not value:
        return None
    return mark


#: A shared result's body: buffers sent back to back, the shared ones SharedBuffers.
Body = list[bytes]

#: Items of an ``elements`` list encoded together as one SharedBuffer: a change to one
#: item makes one new chunk (about 22 KB of topology summaries), not a new body, so
#: slow readers of successive values hold mostly the same chunks.
CHUNK_ITEMS = 128


def body(mark: _Mark, result_cls: type, protocol: str) -> Body:
    """The body of ``result_cls`` holding the marked value as ``success``, in
    ``protocol``, encoded the first time it is asked for (codec/replies.py). Two
    workers asking at once may both encode it; both get equal bytes."""
    key = (result_cls, protocol)
    data = mark.bodies.get(key)
    if data is None:
        value = mark.ref()
        field = mark.elements
        items = getattr(value, field, None) if field else None
        if field and items is not None and protocol == "binary":
            before, after = binary_around_list(value, field, len(items))
            data = [before, *_chunks(type(value), field, items), after]
        else:
            result: Any = object.__new__(result_cls)
            result.success = value
            data = [SharedBuffer(result_body(protocol, result))]
        mark.bodies[key] = data
    return data


#: (struct class, field) -> {the ids of a chunk's items: (the items, the chunk)}: the
#: chunks of the last value built, the items held so that their ids stay theirs.
_CHUNKS: dict[tuple[type, str], dict[tuple[int, ...], tuple[tuple[Any, ...], SharedBuffer]]] = {}


def _chunks(cls: type, field: str, items: list[Any]) -> list[SharedBuffer]:
    last = _CHUNKS.get((cls, field), {})
    kept: dict[tuple[int, ...], tuple[tuple[Any, ...], SharedBuffer]] = {}
    out = []
    for start in range(0, len(items), CHUNK_ITEMS):
        group = tuple(items[start:start + CHUNK_ITEMS])
        ids = tuple(map(id, group))
        hit = last.get(ids)
        if hit is None:
            hit = (group, SharedBuffer(b"".join(map(_element_body, group))))
        kept[ids] = hit
        out.append(hit[1])
    _CHUNKS[(cls, field)] = kept
    return out


#: id(item) -> (a weak reference to it, its binary encoding): the items of shared
#: values' ``elements`` lists, kept while they live.
_ELEMENTS: dict[int, tuple[weakref.ref[Any], bytes]] = {}


class _ItemRef(weakref.ref):  # type: ignore[type-arg]
    """A weak reference that knows its item's key (no closure per item)."""

    __slots__ = ("key",)
    key: int


def _item_gone(ref: _ItemRef) -> None:
    # Runs while the item is freed, before its id can be reused: nothing newer can be
    # kept under the key yet, unless this item was encoded twice at once.
    kept = _ELEMENTS.get(ref.key)
    if kept is not None and kept[0] is ref:
        _ELEMENTS.pop(ref.key, None)


def _element_body(item: Any) -> bytes:
    key = id(item)
    hit = _ELEMENTS.get(key)
    if hit is not None and hit[0]() is item:
        return hit[1]
    data = struct_body("binary", item)
    ref = _ItemRef(item, _item_gone)
    ref.key = key
    _ELEMENTS[key] = (ref, data)
    return data


def split_held(unsent: list[Any]) -> tuple[int, list[SharedBuffer]]:
    """The bytes ``unsent`` (a reply's buffers not yet sent) keeps alive of its own, and
    the shared bodies it points into (counted once by their holder's books)."""
    own = 0
    shared: list[SharedBuffer] = []
    for buf in unsent:
        obj: Any = buf.obj if isinstance(buf, memoryview) else buf
        if type(obj) is SharedBuffer:
            shared.append(obj)
        else:
            own += memoryview(obj).nbytes
    return own, shared
