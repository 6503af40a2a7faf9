"""How the service's own errors reach Storm's clients on the wire (a decorator for the
IDL methods that change state): an invalid topology as the IDL's
InvalidTopologyException; errors Storm reports as a bare RuntimeException (an unknown
upload location, activating a KILLED topology) as a TApplicationException
INTERNAL_ERROR whose message is one sentence, without a traceback in the log: they are
the client's mistake, not ours."""

from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar

import structlog
from thriftpy2.thrift import TApplicationException

from ..topology.validate import InvalidTopology
from .lifecycle import TransitionRefused
from .transfers import TransferError, TransferRefused

log = structlog.get_logger(__name__)

F = TypeVar("F", bound=Callable[..., Any])


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
