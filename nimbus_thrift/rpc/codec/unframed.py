"""Where an unframed message ends: an incremental, bounds-checked scan of a binary or
compact message as its bytes arrive, for clients without a frame length
(TBufferedTransport, thriftpy2's default ``make_client``).

Theory of operation
-------------------
A message without a length prefix ends where its argument struct's STOP byte is, so
finding it means walking the whole structure: field headers, lengths, container
headers. :class:`Scanner` does that walk as a stack of pending steps, and
:meth:`Scanner.feed` runs it over whatever bytes have arrived so far. A step that needs
bytes not yet there (a field header, a varint, a length) stops the walk *before* the
step, and the next ``feed`` resumes right there: no byte is looked at twice except the
few of an unfinished token (at most 10, a varint), so scanning is linear in the
message however it is split. String bodies are skipped by their length, not read.

Everything is checked against ``limit`` (the server's message-size limit) as soon as
it is known, before the bytes arrive: a string or container that cannot end within
the limit is refused at once (:class:`~.errors.FrameSizeError`), as is a message still
unfinished at the limit; nesting is capped at :data:`~.pydecode.MAX_DEPTH`; a negative
length, an unknown type or a malformed varint is a :class:`ScanError`. The scan checks
structure only: the values are decoded (and charged against the decoded-size budget)
later, by the same decoders as framed messages.
"""

from __future__ import annotations

from typing import Any

from ..errors import DecodeError, FrameSizeError
from .pydecode import MAX_DEPTH

# Steps on the stack: lists [op, ...], mutated in place.
_HEADER, _STRUCT, _VALUE, _ITEMS, _SKIP = range(5)

# Binary wire types and their fixed sizes.
_B_FIXED = {2: 1, 3: 1, 4: 8, 6: 2, 8: 4, 10: 8}
_B_STRING, _B_STRUCT, _B_MAP, _B_SET, _B_LIST = 11, 12, 13, 14, 15
# Smallest binary encoding per type, to check a count against the limit.
_B_MIN = {**_B_FIXED, _B_STRING: 4, _B_STRUCT: 1, _B_MAP: 6, _B_SET: 5, _B_LIST: 5}

# Compact types.
_C_TRUE, _C_FALSE, _C_BYTE, _C_I16, _C_I32, _C_I64, _C_DOUBLE, _C_BINARY, _C_LIST, \
    _C_SET, _C_MAP, _C_STRUCT = range(1, 13)


class ScanError(DecodeError):
    """The bytes of an unframed message are not a well-formed message."""


class _Short(Exception):
    """Internal: the bytes for the next step have not all arrived."""


_SHORT = _Short()


