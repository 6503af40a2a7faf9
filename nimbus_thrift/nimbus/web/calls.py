"""Calling the Nimbus handler on behalf of an HTTP request: the same code path as the
IDL method (its authorization, audit and errors), with the request's peer and
principal where a Thrift request's would be, and the IDL's exceptions turned into
HTTP statuses with Storm's error JSON."""

from __future__ import annotations

from typing import Any, Callable, TypeVar

import structlog
from thriftpy2.thrift import TApplicationException

from ...rpc.context import REQUEST
from .messages import HttpError, Request

log = structlog.get_logger(__name__)

T = TypeVar("T")


def call_as(request: Request, idl: Any, operation: str, method: Callable[..., T],
            *args: Any) -> T:
    """``method(*args)`` (an IDL method of the handler) as if ``request``'s client had
    called it over Thrift.

    Raises:
        HttpError: 404 for NotAliveException, 403 for AuthorizationException, 400 for
            InvalidTopologyException and refused options, 409 for a refused state
            change (activating a killed topology), 500 otherwise.
    """
    # The Thrift side's request tuple: (peer, method, seqid, principal). A principal of
    # None is plain TCP's: the handler's authorization takes it as anonymous.
    token = REQUEST.set((request.peer, f"http:{operation}", 0, request.principal))
    try:
        return method(*args)
    except idl.NotAliveException as exc:
        raise HttpError(404, exc.msg or "no such topology") from None
    except idl.AuthorizationException as exc:
        raise HttpError(403, exc.msg or "not authorized") from None
    except idl.InvalidTopologyException as exc:
        raise HttpError(400, exc.msg or "invalid request") from None
    except TApplicationException as exc:
        # The handler's client errors: INTERNAL_ERROR is a refused transition or
        # transfer (wire_errors.client_errors), UNKNOWN an option it does not take.
        if exc.type == TApplicationException.INTERNAL_ERROR:
            raise HttpError(409, exc.message or "refused") from None
        raise HttpError(400, exc.message or "refused") from None
    finally:
        REQUEST.reset(token)
