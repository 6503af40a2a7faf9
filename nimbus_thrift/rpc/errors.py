"""The RPC layer's errors: one base, each error carrying the offending value and the
limit, and knowing how it reaches the client.

Two families:

* :class:`WireError` -- the bytes on a connection are not (acceptable) framed
  TBinaryProtocol. The connection cannot continue; some of these still get a
  ``TApplicationException`` first, when the client could read one.
* :class:`RequestError` -- one request failed; the frame boundary is intact, so the
  client gets a ``TApplicationException`` of :attr:`code` and the connection carries on.
"""

from __future__ import annotations

import enum


class AppErrorCode(enum.IntEnum):
    """``TApplicationException.type`` values, as every Thrift library defines them."""

    UNKNOWN = 0
    UNKNOWN_METHOD = 1
    INVALID_MESSAGE_TYPE = 2
    WRONG_METHOD_NAME = 3
    BAD_SEQUENCE_ID = 4
    MISSING_RESULT = 5
    INTERNAL_ERROR = 6
    PROTOCOL_ERROR = 7
    INVALID_TRANSFORM = 8
    INVALID_PROTOCOL = 9
    UNSUPPORTED_CLIENT_TYPE = 10


class RpcError(Exception):
    """Base of every error the RPC layer raises."""


# --------------------------------------------------------------------------- wire


class WireError(RpcError):
    """The connection's byte stream cannot be read as framed TBinaryProtocol."""


class FrameSizeError(WireError):
    """A declared frame length the server refuses before allocating anything."""

    def __init__(self, size: int, limit: int, what: str) -> None:
        self.size = size
        self.limit = limit
        self.what = what
        super().__init__(f"frame of {size} bytes refused: {what} is {limit} bytes")


class PeerShareError(FrameSizeError):
    """A frame that would take its client address past its share of the read buffers
    (``max_read_buffer_bytes_per_peer``), counting what its other frames declared."""

    def __init__(self, size: int, limit: int, in_use: int) -> None:
        self.size = size
        self.limit = limit
        self.in_use = in_use
        self.what = "max_read_buffer_bytes_per_peer"
        WireError.__init__(self, f"frame of {size} bytes refused: this client address's "
                                 f"frames in progress already declare {in_use} bytes, and "
                                 f"its share of the read buffers "
                                 f"(max_read_buffer_bytes_per_peer) is {limit} bytes")


class NotThriftError(WireError):
    """The first bytes look like another protocol (HTTP, TLS, SASL, ...)."""

    def __init__(self, kind: str, first_bytes: bytes) -> None:
        self.kind = kind
        self.first_bytes = first_bytes
        super().__init__(f"not Thrift: {kind} (first bytes {first_bytes.hex()})")


class BadVersionError(WireError):
    """A frame whose message header is not TBinaryProtocol (or is old-style while the
    server reads strictly)."""

    def __init__(self, word: int, reason: str) -> None:
        self.word = word
        super().__init__(f"bad message header 0x{word & 0xFFFFFFFF:08x}: {reason}")


# --------------------------------------------------------------------------- request


class RequestError(RpcError):
    """One request failed in a way the client hears about as a TApplicationException."""

    code: AppErrorCode = AppErrorCode.UNKNOWN

    def __init__(self, message: str, code: AppErrorCode | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code

    @property
    def message(self) -> str:
        return str(self)


class DecodeError(RequestError):
    """Bytes inside a frame do not decode as the declared struct."""

    code = AppErrorCode.PROTOCOL_ERROR


class DecodeBudgetError(DecodeError):
    """The values in a frame would take more memory once decoded than its decoded-size
    budget (see :mod:`.decoded`) allows. ``limit`` is that budget in bytes; the
    dispatcher (or the client) adds what it was made of."""

    def __init__(self, limit: int, detail: str = "") -> None:
        self.limit = limit
        super().__init__(f"decoded-size limit exceeded: the values in this frame would "
                         f"take more than {limit:,} bytes of memory once decoded"
                         + (f" ({detail})" if detail else ""))


class UnknownMethodError(RequestError):
    code = AppErrorCode.UNKNOWN_METHOD


class InvalidMessageTypeError(RequestError):
    code = AppErrorCode.INVALID_MESSAGE_TYPE


class OverloadedError(RequestError):
    """The worker queue is full."""

    code = AppErrorCode.INTERNAL_ERROR

    def __init__(self, depth: int, limit: int) -> None:
        self.depth = depth
        self.limit = limit
        super().__init__(f"server overloaded: {depth} requests already queued "
                         f"(limit {limit}); retry later")
