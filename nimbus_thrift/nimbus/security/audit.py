"""The audit trail: one event per state-changing call and per refusal, on its own
logger (:data:`AUDIT_LOGGER`), so that it can be routed to a file of its own.

Each event is ``audit`` with ``principal``, ``peer``, ``operation``, ``outcome``
(``ok``, ``refused``: the ACLs said no, ``error``: the call failed for another reason,
with ``error``), and what the call named: ``topology`` (the name or id the client
sent), ``topology_id`` (once known), ``upload``, ``download``. Which calls are events is
the ``audit_all`` column of :data:`.authz.METHODS`.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

import structlog

from .authz import METHODS, Call, Unauthorized

#: The audit logger's name: stable, for routing (a logging handler or a filter on the
#: ``logger`` key of JSON lines), whatever module writes to it.
AUDIT_LOGGER = "nimbus_thrift.audit"

log = structlog.get_logger(AUDIT_LOGGER)


def record(call: Call, outcome: str, **detail: Any) -> None:
    """Log one audit event for ``call`` (a call outside a request is not one)."""
    if call.principal is None:
        return
    fields = {**call.subject, **detail}
    if outcome == "refused":
        log.warning("audit", principal=call.principal, peer=call.peer,
                    operation=call.operation, outcome=outcome, **fields)
    else:
        log.info("audit", principal=call.principal, peer=call.peer,
                 operation=call.operation, outcome=outcome, **fields)


@contextmanager
def audited(call: Call) -> Iterator[Call]:
    """Record ``call``'s outcome when the block ends: refused (:class:`Unauthorized`),
    error (any other exception), ok; successes only for ``audit_all`` methods."""
    every = METHODS[call.operation].audit_all
    try:
        yield call
    except Unauthorized as exc:
        record(call, "refused", reason=str(exc))
        raise
    except Exception as exc:
        if every:
            record(call, "error", error=_message(exc))
        raise
    if every:
        record(call, "ok")


def _message(exc: BaseException) -> str:
    # thriftpy2's exceptions carry their text in ``msg`` (IDL) or ``message``.
    for attribute in ("msg", "message"):
        text = getattr(exc, attribute, None)
        if isinstance(text, str) and text:
            return text
    return str(exc) or type(exc).__name__