class Scanner:
    """Finds the end of one unframed message of ``protocol`` ("binary" or "compact"),
    ``limit`` bytes at most. Feed it the message's buffer as it grows."""

    __slots__ = ("compact", "limit", "pos", "stack", "name", "seqid")

    def __init__(self, protocol: str, limit: int) -> None:
        if protocol not in ("binary", "compact"):
            raise ValueError(f"protocol must be 'binary' or 'compact', not {protocol!r}")
        self.compact = protocol == "compact"
        self.limit = limit
        #: Offset of the first byte not yet scanned (the start of the unfinished step).
        self.pos = 0
        self.stack: list[list[Any]] = [[_HEADER]]
        #: The message's name and seqid, once its header was scanned (for error replies).
        self.name = ""
        self.seqid = 0

    def feed(self, buf: Any, have: int) -> int | None:
        """Scan ``buf[:have]`` (the message's bytes so far, from its first byte; bytes
        scanned by earlier calls must be unchanged). Returns the message's length once
        its end has arrived (bytes past it belong to the next message), else None.

        Raises:
            ScanError: the bytes are not a well-formed message.
            FrameSizeError: the message cannot end within ``limit`` bytes.
        """
        stack = self.stack
        try:
            while stack:
                step = stack[-1]
                op = step[0]
                if op == _SKIP:
                    left = have - self.pos
                    if left < step[1]:
                        step[1] -= left
                        self.pos = have
                        raise _SHORT
                    self.pos += step[1]
                    stack.pop()
                elif op == _STRUCT:
                    self._field(buf, have, step)
                elif op == _ITEMS:
                    if step[1] == 0:
                        stack.pop()
                        continue
                    self._item(buf, have, step)
                elif op == _VALUE:
                    stack.pop()
                    self._value(buf, have, step[1], step[2], step)
                else:
                    self._header(buf, have)
        except _Short:
            if self.pos >= self.limit or have >= self.limit + 1:
                self._too_large(f"the message is still unfinished after {self.limit} "
                                f"bytes")
            return None
        if self.pos > self.limit:
            self._too_large(f"the message is {self.pos} bytes")
        return self.pos

    # ----------------------------------------------------------------- steps

    def _too_large(self, why: str) -> None:
        raise FrameSizeError(max(self.pos, self.limit + 1), self.limit,
                             f"the max frame size (the limit on unframed messages too; "
                             f"{why})")

    def _room(self, n: int, what: str) -> None:
        """``n`` more bytes after ``pos`` must fit the limit."""
        if n < 0:
            raise ScanError(f"{what}: negative length {n} at offset {self.pos}")
        if self.pos + n > self.limit:
            self._too_large(f"{what} of {n} bytes at offset {self.pos} cannot end "
                            f"within it")

    def _push(self, step: list[Any]) -> None:
        if len(self.stack) > MAX_DEPTH:
            raise ScanError(f"nesting deeper than {MAX_DEPTH} levels")
        self.stack.append(step)

    def _varint(self, buf: Any, pos: int, have: int, max_bytes: int) -> tuple[int, int]:
        result = shift = 0
        start = pos
        while True:
            if pos >= have:
                if pos - start >= max_bytes:
                    break
                raise _SHORT
            byte = buf[pos]
            pos += 1
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                return result, pos
            shift += 7
            if pos - start >= max_bytes:
                break
        raise ScanError(f"varint at offset {start} longer than {max_bytes} bytes")

    def _header(self, buf: Any, have: int) -> None:
        pos = 0
        if self.compact:
            if have < 2:
                raise _SHORT
            if buf[0] != 0x82 or buf[1] & 0x1F != 1:
                raise ScanError(f"not a TCompactProtocol message header "
                                f"({bytes(buf[:2]).hex()})")
            seqid, pos = self._varint(buf, 2, have, 5)
            size, pos = self._varint(buf, pos, have, 5)
        else:
            if have < 8:
                raise _SHORT
            word = int.from_bytes(buf[0:4], "big")
            if word & 0xFFFF0000 != 0x80010000:
                raise ScanError(f"not a strict TBinaryProtocol message header "
                                f"(0x{word:08x})")
            size = int.from_bytes(buf[4:8], "big", signed=True)
            pos = 8
            seqid = 0
            if size < 0:
                raise ScanError(f"negative message name length {size}")
        self.pos = pos
        self._room(size + (0 if self.compact else 4), "message name")
        end = pos + size + (0 if self.compact else 4)
        if end > have:
            raise _SHORT
        if not self.compact:
            seqid = int.from_bytes(buf[end - 4:end], "big", signed=True)
        elif seqid >= 1 << 31:
            seqid -= 1 << 32
        self.name = bytes(buf[pos:pos + size]).decode("utf-8", "replace")
        self.seqid = seqid
        self.pos = end
        self.stack[-1] = [_STRUCT, 0]

    def _field(self, buf: Any, have: int, step: list[Any]) -> None:
        pos = self.pos
        if pos >= have:
            raise _SHORT
        head = buf[pos]
        if head == 0:
            self.pos = pos + 1
            self.stack.pop()
            return
        if self.compact:
            ctype = head & 0x0F
            if head >> 4:
                pos += 1
            else:
                # A zigzag i16, in at most 5 bytes as the decoder reads it.
                raw, pos = self._varint(buf, pos + 1, have, 5)
                if raw >> 16:
                    raise ScanError(f"field id varint {raw} too large for an i16")
            self.pos = pos
            if ctype in (_C_TRUE, _C_FALSE):
                return                                  # the value is in the type
            self._push([_VALUE, ctype, 0])
        else:
            if pos + 3 > have:
                raise _SHORT
            self.pos = pos + 3
            self._push([_VALUE, head, 0])

    def _item(self, buf: Any, have: int, step: list[Any]) -> None:
        # step = [_ITEMS, elements left, type, second type (maps) or None, next is key]
        ktype, vtype = step[2], step[3]
        if vtype is None:
            etype = ktype
            step[1] -= 1
        else:
            etype = ktype if step[4] else vtype
            if not step[4]:
                step[1] -= 1
            step[4] = not step[4]
        self._value(buf, have, etype, 1, step, element=True)

    def _value(self, buf: Any, have: int, wtype: int, in_container: int, step: list[Any],
               element: bool = False) -> None:
        """Scan one value of wire type ``wtype`` at ``pos`` (or push the steps for it).
        When its first token has not arrived, restore ``step`` so the next feed retries."""
        try:
            if self.compact:
                self._compact_value(buf, have, wtype, element)
            else:
                self._binary_value(buf, have, wtype)
        except _Short:
            if element:                      # undo the count/key bookkeeping of _item
                if step[3] is None:
                    step[1] += 1
                else:
                    step[4] = not step[4]
                    if not step[4]:
                        step[1] += 1
            elif step[0] == _VALUE:
                self.stack.append(step)
            raise

    def _binary_value(self, buf: Any, have: int, wtype: int) -> None:
        pos = self.pos
        size = _B_FIXED.get(wtype)
        if size is not None:
            self._room(size, "value")
            if pos + size > have:
                raise _SHORT
            self.pos = pos + size
            return
        if wtype == _B_STRING:
            if pos + 4 > have:
                raise _SHORT
            n = int.from_bytes(buf[pos:pos + 4], "big", signed=True)
            self.pos = pos + 4
            self._room(n, "string")
            if n:
                self.stack.append([_SKIP, n])
            return
        if wtype == _B_STRUCT:
            self._push([_STRUCT, 0])
            return
        if wtype == _B_MAP:
            if pos + 6 > have:
                raise _SHORT
            ktype, vtype = buf[pos], buf[pos + 1]
            count = int.from_bytes(buf[pos + 2:pos + 6], "big", signed=True)
            self.pos = pos + 6
            self._container(count, ktype, vtype, _B_MIN.get(ktype, 1) + _B_MIN.get(vtype, 1))
            return
        if wtype in (_B_LIST, _B_SET):
            if pos + 5 > have:
                raise _SHORT
            etype = buf[pos]
            count = int.from_bytes(buf[pos + 1:pos + 5], "big", signed=True)
            self.pos = pos + 5
            fixed = _B_FIXED.get(etype)
            if fixed is not None:           # a run of fixed-size values: one skip
                self._room(count * fixed if count >= 0 else count, "list")
                if count:
                    self.stack.append([_SKIP, count * fixed])
                return
            self._container(count, etype, None, _B_MIN.get(etype, 1))
            return
        raise ScanError(f"unknown field type {wtype} at offset {pos}")

    def _compact_value(self, buf: Any, have: int, ctype: int, element: bool) -> None:
        pos = self.pos
        if ctype in (_C_TRUE, _C_FALSE, _C_BYTE):
            self._room(1, "value")
            if pos >= have:
                raise _SHORT
            self.pos = pos + 1
            return
        if ctype in (_C_I16, _C_I32, _C_I64):
            # Up to 10 bytes whatever the width, as the decoder skips an unknown field:
            # the scan must never refuse what the decoder would read (it checks ranges).
            self.pos = self._varint(buf, pos, have, 10)[1]
            return
        if ctype == _C_DOUBLE:
            self._room(8, "double")
            if pos + 8 > have:
                raise _SHORT
            self.pos = pos + 8
            return
        if ctype == _C_BINARY:
            n, pos = self._varint(buf, pos, have, 5)
            self.pos = pos
            self._room(n, "string")
            if n:
                self.stack.append([_SKIP, n])
            return
        if ctype == _C_STRUCT:
            self._push([_STRUCT, 0])
            return
        if ctype in (_C_LIST, _C_SET):
            if pos >= have:
                raise _SHORT
            head = buf[pos]
            count = head >> 4
            pos += 1
            if count == 15:
                count, pos = self._varint(buf, pos, have, 5)
            self.pos = pos
            etype = head & 0x0F
            self._container(count, etype, None, 8 if etype == _C_DOUBLE else 1)
            return
        if ctype == _C_MAP:
            count, pos = self._varint(buf, pos, have, 5)
            if count:
                if pos >= have:
                    raise _SHORT
                types = buf[pos]
                pos += 1
                self.pos = pos
                kt, vt = types >> 4, types & 0x0F
                self._container(count, kt, vt, (8 if kt == _C_DOUBLE else 1)
                                + (8 if vt == _C_DOUBLE else 1))
            else:
                self.pos = pos
            return
        raise ScanError(f"unknown compact type {ctype} at offset {pos}")

    def _container(self, count: int, ktype: int, vtype: int | None, per_item: int) -> None:
        if count < 0:
            raise ScanError(f"container at offset {self.pos} declares a negative size "
                            f"{count}")
        self._room(count * per_item, "container")
        if count:
            self._push([_ITEMS, count, ktype, vtype, True])
