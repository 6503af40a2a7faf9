"""Decode, then call: one frame in, one reply out, every failure mapped to the right
``TApplicationException`` at the step where it happened.

    frame ──► message header ──► method lookup ──► args decode ──► handler ──► encode
                  │                    │                 │             │          │
             BadVersion:          UNKNOWN_METHOD    PROTOCOL_ERROR   declared: REPLY
             close conn.          (INVALID_MESSAGE_TYPE (also over   undeclared:
                                   for a non-call)  the decoded-size INTERNAL_ERROR
                                                    budget)

The args are decoded against the frame's decoded-size budget (rpc/decoded.py): the
frame's bytes times ``decoded_size_factor``, at least 1 MiB.

What a client hears of a handler's crash is the exception's type and a short reason
with no absolute path (see :func:`public_reason`); the traceback goes to the log, with
the request's peer, method and seqid.

Runs on worker threads; knows nothing of sockets or the selector.
"""

from __future__ import annotations

import enum
import operator
import re
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable

import structlog
from thriftpy2.thrift import TApplicationException

from . import binary
from .context import REQUEST
from .decoded import DECODED_SIZE_FLOOR
from .errors import (AppErrorCode, DecodeBudgetError, DecodeError, InvalidMessageTypeError,
                     RequestError, UnknownMethodError, WireError)
from .options import DEFAULT_DECODED_SIZE_FACTOR

log = structlog.get_logger(__name__)

#: A reply: one whole frame (the 4-byte length, then the message) as one bytes object,
#: or as a list of buffers to send back to back (large string/binary results, sent
#: without joining them).
Reply = bytes | list[bytes]

#: Multiplexed names are "Service:method", split at the first separator (as Java does).
SEPARATOR = ":"

#: Characters of a crash's reason sent to the client: a sentence's worth. The whole
#: text is in the log; a client needs to know what kind of failure it was, and a long
#: message (an exception quoting a whole value) would only repeat what it sent.
MAX_REASON_CHARS = 200

#: An absolute path: "/" or "X:\" at the start of the text or after a space, quote,
#: bracket, "=" or ","; then everything up to a space, quote or bracket.
_ABSOLUTE_PATH = re.compile(r"""(?:^|(?<=[\s'"(\[{<=,]))"""
                            r"""(?:/|[A-Za-z]:\\)[^\s'"()\[\]{}<>,;]*""")
_TRACEBACK = "Traceback (most recent call last)"


def public_reason(exc: BaseException) -> str:
    """``"Type: reason"`` for a client: the exception's first words, each absolute path
    replaced by its last component, one line, at most :data:`MAX_REASON_CHARS`.

    Why the last component: it is what the client may recognise (its topology's id, its
    file's name), while the rest is the daemon's layout (home directory, user name,
    data directory), which is none of a client's business and helps an attacker.
    """
    text = str(exc).split(_TRACEBACK, 1)[0]           # an exception quoting a traceback
    text = _ABSOLUTE_PATH.sub(_last_component, text)
    text = " ".join(text.split())                      # one line
    if len(text) > MAX_REASON_CHARS:
        text = text[:MAX_REASON_CHARS - 3].rstrip() + "..."
    name = type(exc).__name__
    return f"{name}: {text}" if text else name


def _last_component(match: re.Match[str]) -> str:
    path = match.group(0).rstrip("/\\")
    last = re.split(r"[/\\]", path)[-1]
    return last or "/"


class Status(enum.IntEnum):
    """What became of one request, for metrics and for the connection."""

    OK = 0          # a REPLY (or nothing, for oneway)
    DECLARED = 1    # a REPLY carrying an exception the IDL declares
    FAILED = 2      # a TApplicationException went back; the connection carries on
    CLOSE = 3       # the bytes were not our protocol; the connection must close


