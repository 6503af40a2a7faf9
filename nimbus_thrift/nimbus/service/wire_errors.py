"""How the service's own errors reach Storm's clients on the wire (decorators for the
IDL methods).

:func:`client_errors`: an invalid topology as the IDL's InvalidTopologyException;
errors Storm reports as a bare RuntimeException (an unknown upload location,
activating a KILLED topology) as a TApplicationException INTERNAL_ERROR whose message
is one sentence, without a traceback in the log: they are the client's mistake, not
ours.

:func:`storm_errors`, for Storm 2.x's methods: what :func:`client_errors` does, and
also a call Spark has no meaning for (:class:`NotSupported`), a bad option value
(:class:`InvalidOption`), and an IDL exception the method does not declare (Storm
declares none for setWorkerProfiler, processWorkerMetrics, ..., yet a caller can be
refused or name an unknown topology) all as a TApplicationException whose message is
the sentence: never an undeclared exception, which the dispatcher would log with a
traceback as the server's own failure.

Both decorate methods of a group of calls whose ``idl`` attribute is the loaded IDL
module (its exceptions are the answers).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar

import structlog
from thriftpy2.thrift import TApplicationException, TException

from ...topology.validate import InvalidTopology
from ..state.lifecycle import TransitionRefused
from ..transfers.uploads import TransferError, TransferRefused

log = structlog.get_logger(__name__)

F = TypeVar("F", bound=Callable[..., Any])


class NotSupported(Exception):
    """A Storm call with no meaning on Spark (JVM profiling, Storm's supervisors);
    the message is one sentence saying so."""


class InvalidOption(ValueError):
    """An option value outside what the IDL allows (an enum value it does not
    declare); the message is one sentence naming the value."""


def client_errors(func: F) -> F:
    """Map the service's own errors onto what Storm clients expect on the wire."""
    @functools.wraps(func)
    def wrapper(self: Any, *args: Any) -> Any:
        try:
            return func(self, *args)
        except InvalidTopology as exc:
            log.info("request_refused", error=str(exc))
            raise self.idl.InvalidTopologyException(msg=str(exc)) from None
        except (TransitionRefused, TransferError) as exc:
            if not isinstance(exc, TransferRefused):     # logged, rate-limited, by transfers
                log.info("request_refused", error=str(exc))
            raise TApplicationException(TApplicationException.INTERNAL_ERROR,
                                        str(exc)) from None
    return wrapper  # type: ignore[return-value]


def storm_errors(func: F) -> F:
    """:func:`client_errors`, and :class:`NotSupported`, :class:`InvalidOption` and
    IDL exceptions the method (named as the function) does not declare as a
    TApplicationException UNKNOWN (not INTERNAL_ERROR: nothing failed here) with the
    exception's sentence."""
    inner = client_errors(func)
    name = func.__name__

    @functools.wraps(func)
    def wrapper(self: Any, *args: Any) -> Any:
        try:
            return inner(self, *args)
        except (NotSupported, InvalidOption) as exc:
            log.info("request_refused", error=str(exc))
            raise TApplicationException(TApplicationException.UNKNOWN, str(exc)) from None
        except TException as exc:
            if isinstance(exc, TApplicationException) or \
                    isinstance(exc, declared_exceptions(self.idl, name)):
                raise
            message = getattr(exc, "msg", None) or str(exc)
            log.info("request_refused", error=message)
            raise TApplicationException(TApplicationException.UNKNOWN, message) from None
    return wrapper  # type: ignore[return-value]


@functools.lru_cache(maxsize=None)
def declared_exceptions(idl: Any, method: str) -> tuple[type, ...]:
    """The exception classes ``service Nimbus``'s ``method`` declares (its result
    struct's fields other than ``success``)."""
    result = getattr(idl.Nimbus, method + "_result")
    return tuple(entry[2] for fid, entry in result.thrift_spec.items()
                 if fid != 0 and len(entry) == 4)
