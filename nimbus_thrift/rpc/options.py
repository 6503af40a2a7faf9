"""Server options: validated once, then frozen.

Every default limit is a named constant with the reason it has that value.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

#: Storm's Nimbus runs its THsHaServer with 64 worker threads (nimbus.thrift.threads).
DEFAULT_WORKER_THREADS = 64

#: Apache Thrift's TConfiguration.DEFAULT_MAX_FRAME_SIZE, so a frame any stock Thrift
#: peer accepts is accepted here and nothing larger.
DEFAULT_MAX_FRAME_SIZE = 16_384_000

#: Bytes all connections together may hold in read buffers. THRIFT-4193 settled on
#: 256 MiB for Java's nonblocking servers after an unbounded default ran them out of memory.
DEFAULT_MAX_READ_BUFFER_BYTES = 256 * 1024 * 1024

#: Requests decoded and waiting for a worker. Each already holds its frame in the
#: read-buffer budget; the bound is what turns overload into a prompt reply instead of
#: ever-growing latency (Java's THsHa queue is unbounded).
DEFAULT_WORKER_QUEUE_SIZE = 4096

#: Open connections. Each costs a file descriptor and a little state; past this the
#: server closes new connections at once instead of failing later on EMFILE.
DEFAULT_MAX_CONNECTIONS = 4096

#: Seconds a connection may sit between requests with nothing to read or write.
#: Storm's storm.thrift.socket.timeout.ms is 600000.
DEFAULT_IDLE_TIMEOUT = 600.0

#: Seconds from a frame's first byte until its last. A client that declares a large frame
#: and trickles it would otherwise hold its share of the budget forever (slowloris).
DEFAULT_FRAME_READ_TIMEOUT = 30.0

#: Seconds a reply may take to drain to a client that is not reading it.
DEFAULT_WRITE_TIMEOUT = 30.0

#: Listen backlog; the kernel caps it at net.core.somaxconn anyway.
DEFAULT_BACKLOG = 1024


class OptionError(ValueError):
    """An option has a value the server cannot run with. The message is a sentence."""


@dataclass(frozen=True)
class ServerOptions:
    """Everything tunable about a server. Build with ``ServerOptions(**kw)``; invalid
    values raise :class:`OptionError` naming the option and the value."""

    worker_threads: int = DEFAULT_WORKER_THREADS
    worker_queue_size: int = DEFAULT_WORKER_QUEUE_SIZE
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    max_read_buffer_bytes: int = DEFAULT_MAX_READ_BUFFER_BYTES
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT
    frame_read_timeout: float | None = DEFAULT_FRAME_READ_TIMEOUT
    write_timeout: float | None = DEFAULT_WRITE_TIMEOUT
    #: Reject old non-strict message headers (Storm accepts both; so do we by default).
    strict_read: bool = False
    backlog: int = DEFAULT_BACKLOG

    def __post_init__(self) -> None:
        for name in ("worker_threads", "worker_queue_size", "max_frame_size",
                     "max_read_buffer_bytes", "max_connections", "backlog"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise OptionError(f"{name} must be a positive integer, not {value!r}.")
        for name in ("idle_timeout", "frame_read_timeout", "write_timeout"):
            value = getattr(self, name)
            # `not value > 0` also refuses NaN, which would silently disable the timeout.
            if value is not None and (isinstance(value, bool)
                                      or not isinstance(value, (int, float))
                                      or not value > 0 or value == float("inf")):
                raise OptionError(f"{name} must be a positive number of seconds or None, "
                                  f"not {value!r}.")
        if not isinstance(self.strict_read, bool):
            raise OptionError(f"strict_read must be True or False, not {self.strict_read!r}.")

    @classmethod
    def from_kwargs(cls, **kwargs: object) -> "ServerOptions":
        """Build from keyword arguments, naming any unknown option in the error."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise OptionError(f"unknown server option(s) {', '.join(unknown)}; "
                              f"known options are {', '.join(sorted(known))}.")
        # arg-type: the names are checked above, and each value by __post_init__.
        return cls(**kwargs)  # type: ignore[arg-type]
