"""Decode, then call: one frame in, one reply out, every failure mapped to the right
``TApplicationException`` at the step where it happened.

    frame ──► message header ──► method lookup ──► args decode ──► handler ──► encode
                  │                    │                 │             │          │
             BadVersion:          UNKNOWN_METHOD    PROTOCOL_ERROR   declared: REPLY
             close conn.          (INVALID_MESSAGE_TYPE (also over   undeclared:
                                   for a non-call)  the decoded-size INTERNAL_ERROR
                                                    budget)

The args are decoded against the frame's decoded-size budget (rpc/codec/decoded.py): the
frame's bytes times ``decoded_size_factor``, at least 1 MiB.

Every form of client is served here (forms.py): a framed binary frame arrives as plain
bytes and takes the path it always took; a request in any other form arrives as a
:class:`~.forms.Message` and goes through :meth:`Dispatcher._dispatch_message`, which
unwraps it (THeader: parse the header, inflate ZLIB within the limit), picks the
protocol's reader, and answers through a :class:`Wire` of the client's form. Forms the
server was told not to accept (``transports=``, ``protocols=``) are closed here, with
one log line.

What a client hears of a handler's crash is the exception's type and a short reason
with no absolute path (see :func:`public_reason`); the traceback goes to the log, with
the request's peer, method and seqid.

Runs on worker threads; knows nothing of sockets or the selector.
"""

from __future__ import annotations

import enum
import operator
import re
import struct
from dataclasses import dataclass
from time import perf_counter
from types import ModuleType
from typing import Any, Callable

import structlog
from thriftpy2.thrift import TApplicationException

from .codec import binary, compact, forms, header, replies
from .context import REQUEST
from .codec.decoded import DECODED_SIZE_FLOOR
from .errors import (AppErrorCode, DecodeBudgetError, DecodeError, InvalidMessageTypeError,
                     RequestError, UnknownMethodError, WireError)
from .codec.forms import FRAMED_BINARY, Form, Message
from .methodstats import MethodStats
from .shared import MARKED, mark_of
from .shared import body as shared_body
from .options import DEFAULT_DECODED_SIZE_FACTOR, DEFAULT_MAX_FRAME_SIZE

log = structlog.get_logger(__name__)

#: A reply: one whole frame (the 4-byte length, then the message) as one bytes object,
#: or as a list of buffers to send back to back (large string/binary results and shared
#: results, sent without joining them).
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


#: Module-level names for the per-request path: a global lookup costs ~6 ns, an enum
#: member read off its class ~80 ns (measured, CPython 3.11).
_OK = Status.OK


def _no_args(args: Any) -> tuple[()]:
    return ()


class Wire:
    """How one request's replies are written: its form's framing and protocol.
    ``message(name, type, seqid, payload)`` and ``app_error(name, seqid, text, code)``
    return whole replies; ``large`` (framed binary only) the scatter form of a large
    string result; ``shared(name, seqid, body)`` a reply whose result struct is the
    shared ``body`` (rpc/shared.py); ``compact`` says which reader decodes the args."""

    __slots__ = ("message", "app_error", "large", "shared", "compact")

    def __init__(self, message: Callable[[str, int, int, Any], bytes],
                 app_error: Callable[[str, int, str, int], bytes],
                 large: Callable[[str, int, str | bytes | bytearray], list[bytes]] | None,
                 shared: Callable[[str, int, list[bytes]], Reply],
                 compact: bool) -> None:
        self.message = message
        self.app_error = app_error
        self.large = large
        self.shared = shared
        self.compact = compact


def _shared_reply(form: Form, protocol: str, echo: header.HeaderFrame | None
                  ) -> Callable[[str, int, list[bytes]], Reply]:
    """``Wire.shared`` for ``form``: the reply's own header, then the shared body's
    buffers as they are (sent without a copy), except in a THeader frame, which wraps
    (and may compress) the whole message."""
    if form.transport == "header":
        def wrapped(name: str, seqid: int, body: list[bytes]) -> Reply:
            return forms.wrap(form, b"".join((replies.head(protocol, name, seqid), *body)),
                              echo)
        return wrapped
    framed = form.transport == "framed"

    def scattered(name: str, seqid: int, body: list[bytes]) -> Reply:
        start = replies.head(protocol, name, seqid)
        if framed:
            start = _FRAME_LENGTH.pack(len(start) + sum(map(len, body))) + start
        return [start, *body]
    return scattered


