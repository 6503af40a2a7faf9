"""The socket-free steps of one call, as a client of any thriftpy2 service makes it:
bind the arguments to the IDL's names, encode the CALL frame's payload, check a reply
frame's length before reading it, decode the reply (against the same decoded-size
budget a server applies to requests: a reply frame cannot become many times its size
in memory), and read a server's frame-size refusal. (The back-off delays between
connection attempts are :func:`nimbus_thrift.rpc.backoff.backoff_delays`.)

No sockets here: the steps are tested byte by byte, and a client brings its own
transport (:mod:`nimbus_thrift.client` is one). This module may import only from
:mod:`nimbus_thrift.rpc` and third-party libraries.
"""

from __future__ import annotations

import re
from typing import Any

from thriftpy2.thrift import TApplicationException

from . import binary
from .decoded import DECODED_SIZE_FLOOR, decoded_size_limit
from ..errors import DecodeBudgetError, RpcError
from ..options import DEFAULT_DECODED_SIZE_FACTOR


def bind_args(service: Any, method: str, args: tuple[Any, ...],
              kwargs: dict[str, Any]) -> Any:
    """The ``<method>_args`` struct of ``service`` holding ``args`` (in IDL order) and
    ``kwargs`` (by IDL name). Every argument must be given; None sends it unset.

    Raises:
        AttributeError: the service has no such method.
        TypeError: too many, unknown, repeated or missing arguments.
    """
    if method not in service.thrift_services:
        raise AttributeError(f"the {service.__name__} service has no method {method!r}")
    args_cls = getattr(service, method + "_args")
    # thrift_spec keeps the IDL's declaration order (thriftpy2 builds it in order).
    names = [entry[1] for entry in args_cls.thrift_spec.values()]
    if len(args) > len(names):
        raise TypeError(f"{method}() takes {len(names)} arguments ({len(args)} given)")
    values = dict(zip(names, args))
    for key, value in kwargs.items():
        if key not in names:
            raise TypeError(f"{method}() got an unexpected keyword argument {key!r}")
        if key in values:
            raise TypeError(f"{method}() got multiple values for argument {key!r}")
        values[key] = value
    missing = [name for name in names if name not in values]
    if missing:
        raise TypeError(f"{method}() missing argument(s): {', '.join(missing)}")
    return args_cls(**values)


def encode_call(method: str, seqid: int, args: Any) -> bytes:
    """The payload of one CALL frame (strict header + args struct), without the
    4-byte length prefix.

    Raises:
        TypeError: an argument does not match its IDL type (thriftpy2's message).
    """
    try:
        return binary.encode_message(method, binary.CALL, seqid, args)
    except Exception as exc:  # thriftpy2 raises TDecodeException, struct.error, ...
        raise TypeError(f"arguments of {method} do not match the IDL: {exc}") from None


class UnreadableReply(Exception):
    """A reply payload that is not a reply to the call; the text says why."""


def check_reply_length(prefix: bytes | bytearray, max_frame_size: int) -> int:
    """The length in a reply frame's 4-byte prefix, checked before any buffer is made.

    Raises:
        UnreadableReply: not a positive length within ``max_frame_size``.
    """
    size = int.from_bytes(prefix, "big", signed=True)
    if 0 < size <= max_frame_size:
        return size
    what = (f"a reply frame of {size} bytes exceeds max_frame_size {max_frame_size}"
            if size > 0 else f"a reply frame length of {size}")
    if all(32 <= b < 127 for b in prefix):
        # Text where a length should be: something other than framed Thrift answered
        # (an HTTP server, for instance, replies "HTTP/1.1 400 ...").
        what += f" (the reply starts with {prefix.decode('ascii')!r}: not framed Thrift)"
    raise UnreadableReply(what)


def decode_reply(service: Any, method: str, seqid: int, payload: bytes | bytearray,
                 decoded_size_factor: float = DEFAULT_DECODED_SIZE_FACTOR) -> Any:
    """Decode the reply payload to a call of ``method`` with ``seqid``, its values
    charged against the decoded-size budget of its size (``decoded_size_factor`` times
    its bytes, at least :data:`~.decoded.DECODED_SIZE_FLOOR`; see :mod:`.decoded`).

    Returns the result (None for a void method).

    Raises:
        the IDL exception the server declared (e.g. ``NotAliveException``), as is.
        TApplicationException: the server answered with one (EXCEPTION message).
        UnreadableReply: undecodable, over the decoded-size budget, not a reply, or a
            reply to another call.
    """
    budget = decoded_size_limit(len(payload), decoded_size_factor)
    try:
        header = binary.read_message_header(payload)
        if header.type == binary.EXCEPTION:
            # Not matched against method/seqid: a server refusing an oversized frame
            # may answer before it has read the call's header (name "", seqid 0), and
            # one call at a time per connection means it can only be about ours.
            app_error, _ = binary.decode_struct(TApplicationException, payload, header.end,
                                                budget=budget)
            raise app_error
        if header.type != binary.REPLY:
            raise UnreadableReply(f"message type {header.type} where a REPLY (2) was "
                                  f"expected")
        if header.name != method or header.seqid != seqid:
            raise UnreadableReply(f"it answers {header.name or '?'} #{header.seqid}, not "
                                  f"{method} #{seqid}")
        result_cls = getattr(service, method + "_result")
        result, _ = binary.decode_struct(result_cls, payload, header.end, budget=budget)
    except DecodeBudgetError as exc:
        raise UnreadableReply(str(DecodeBudgetError(
            exc.limit, f"the client's limit: decoded_size_factor {decoded_size_factor} "
            f"times the reply's {len(payload):,} bytes, and at least "
            f"{DECODED_SIZE_FLOOR:,}"))) from None
    except RpcError as exc:
        raise UnreadableReply(str(exc)) from None
    spec = result_cls.thrift_spec
    if 0 in spec and result.success is not None:
        return result.success
    for entry in spec.values():
        error = getattr(result, entry[1])
        if entry[1] != "success" and error is not None:
            raise error
    if 0 in spec:
        raise UnreadableReply("it carries neither a result nor a declared exception")
    return None


#: Numbers in a refusal message ("16384000", "16,384,000").
_NUMBER = re.compile(r"\d(?:[\d,_]*\d)?")


def parse_frame_refusal(message: str | None) -> tuple[int, int] | None:
    """``(size, limit)`` from a server's PROTOCOL_ERROR message about an oversized
    frame, or None when the message is about something else.

    This server says "frame of N bytes refused: the max frame size is M bytes" (or
    "... the server's whole read-buffer budget (max_read_buffer_bytes) is M bytes");
    other Thrift servers say e.g. "Frame size (N) larger than max length (M)!". So:
    the message mentions a frame, its first number is the size, its last the limit,
    and the size is over the limit.
    """
    if not message or "frame" not in message.lower():
        return None
    numbers = [int(n.replace(",", "").replace("_", "")) for n in _NUMBER.findall(message)]
    if len(numbers) < 2 or numbers[0] <= numbers[-1]:
        return None
    return numbers[0], numbers[-1]
