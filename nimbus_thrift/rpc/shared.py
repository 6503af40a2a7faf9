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

from .codec.replies import result_body

T = TypeVar("T")


class SharedBuffer(bytes):
    """The encoded body of a shared result: the bytes every reply carrying it sends."""

    __slots__ = ()


class _Mark:
    __slots__ = ("ref", "bodies")

    def __init__(self, ref: weakref.ref[Any]) -> None:
        self.ref = ref
        #: (result struct class, protocol) -> its encoded body.
        self.bodies: dict[tuple[type, str], SharedBuffer] = {}


#: id(value) -> its mark. Read on every call that returns a value (one dict lookup,
#: only while any value is marked); written by share and by the weak references.
MARKED: dict[int, _Mark] = {}
_lock = threading.Lock()


def share(value: T) -> T:
    """Mark ``value`` (a thriftpy2 struct, or any object a weak reference can point to)
    as returned unchanged to every caller from now on; returns it."""
    key = id(value)

    def forget(_ref: weakref.ref[Any]) -> None:
        # Runs when the value dies, before its id can be reused; leaves a newer mark of
        # the same value (share called twice) to its own reference.
        with _lock:
            if MARKED.get(key) is mark:
                del MARKED[key]

    mark = _Mark(weakref.ref(value, forget))
    with _lock:
        MARKED[key] = mark
    return value


def mark_of(value: Any) -> _Mark | None:
    """The mark of ``value`` when it is shared, else None."""
    mark = MARKED.get(id(value))
    if mark is None or mark.ref() is not value:
        return None
    return mark


def body(mark: _Mark, result_cls: type, protocol: str) -> SharedBuffer:
    """The body of ``result_cls`` holding the marked value as ``success``, in
    ``protocol``, encoded the first time it is asked for (codec/replies.py). Two
    workers asking at once may both encode it; both get equal bytes."""
    key = (result_cls, protocol)
    data = mark.bodies.get(key)
    if data is None:
        value = mark.ref()
        result: Any = object.__new__(result_cls)
        result.success = value
        data = mark.bodies[key] = SharedBuffer(result_body(protocol, result))
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
