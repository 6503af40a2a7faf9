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
import os
import sys
from collections.abc import Mapping
from typing import Literal

import structlog

from .rpc.context import merge_request_context

LogFormat = Literal["auto", "console", "json"]
LEVELS = ("debug", "info", "warning", "error")


def color_choice(environ: Mapping[str, str] | None = None) -> bool | None:
    """Whether to colour output by the conventions users set: ``NO_COLOR``
    (no-color.org) turns colour off, ``FORCE_COLOR`` (force-color.org) on, each when set
    and not empty; NO_COLOR wins if both are. None: neither says, so a terminal decides.
    """
    env = os.environ if environ is None else environ
    if env.get("NO_COLOR"):
        return False
    if env.get("FORCE_COLOR"):
        return True
    return None


def configure(level: str = "info", fmt: LogFormat = "auto") -> None:
    """Configure structlog and the stdlib root logger to write to stderr.

    Args:
        level: one of :data:`LEVELS`.
        fmt: ``console`` (coloured on a TTY, or as NO_COLOR / FORCE_COLOR say:
            :func:`color_choice`), ``json`` (one object per line), or ``auto``: console
            on a TTY, JSON otherwise.
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
        colors = color_choice()
        renderer = structlog.dev.ConsoleRenderer(
            colors=sys.stderr.isatty() if colors is None else colors)
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