_FRAME_LENGTH = struct.Struct(">I")


#: Framed binary: what every reply was before other forms were served.
FRAMED_BINARY_WIRE = Wire(binary.encode_framed_message,
                          binary.encode_framed_application_exception,
                          binary.encode_large_reply,
                          _shared_reply(FRAMED_BINARY, "binary", None), False)


def wire_for(form: Form, protocol: str, echo: header.HeaderFrame | None = None) -> Wire:
    """The :class:`Wire` of a request in ``form`` and ``protocol`` (THeader: with the
    request's header ``echo``)."""
    if form == FRAMED_BINARY:
        return FRAMED_BINARY_WIRE
    if echo is None:           # the same for every request of the form: made once
        wire = _WIRES.get((form, protocol))
        if wire is None:
            wire = _WIRES[(form, protocol)] = _make_wire(form, protocol, None)
        return wire
    return _make_wire(form, protocol, echo)


_WIRES: dict[tuple[Form, str], Wire] = {}


def _make_wire(form: Form, protocol: str, echo: header.HeaderFrame | None) -> Wire:
    encode = compact.encode_message if protocol == "compact" else binary.encode_message

    def message(name: str, mtype: int, seqid: int, payload: Any) -> bytes:
        return forms.wrap(form, encode(name, mtype, seqid, payload), echo)

    def app_error(name: str, seqid: int, text: str, code: int) -> bytes:
        return forms.error_reply(form, name, seqid, text, code, echo)
    # An unframed reply is the bare message: the codec's own encoder, no wrap call.
    return Wire(encode if form.transport == "unframed" else message, app_error, None,
                _shared_reply(form, protocol, echo), protocol == "compact")


