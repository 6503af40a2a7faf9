"""The decoded-size budget: how much memory the Python objects decoded from one frame
may take, and what each object is charged against it.

Why: a frame's bytes bound what it can declare, not what it becomes. One byte (a
struct's STOP) becomes a whole struct object: a 1 MiB ``submitTopology`` frame of
empty ``JavaObjectArg`` structs decodes to ~150 MB of Python objects. So decoding
charges an estimate of every object it makes against a budget of the frame's bytes
times a small factor (:func:`decoded_size_limit`), and a frame that would go over it is
refused with PROTOCOL_ERROR before the objects exist (containers and structs are
charged before they are made; a string right after, its size bounded by the frame).

The estimates are CPython 3.11's on 64-bit, measured with tracemalloc over 100,000
objects of each kind (and equal to ``sys.getsizeof`` where one is given). binary.py
(the Python decoder) and _wire.c (the C fast path) charge exactly the same amounts at
the same objects, so both give the same answer for any frame and budget; _wire.c
exports its table and binary.py checks it equals this one at import.

A container's slots are charged by the container, its scalar elements with them, in one
step before the loop: the check costs a few integer operations per container, plus one
per string, binary and struct, never a Python call per element in C.
"""

from __future__ import annotations

import sys

#: An int from a byte, i16, i32 or i64: 28 bytes for |x| < 2**30, 32 below 2**60;
#: charged 32 even for the small ints CPython caches (a cheap overestimate).
COST_INT = 32
#: A float: sys.getsizeof(1.5).
COST_DOUBLE = 24
#: True and False are singletons: they cost their slot only.
COST_BOOL = 0
#: A bytes object of n bytes: sys.getsizeof(b"") is 33, plus n.
COST_BYTES = 33
#: A str of n ASCII characters: sys.getsizeof("") is 49, plus n (exact).
COST_STR_ASCII = 49
#: Any other str of n characters: at most 4 bytes each (one character past U+FFFF
#: makes them all 4 bytes wide) after an 80-byte header (sys.getsizeof("\U0001f600")
#: is 80). Charged by characters, not by the UTF-8 bytes, which do not bound it.
COST_STR = 80
COST_STR_CHAR = 4
#: A struct instance: 80 bytes plus 8 per field its class declares (thriftpy2's
#: __init__ sets every field: 88 for GlobalStreamId's 2 fields, 128 for
#: JavaObjectArg's 6, 152 for TopologySummary's 9, measured).
COST_STRUCT = 80
COST_STRUCT_FIELD = 8
#: A list: sys.getsizeof([]) is 56, then one 8-byte pointer per element.
COST_LIST = 56
COST_LIST_SLOT = 8
#: A set: 216 bytes with room for 4 elements; adding one at a time (as decoding does)
#: grows the table 4-fold at 60% full, so 27 to 128 bytes per element (105 measured
#: for 20,000): the worst is charged (no Nimbus message has a set).
COST_SET = 216
COST_SET_SLOT = 128
#: A dict: 64 bytes empty; filled one entry at a time, 27 to 60 bytes per entry for 5
#: to 100,000 entries (a first key table is 160 bytes): 72 per entry is charged.
COST_MAP = 64
COST_MAP_ENTRY = 72

#: The table _wire.c exports as COSTS, in this order.
COSTS = (COST_INT, COST_DOUBLE, COST_BOOL, COST_BYTES, COST_STR_ASCII, COST_STR,
         COST_STR_CHAR, COST_STRUCT, COST_STRUCT_FIELD, COST_LIST, COST_LIST_SLOT,
         COST_SET, COST_SET_SLOT, COST_MAP, COST_MAP_ENTRY)

#: The budget of any frame, however small: 1 MiB. A small request may hold many small
#: objects (a 100-byte frame of 20 empty structs costs 2.7 KB, 27 times its size) and
#: refusing it would help nobody: this much is harmless to every server.
DECODED_SIZE_FLOOR = 1024 * 1024

#: No budget: for trusted bytes (values this process encoded itself).
UNLIMITED = sys.maxsize


def string_cost(value: str) -> int:
    """What a decoded ``string`` is charged: exact for ASCII, an upper bound otherwise
    (both O(1): CPython keeps whether a str is ASCII; _wire.c computes the same)."""
    if value.isascii():
        return COST_STR_ASCII + len(value)
    return COST_STR + COST_STR_CHAR * len(value)


def decoded_size_limit(frame_bytes: int, factor: float,
                       floor: int = DECODED_SIZE_FLOOR) -> int:
    """The decoded-size budget of a frame of ``frame_bytes``: ``factor`` times its
    bytes, and never under ``floor``."""
    return max(floor, int(frame_bytes * factor))


class Budget:
    """The bytes left to decode into, for one frame. ``left`` goes down as objects are
    charged; below zero the decoder raises :class:`~.errors.DecodeBudgetError`."""

    __slots__ = ("left", "limit")

    def __init__(self, limit: int) -> None:
        self.left = limit
        self.limit = limit