@dataclass(frozen=True)
class Method:
    """One callable method, resolved once at server construction."""

    service: str
    name: str
    args_cls: type
    result_cls: type
    oneway: bool
    arg_names: tuple[str, ...]
    #: (result field name, exception class) for each `throws` clause, in id order.
    declared: tuple[tuple[str, type], ...]
    func: Callable[..., Any] | None
    #: The result is a string or binary that may be large enough for the scatter path.
    large_result: bool = False
    #: binary.struct_reader(args_cls), resolved once.
    read_args: binary.StructReader | None = None
    #: The handler's arguments from a decoded args struct: the value itself for one
    #: argument (``unpack_args`` False), else a tuple.
    get_args: Callable[[Any], Any] = tuple
    unpack_args: bool = True


def _methods_of(service: ModuleType | type, handler: object, label: str
                ) -> dict[str, Method]:
    methods = {}
    missing = []
    # union-attr: thrift_services is set on the services thriftpy2 generates.
    for name in service.thrift_services:  # type: ignore[union-attr]
        args_cls = getattr(service, name + "_args")
        result_cls = getattr(service, name + "_result")
        declared = tuple((entry[1], entry[2]) for fid, entry in
                         sorted(result_cls.thrift_spec.items()) if fid != 0)
        func = getattr(handler, name, None)
        if not callable(func):
            missing.append(name)
            func = None
        success = result_cls.thrift_spec.get(0)
        arg_names = tuple(entry[1] for _, entry in sorted(args_cls.thrift_spec.items()))
        methods[name] = Method(
            service=label, name=name, args_cls=args_cls, result_cls=result_cls,
            oneway=bool(getattr(result_cls, "oneway", False)),
            arg_names=arg_names, declared=declared, func=func,
            large_result=success is not None and success[0] in binary.STRING_TYPES,
            read_args=binary.struct_reader(args_cls),
            get_args=operator.attrgetter(*arg_names) if arg_names else _no_args,
            unpack_args=len(arg_names) != 1)
    if missing:
        log.warning("handler_incomplete", service=label, handler=type(handler).__name__,
                    missing=missing,
                    effect="calls to these methods get UNKNOWN_METHOD")
    return methods


def _no_args(args: Any) -> tuple[()]:
    return ()


