"""The forms a Thrift client's bytes take on the wire, how a connection's form is told
from its first bytes, and the request object a connection hands over when its form is
not framed binary.

    first 4 bytes           then                       form
    ----------------------  -------------------------  -----------------------------
    0x80 0x01 ....          (a strict binary header)   unframed binary
    0x82 0b???00001 ..      (compact id, version 1)    unframed compact
    positive length         0x0F 0xFF (THeader magic)  header (binary or compact inside)
    positive length         0x82, version 1            framed compact
    positive length         anything else              framed binary (strict or old)

The words cannot be confused: a frame length is positive (at most 0x7FFFFFFF), while
both unframed headers start with a byte of 0x80 or more. An *unframed* old-style
(non-strict) binary message starts with its name length, a positive word like a frame
length, so it is read as a frame; only framed old-style headers are accepted.

The form is fixed by a connection's first message (connection.py) and every reply uses
it. Framed binary, by far the common case, travels as a plain ``bytes``/``bytearray``
frame, exactly as before this module existed; every other form's requests travel as a
:class:`Message`, which the dispatcher reads by its form.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from . import binary, compact, header
from ..options import PROTOCOLS as PROTOCOLS
from ..options import TRANSPORTS as TRANSPORTS

COMPACT_ID = 0x82


class Form(NamedTuple):
    """A connection's form. ``protocol`` is "" for THeader, whose frames name theirs."""

    transport: str
    protocol: str

    def __str__(self) -> str:
        if self.transport == "header":
            return "THeader"
        return f"{self.transport} {self.protocol}"


FRAMED_BINARY = Form("framed", "binary")
FRAMED_COMPACT = Form("framed", "compact")
UNFRAMED_BINARY = Form("unframed", "binary")
UNFRAMED_COMPACT = Form("unframed", "compact")
HEADER = Form("header", "")


class Message:
    """One complete request whose form is not framed binary.

    ``data``: the message (unframed), the frame's body (framed compact), or the whole
    THeader frame body (header). ``error``: set instead when an unframed message was
    refused while it was scanned; ``name`` and ``seqid`` then say what the scan saw of
    its header, for the error reply.
    """

    __slots__ = ("data", "form", "error", "name", "seqid")

    def __init__(self, data: bytes | bytearray, form: Form,
                 error: Exception | None = None, name: str = "", seqid: int = 0) -> None:
        self.data = data
        self.form = form
        self.error = error
        self.name = name
        self.seqid = seqid

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: slice) -> bytes | bytearray:
        # Reads like its message bytes for code that peeks at a frame's first bytes.
        return self.data[index]

    def __repr__(self) -> str:
        return f"<Message {self.form} {len(self.data)} bytes>"


def unframed_form(first4: bytes) -> Form | None:
    """The unframed form whose message starts with these 4 bytes, or None."""
    if first4[0] == 0x80 and first4[1] == 0x01:
        return UNFRAMED_BINARY
    if first4[0] == COMPACT_ID and first4[1] & 0x1F == 1:
        return UNFRAMED_COMPACT
    return None


def framed_form(body: bytes | bytearray | memoryview) -> Form:
    """The form of a frame whose body starts with ``body`` (framed binary unless it
    says THeader or compact; a frame that is none of them fails as binary, as before)."""
    if len(body) >= 2:
        if body[0] == 0x0F and body[1] == 0xFF:
            return HEADER
        if body[0] == COMPACT_ID and body[1] & 0x1F == 1:
            return FRAMED_COMPACT
    return FRAMED_BINARY


_LENGTH = struct.Struct(">I")


def wrap(form: Form, message: bytes, echo: header.HeaderFrame | None = None) -> bytes:
    """``message`` (a whole encoded message) as ``form`` sends it: behind a length,
    bare, or in a THeader frame echoing the request's ``echo`` (flags, sequence
    number, protocol, transforms)."""
    if form.transport == "framed":
        return _LENGTH.pack(len(message)) + message
    if form.transport == "unframed":
        return message
    if echo is None:
        return header.encode(message, header.PROTOCOL_BINARY, 0, 0)
    return header.encode(message, echo.protocol_id, echo.flags, echo.seqid, echo.transforms)


def error_reply(form: Form, name: str, seqid: int, text: str, code: int,
                echo: header.HeaderFrame | None = None) -> bytes:
    """A TApplicationException(``code``, ``text``) reply to ``name``/``seqid`` in
    ``form`` (THeader: in the protocol ``echo`` names, binary without one)."""
    protocol = form.protocol or (header.PROTOCOLS[echo.protocol_id] if echo is not None
                                 else "binary")
    encode = compact.encode_application_exception if protocol == "compact" \
        else binary.encode_application_exception
    return wrap(form, encode(name, seqid, text, code), echo)


# Prefixes of protocols people point at Thrift ports by mistake, for a precise log line.
_HTTP_METHODS = (b"GET ", b"POST", b"PUT ", b"HEAD", b"DELE", b"OPTI", b"PATC", b"CONN",
                 b"TRAC", b"PRI ")


def classify_prefix(first4: bytes) -> str | None:
    """Name the protocol whose first four bytes these are, if it is not Thrift in a
    form this server reads."""
    if first4 in _HTTP_METHODS:
        return "an HTTP request (this port speaks Thrift, not HTTP)"
    if first4[0] == 0x16 and first4[1] == 0x03:
        return "a TLS handshake (this port speaks plain TCP)"
    word = int.from_bytes(first4, "big", signed=True)
    if word < 0 and word & 0xFFFF0000 == 0x80010000:
        return ("an unframed TBinaryProtocol message on a connection that started "
                "framed (a connection keeps the form of its first message)")
    if first4[0] == 0x82 and first4[1] & 0x1F == 1:
        return ("an unframed TCompactProtocol message on a connection that started "
                "framed (a connection keeps the form of its first message)")
    if first4[0] == 0x01 and first4[1:4] == b"\x00\x00\x00":
        return "a SASL handshake (this server does not use SASL)"
    return None