class Dispatcher:
    """Maps method names to handlers for one default service and/or several
    multiplexed services.

    Args:
        default: ``(service, handler)`` answering unprefixed names, or None.
        services: ``{"Name": (service, handler)}`` answering ``"Name:method"``.
        strict_read: refuse old non-strict message headers.
        decoded_size_factor: a request's decoded-size budget, per byte of its frame
            (at least :data:`~.decoded.DECODED_SIZE_FLOOR` in all).
        transports, protocols: the forms of client accepted (forms.py); others are
            closed with a log line.
        max_message_size: the most a THeader ZLIB payload may inflate to (the
            server's max frame size).
    """

    def __init__(self, default: tuple[Any, object] | None,
                 services: dict[str, tuple[Any, object]] | None = None,
                 strict_read: bool = False,
                 decoded_size_factor: float = DEFAULT_DECODED_SIZE_FACTOR,
                 transports: tuple[str, ...] = forms.TRANSPORTS,
                 protocols: tuple[str, ...] = forms.PROTOCOLS,
                 max_message_size: int = DEFAULT_MAX_FRAME_SIZE,
                 method_metrics: bool = False) -> None:
        self.strict_read = strict_read
        self.transports = tuple(transports)
        self.protocols = tuple(protocols)
        self.max_message_size = max_message_size
        if "framed" not in self.transports or "binary" not in self.protocols:
            # Framed binary frames arrive as plain bytes: the refusal goes in front of
            # the fast path only on a server that refuses them (instance attribute).
            self.dispatch = self._refuse_framed_binary  # type: ignore[method-assign]
        if isinstance(decoded_size_factor, bool) or not 1 <= decoded_size_factor < float("inf"):
            raise ValueError(f"decoded_size_factor must be a number of at least 1, "
                             f"not {decoded_size_factor!r}")
        self.decoded_size_factor = decoded_size_factor
        #: Frames up to this size get the floor as their budget (one comparison on the
        #: hot path: most requests are small).
        self._floor_frames = int(DECODED_SIZE_FLOOR // decoded_size_factor)
        #: The accepted forms whose messages need no unwrapping (all but THeader and
        #: framed binary), with the Wire their replies take: one lookup per request.
        self._plain: dict[Form, Wire] = {
            form: wire_for(form, form.protocol)
            for form in (forms.FRAMED_COMPACT, forms.UNFRAMED_BINARY, forms.UNFRAMED_COMPACT)
            if self._accepts(form, form.protocol)}
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
        #: Per-method figures (methodstats.py), when asked: then every handler call
        #: goes through _timed_call (an instance attribute, so that a server that
        #: did not ask keeps the untimed path and pays nothing).
        self.method_stats: MethodStats | None = None
        if method_metrics:
            # Labels: the bare name for the default service, Service:method for a
            # multiplexed one. Keyed by the Method's id (its hash would hash every field).
            self._labels = {id(m): m.name for m in (self.default or {}).values()}
            for label, table in self.services.items():
                self._labels.update({id(m): f"{label}{SEPARATOR}{m.name}"
                                     for m in table.values()})
            self.method_stats = MethodStats(list(self._labels.values()))
            self._call = self._timed_call  # type: ignore[method-assign]

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

    def dispatch(self, frame: bytes | bytearray | Message, peer: str,
                 principal: str | None = None) -> tuple[Reply | None, Status]:
        """Process one frame's payload from ``peer`` (who is ``principal``, when the
        transport says); return (reply frame or None, status). The reply is a whole
        frame (see :data:`Reply`).

        Never raises: every failure becomes a reply, a log line, or Status.CLOSE.
        """
        if isinstance(frame, Message):   # (never for framed binary, the common case)
            return self._dispatch_message(frame, peer, principal)
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
                  mtype: int, seqid: int, wire: Wire = FRAMED_BINARY_WIRE
                  ) -> tuple[Reply | None, Status]:
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
            # self._budget(size) (decoded.decoded_size_limit), inlined: once per request.
            budget = DECODED_SIZE_FLOOR if size <= self._floor_frames \
                else max(DECODED_SIZE_FLOOR, int(size * self.decoded_size_factor))
            read = compact.struct_reader(method.args_cls) if wire.compact \
                else method.read_args
            args, _ = read(frame, header.end, size, budget)
        except DecodeBudgetError as exc:
            exc = DecodeBudgetError(
                exc.limit, f"decoded_size_factor {self.decoded_size_factor} times this "
                f"frame's {len(frame):,} bytes, and at least {DECODED_SIZE_FLOOR:,}")
            return self._refuse(exc, reply_name, mtype, seqid, method, wire)
        except RequestError as exc:
            return self._refuse(exc, reply_name, mtype, seqid, method, wire)
        return self._call(method, args, reply_name, seqid, wire)

    def _refuse(self, exc: RequestError, reply_name: str, mtype: int, seqid: int,
                method: Method | None, wire: Wire = FRAMED_BINARY_WIRE
                ) -> tuple[Reply | None, Status]:
        oneway = mtype == binary.ONEWAY or (method is not None and method.oneway)
        if method is not None and self.method_stats is not None:
            self.method_stats.record(self._labels[id(method)], Status.FAILED, None)
        log.warning("request_refused", code=exc.code.name, error=str(exc),
                    effect="nothing sent (oneway)" if oneway else "TApplicationException")
        if oneway:
            return None, Status.FAILED
        return wire.app_error(reply_name, seqid, str(exc), exc.code), Status.FAILED

    def _timed_call(self, method: Method, args: Any, name: str, seqid: int,
                    wire: Wire = FRAMED_BINARY_WIRE) -> tuple[Reply | None, Status]:
        """:meth:`_call`, timed and booked in :attr:`method_stats`."""
        started = perf_counter()
        reply, status = Dispatcher._call(self, method, args, name, seqid, wire)
        assert self.method_stats is not None
        # Status.OK, DECLARED and FAILED are the indexes of methodstats.OUTCOMES.
        self.method_stats.record(self._labels[id(method)], status, perf_counter() - started)
        return reply, status

    def _call(self, method: Method, args: Any, name: str, seqid: int,
              wire: Wire = FRAMED_BINARY_WIRE) -> tuple[Reply | None, Status]:
        assert method.func is not None
        try:
            value = method.func(*method.get_args(args)) if method.unpack_args \
                else method.func(method.get_args(args))
        except TApplicationException as exc:  # the handler chose the code itself
            log.info("handler_application_exception", code=exc.type, error=exc.message)
            if method.oneway:
                return None, Status.FAILED
            return wire.message(name, binary.EXCEPTION, seqid, exc), Status.FAILED
        except BaseException as exc:  # noqa: BLE001 - even SystemExit must not kill a worker
            for field, exc_cls in method.declared:
                if isinstance(exc, exc_cls):
                    if method.oneway:
                        return None, Status.DECLARED
                    result = method.result_cls()
                    setattr(result, field, exc)
                    return self._encode(method, name, seqid, result, Status.DECLARED, wire)
            # The whole story (traceback, full message) goes to the log, which carries
            # the request's peer, method and seqid; the client gets public_reason.
            log.error("handler_failed", exc_info=exc, error=f"{type(exc).__name__}: {exc}",
                      effect="nothing sent (oneway)" if method.oneway else "INTERNAL_ERROR")
            if method.oneway:
                return None, Status.FAILED
            return wire.app_error(
                name, seqid, f"Internal error processing {name}: {public_reason(exc)}",
                AppErrorCode.INTERNAL_ERROR), Status.FAILED
        if method.oneway:
            return None, _OK
        # Skips the generated __init__ (which sets every field to None first): the
        # writer reads absent fields as None.
        if MARKED and (mark := mark_of(value)) is not None:
            return self._encode_shared(method, name, seqid, mark, wire)
        result = object.__new__(method.result_cls)
        result.success = value
        return self._encode(method, name, seqid, result, _OK, wire)

    def _encode_shared(self, method: Method, name: str, seqid: int, mark: Any,
                       wire: Wire) -> tuple[Reply | None, Status]:
        """The reply to a call whose handler returned a shared value (rpc/shared.py):
        its body encoded once per protocol, then sent to every caller."""
        try:
            body = shared_body(mark, method.result_cls,
                               "compact" if wire.compact else "binary")
            return wire.shared(name, seqid, body), _OK
        except Exception as exc:
            return self._encode_failed(name, seqid, exc, wire)

    def _encode(self, method: Method, name: str, seqid: int, result: Any,
                status: Status, wire: Wire = FRAMED_BINARY_WIRE
                ) -> tuple[Reply | None, Status]:
        try:
            if status is _OK and method.large_result and wire.large is not None:
                value = result.success
                if isinstance(value, (str, bytes, bytearray)) and \
                        len(value) >= binary.LARGE_VALUE:
                    return wire.large(name, seqid, value), status
            return wire.message(name, binary.REPLY, seqid, result), status
        except Exception as exc:
            return self._encode_failed(name, seqid, exc, wire)

    @staticmethod
    def _encode_failed(name: str, seqid: int, exc: Exception, wire: Wire
                       ) -> tuple[Reply | None, Status]:
        log.error("reply_encode_failed", exc_info=exc, error=f"{type(exc).__name__}: {exc}",
                  effect="INTERNAL_ERROR")
        return wire.app_error(
            name, seqid,
            f"Internal error processing {name}: the handler's result does not match "
            f"the IDL ({public_reason(exc)})",
            AppErrorCode.INTERNAL_ERROR), Status.FAILED

    def overload_reply(self, frame: bytes | bytearray | Message, message: str
                       ) -> bytes | None:
        """The reply frame for a request refused because the worker queue is full, or None when
        the request is oneway or its header is unreadable (the worker would close)."""
        wire = FRAMED_BINARY_WIRE
        try:
            if isinstance(frame, Message):
                if frame.error is not None:
                    return None
                data, wire, _ = self._unwrap(frame)
                header = (compact if wire.compact else binary).read_message_header(
                    data, self.strict_read)
            else:
                header = binary.read_message_header(frame, self.strict_read)
        except (WireError, RequestError):
            return None
        if header.type != binary.CALL:
            return None
        name = header.name.partition(SEPARATOR)[2] if SEPARATOR in header.name \
            and self.services else header.name
        return wire.app_error(name, header.seqid, message, AppErrorCode.INTERNAL_ERROR)

    # ------------------------------------------------------------------ other forms

    def _budget(self, size: int) -> int:
        """The decoded-size budget of a message of ``size`` bytes."""
        return DECODED_SIZE_FLOOR if size <= self._floor_frames \
            else max(DECODED_SIZE_FLOOR, int(size * self.decoded_size_factor))

    def _unwrap(self, msg: Message) -> tuple[bytes | bytearray, Wire, header.HeaderFrame | None]:
        """The message bytes of ``msg``, the Wire its replies take, and its THeader (the
        payload inflated within min(max_message_size, its decoded-size budget)).

        Raises header.HeaderError, header.UnsupportedHeader, DecodeError."""
        form = msg.form
        if form.transport != "header":
            return msg.data, wire_for(form, form.protocol), None
        data = msg.data
        budget = self._budget(len(data))
        frame, _ = header.parse(bytes(data), min(self.max_message_size, budget), budget)
        return frame.payload, wire_for(form, header.PROTOCOLS[frame.protocol_id], frame), frame

    def _accepts(self, form: Form, protocol: str) -> bool:
        return form.transport in self.transports and protocol in self.protocols

    def _not_accepted(self, peer: str, what: str) -> tuple[Reply | None, Status]:
        log.warning("client_form_not_accepted", peer=peer, detected=what,
                    transports=list(self.transports), protocols=list(self.protocols),
                    effect="connection closed")
        return None, Status.CLOSE

    def _refuse_framed_binary(self, frame: bytes | bytearray | Message, peer: str,
                              principal: str | None = None) -> tuple[Reply | None, Status]:
        """dispatch() on a server that does not accept framed binary."""
        if isinstance(frame, Message):
            return self._dispatch_message(frame, peer, principal)
        return self._not_accepted(peer, str(FRAMED_BINARY))

    def _dispatch_message(self, msg: Message, peer: str, principal: str | None
                          ) -> tuple[Reply | None, Status]:
        """dispatch() for a request in any form but framed binary."""
        wire = self._plain.get(msg.form)
        if wire is not None and msg.error is None:
            # An accepted framed-compact or unframed message, the common case of the
            # other forms: nothing to unwrap or check.
            return self._dispatch_unwrapped(msg.data, wire, None, msg.form, peer, principal)
        form = msg.form
        if form.transport != "header" and not self._accepts(form, form.protocol):
            return self._not_accepted(peer, str(form))
        if msg.error is not None:
            return self._refuse_unframed(msg, peer)
        try:
            data, wire, frame = self._unwrap(msg)
        except header.UnsupportedHeader as exc:
            log.warning("request_refused", peer=peer, code=exc.code.name, error=str(exc),
                        effect="TApplicationException")
            return forms.error_reply(form, "", exc.echo.seqid, str(exc), exc.code,
                                     exc.echo), Status.FAILED
        except header.HeaderError as exc:
            log.warning("bad_theader", peer=peer, error=str(exc), effect="connection closed")
            return None, Status.CLOSE
        except DecodeError as exc:
            # The frame is intact (a payload too large once inflated, or not zlib):
            # answered, and the connection goes on.
            log.warning("request_refused", peer=peer, code=exc.code.name, error=str(exc),
                        effect="TApplicationException")
            seqid = int.from_bytes(msg.data[4:8], "big", signed=True)
            return forms.error_reply(form, "", seqid, str(exc), exc.code), Status.FAILED
        protocol = "compact" if wire.compact else "binary"
        if frame is not None and not self._accepts(form, protocol):
            return self._not_accepted(peer, f"THeader carrying {protocol}")
        return self._dispatch_unwrapped(data, wire, frame, form, peer, principal)

    def _dispatch_unwrapped(self, data: bytes | bytearray, wire: Wire,
                            frame: header.HeaderFrame | None, form: Form, peer: str,
                            principal: str | None) -> tuple[Reply | None, Status]:
        """The message bytes of a request in another form, read as framed binary's are."""
        codec = compact if wire.compact else binary
        try:
            head = codec.read_message_header(data, self.strict_read)
        except (WireError, DecodeError) as exc:
            log.warning("bad_message_header", peer=peer, form=str(form), error=str(exc),
                        effect="connection closed")
            return None, Status.CLOSE
        # THeader's info headers as the fifth item, when there are any (context.py).
        request = (peer, head.name, head.seqid, principal, frame.info) \
            if frame is not None and frame.info else (peer, head.name, head.seqid, principal)
        token = REQUEST.set(request)
        try:
            return self._dispatch(data, head, head.name, head.type, head.seqid, wire)
        finally:
            REQUEST.reset(token)

    def _refuse_unframed(self, msg: Message, peer: str) -> tuple[Reply | None, Status]:
        """An unframed message the scan refused: answered in the client's form (the
        connection closes after it: connection.py set it closing)."""
        error = msg.error
        assert error is not None
        log.warning("unframed_message_refused", peer=peer, form=str(msg.form),
                    method=msg.name or None, seqid=msg.seqid, error=str(error),
                    effect="TApplicationException, then close")
        return forms.error_reply(msg.form, msg.name, msg.seqid, str(error),
                                 AppErrorCode.PROTOCOL_ERROR), Status.FAILED