class Dispatcher:
    """Maps method names to handlers for one default service and/or several
    multiplexed services.

    Args:
        default: ``(service, handler)`` answering unprefixed names, or None.
        services: ``{"Name": (service, handler)}`` answering ``"Name:method"``.
        strict_read: refuse old non-strict message headers.
        decoded_size_factor: a request's decoded-size budget, per byte of its frame
            (at least :data:`~.decoded.DECODED_SIZE_FLOOR` in all).
    """

    def __init__(self, default: tuple[Any, object] | None,
                 services: dict[str, tuple[Any, object]] | None = None,
                 strict_read: bool = False,
                 decoded_size_factor: float = DEFAULT_DECODED_SIZE_FACTOR) -> None:
        self.strict_read = strict_read
        if isinstance(decoded_size_factor, bool) or not 1 <= decoded_size_factor < float("inf"):
            raise ValueError(f"decoded_size_factor must be a number of at least 1, "
                             f"not {decoded_size_factor!r}")
        self.decoded_size_factor = decoded_size_factor
        #: Frames up to this size get the floor as their budget (one comparison on the
        #: hot path: most requests are small).
        self._floor_frames = int(DECODED_SIZE_FLOOR // decoded_size_factor)
        self.default: dict[str, Method] | None = None
        if default is not None:
            service, handler = default
            self.default = _methods_of(service, handler, getattr(service, "__name__", "default"))
        self.services = {label: _methods_of(service, handler, label)
                         for label, (service, handler) in (services or {}).items()}
        for label in self.services:
            if not label or SEPARATOR in label:
                raise ValueError(f"multiplexed service name {label!r} must be non-empty "
                                 f"and contain no {SEPARATOR!r}")
        if self.default is None and not self.services:
            raise ValueError("nothing to serve: give a service and handler, or services=")
        #: Methods a CALL reaches by its bare name with nothing to check first (the
        #: lookup's shortcut): the default service's two-way methods that have a
        #: handler (a name with the separator is never among them).
        self._direct = {name: method for name, method in (self.default or {}).items()
                        if method.func is not None and not method.oneway}

    # ------------------------------------------------------------------ lookup

    def _lookup(self, name: str) -> tuple[str, Method]:
        """Return (reply name, method) for a message name, or raise UnknownMethodError."""
        if SEPARATOR in name and self.services:
            label, _, bare = name.partition(SEPARATOR)
            table = self.services.get(label)
            if table is None:
                raise UnknownMethodError(
                    f"unknown service {label!r} in {name!r}; this server multiplexes "
                    f"{', '.join(sorted(self.services))}")
            method = table.get(bare)
            if method is None:
                raise UnknownMethodError(f"Invalid method name: {name!r}")
            return bare, method
        if self.default is None:
            raise UnknownMethodError(
                f"Invalid method name: {name!r}; this server has no default service, "
                f"call it as Service:method with one of {', '.join(sorted(self.services))}")
        method = self.default.get(name)
        if method is None:
            raise UnknownMethodError(f"Invalid method name: {name!r}")
        return name, method

    # ------------------------------------------------------------------ dispatch

    def dispatch(self, frame: bytes | bytearray, peer: str,
                 principal: str | None = None) -> tuple[Reply | None, Status]:
        """Process one frame's payload from ``peer`` (who is ``principal``, when the
        transport says); return (reply frame or None, status). The reply is a whole
        frame (see :data:`Reply`).

        Never raises: every failure becomes a reply, a log line, or Status.CLOSE.
        """
        try:
            header = binary.read_message_header(frame, self.strict_read)
        except WireError as exc:
            log.warning("not_thrift_binary", peer=peer, error=str(exc),
                        effect="connection closed")
            return None, Status.CLOSE
        except DecodeError as exc:
            log.warning("bad_message_header", peer=peer, error=str(exc),
                        effect="connection closed")
            return None, Status.CLOSE
        name, mtype, seqid = header.name, header.type, header.seqid
        token = REQUEST.set((peer, name, seqid, principal))
        try:
            return self._dispatch(frame, header, name, mtype, seqid)
        finally:
            REQUEST.reset(token)

    def _dispatch(self, frame: bytes | bytearray, header: binary.MessageHeader, name: str,
                  mtype: int, seqid: int) -> tuple[Reply | None, Status]:
        # The common case skips the checks: a CALL of a method in _direct.
        method = self._direct.get(name) if mtype == binary.CALL else None
        reply_name = name
        try:
            if method is None:
                # Replies carry the bare method name, errors included: Node's client
                # finds the waiting call by it, and Java's TMultiplexedProcessor replies
                # the same way.
                if SEPARATOR in name and self.services:
                    reply_name = name.partition(SEPARATOR)[2]
                if mtype != binary.CALL and mtype != binary.ONEWAY:
                    raise InvalidMessageTypeError(
                        f"message type {mtype} is not CALL (1) or ONEWAY (4)")
                reply_name, method = self._lookup(name)
                if method.func is None:
                    raise UnknownMethodError(
                        f"method {name!r} is declared in the IDL but the handler does "
                        f"not implement it")
            assert method.read_args is not None
            size = len(frame)
            # decoded.decoded_size_limit, inlined.
            budget = DECODED_SIZE_FLOOR if size <= self._floor_frames \
                else max(DECODED_SIZE_FLOOR, int(size * self.decoded_size_factor))
            args, _ = method.read_args(frame, header.end, size, budget)
        except DecodeBudgetError as exc:
            exc = DecodeBudgetError(
                exc.limit, f"decoded_size_factor {self.decoded_size_factor} times this "
                f"frame's {len(frame):,} bytes, and at least {DECODED_SIZE_FLOOR:,}")
            return self._refuse(exc, reply_name, mtype, seqid, method)
        except RequestError as exc:
            return self._refuse(exc, reply_name, mtype, seqid, method)
        return self._call(method, args, reply_name, seqid)

    def _refuse(self, exc: RequestError, reply_name: str, mtype: int, seqid: int,
                method: Method | None) -> tuple[Reply | None, Status]:
        oneway = mtype == binary.ONEWAY or (method is not None and method.oneway)
        log.warning("request_refused", code=exc.code.name, error=str(exc),
                    effect="nothing sent (oneway)" if oneway else "TApplicationException")
        if oneway:
            return None, Status.FAILED
        return binary.encode_framed_application_exception(
            reply_name, seqid, str(exc), exc.code), Status.FAILED

    def _call(self, method: Method, args: Any, name: str, seqid: int
              ) -> tuple[Reply | None, Status]:
        assert method.func is not None
        try:
            value = method.func(*method.get_args(args)) if method.unpack_args \
                else method.func(method.get_args(args))
        except TApplicationException as exc:  # the handler chose the code itself
            log.info("handler_application_exception", code=exc.type, error=exc.message)
            if method.oneway:
                return None, Status.FAILED
            return binary.encode_framed_message(name, binary.EXCEPTION, seqid, exc), \
                Status.FAILED
        except BaseException as exc:  # noqa: BLE001 - even SystemExit must not kill a worker
            for field, exc_cls in method.declared:
                if isinstance(exc, exc_cls):
                    if method.oneway:
                        return None, Status.DECLARED
                    result = method.result_cls()
                    setattr(result, field, exc)
                    return self._encode(method, name, seqid, result, Status.DECLARED)
            # The whole story (traceback, full message) goes to the log, which carries
            # the request's peer, method and seqid; the client gets public_reason.
            log.error("handler_failed", exc_info=exc, error=f"{type(exc).__name__}: {exc}",
                      effect="nothing sent (oneway)" if method.oneway else "INTERNAL_ERROR")
            if method.oneway:
                return None, Status.FAILED
            return binary.encode_framed_application_exception(
                name, seqid, f"Internal error processing {name}: {public_reason(exc)}",
                AppErrorCode.INTERNAL_ERROR), Status.FAILED
        if method.oneway:
            return None, Status.OK
        # Skips the generated __init__ (which sets every field to None first): the
        # writer reads absent fields as None.
        result = object.__new__(method.result_cls)
        result.success = value
        return self._encode(method, name, seqid, result, Status.OK)

    def _encode(self, method: Method, name: str, seqid: int, result: Any,
                status: Status) -> tuple[Reply | None, Status]:
        try:
            if status is Status.OK and method.large_result:
                value = result.success
                if isinstance(value, (str, bytes, bytearray)) and \
                        len(value) >= binary.LARGE_VALUE:
                    return binary.encode_large_reply(name, seqid, value), status
            return binary.encode_framed_message(name, binary.REPLY, seqid, result), status
        except Exception as exc:
            log.error("reply_encode_failed", exc_info=exc, error=f"{type(exc).__name__}: {exc}",
                      effect="INTERNAL_ERROR")
            return binary.encode_framed_application_exception(
                name, seqid,
                f"Internal error processing {name}: the handler's result does not match "
                f"the IDL ({public_reason(exc)})",
                AppErrorCode.INTERNAL_ERROR), Status.FAILED

    def overload_reply(self, frame: bytes | bytearray, message: str) -> bytes | None:
        """The reply frame for a request refused because the worker queue is full, or None when
        the request is oneway or its header is unreadable (the worker would close)."""
        try:
            header = binary.read_message_header(frame, self.strict_read)
        except (WireError, DecodeError):
            return None
        if header.type != binary.CALL:
            return None
        name = header.name.partition(SEPARATOR)[2] if SEPARATOR in header.name \
            and self.services else header.name
        return binary.encode_framed_application_exception(
            name, header.seqid, message, AppErrorCode.INTERNAL_ERROR)
