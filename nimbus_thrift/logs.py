"""Logging configuration: called once, by the entry point (the CLI), never by the
library. Modules only call ``structlog.get_logger(__name__)``.

Per-request context (peer, method, seqid) is set by the dispatcher in one ContextVar
(see :mod:`nimbus_thrift.rpc.context` for why not ``bind_contextvars``);
:func:`~nimbus_thrift.rpc.context.merge_request_context` puts it on every line, the
handler's own lines included, next to anything bound with ``structlog.contextvars``. Standard-library loggers (thriftpy2, later py4j/PySpark) go
through the same renderer via ``ProcessorFormatter``.
"""

from __future__ import annotations

import logging
import sys
from typing import Literal

import structlog

from .rpc.context import merge_request_context

LogFormat = Literal["auto", "console", "json"]
LEVELS = ("debug", "info", "warning", "error")


def configure(level: str = "info", fmt: LogFormat = "auto") -> None:
    """Configure structlog and the stdlib root logger to write to stderr.

    Args:
        level: one of :data:`LEVELS`.
        fmt: ``console`` (coloured when a TTY), ``json`` (one object per line), or
            ``auto``: console on a TTY, JSON otherwise.
    """
    if level not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}, not {level!r}")
    numeric = getattr(logging, level.upper())
    if fmt == "auto":
        fmt = "console" if sys.stderr.isatty() else "json"
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        merge_request_context,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.types.Processor
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer()
        shared.append(structlog.processors.format_exc_info)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    structlog.configure(
        processors=[structlog.stdlib.filter_by_level, *shared,
                    structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer]))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric)
