"""The HTTP side's bounds, each named once with the reason for its value.

The HTTP side serves a page, a JSON API and a metrics scrape: small requests, a few
clients (browsers, Prometheus, scripts). These bounds keep whoever else reaches the
port (a slow client, a flood of connections, huge headers) from holding more than a
bounded share of the daemon, and from touching the Thrift side at all (it runs on its
own thread and loop: :mod:`.httpserver`).
"""

from __future__ import annotations

from dataclasses import dataclass

#: Open HTTP connections at once; one more is closed as soon as it is accepted. A
#: browser opens up to 6 per origin, Prometheus 1; 256 leaves room for dozens of both.
MAX_CONNECTIONS = 256
#: Bytes of a request line and its headers: browsers send 1-2 KiB (cookies included);
#: 16 KiB is what many servers allow by default. Beyond: 431.
MAX_HEADER_BYTES = 16 << 10
#: Bytes of a request body: the only bodies are rebalance options (a few hundred bytes
#: of JSON). Beyond: 413, before any of it is read.
MAX_BODY_BYTES = 64 << 10
#: Seconds from a request's first byte (or a new connection) to its last header and
#: body byte: a slow-loris client holds a connection this long at most. A TLS handshake
#: must finish within it too.
HEADER_TIMEOUT = 10.0
#: Seconds a kept-alive connection may wait for its next request (browsers keep
#: theirs for 60-300 s; they reconnect transparently after a close).
IDLE_TIMEOUT = 30.0
#: Seconds a client gets to take a response (the largest is /metrics or a topology's
#: configuration, tens of KB).
WRITE_TIMEOUT = 30.0
#: Threads that run requests (the daemon's own code: SQLite reads, the launcher's
#: status). Requests beyond wait in the loop, one per connection at most.
REQUEST_THREADS = 4
#: Pending connections the kernel queues before accept.
BACKLOG = 128


@dataclass(frozen=True)
class HttpLimits:
    """The bounds one HTTP server applies (tests use smaller ones)."""

    max_connections: int = MAX_CONNECTIONS
    max_header_bytes: int = MAX_HEADER_BYTES
    max_body_bytes: int = MAX_BODY_BYTES
    header_timeout: float = HEADER_TIMEOUT
    idle_timeout: float = IDLE_TIMEOUT
    write_timeout: float = WRITE_TIMEOUT
    request_threads: int = REQUEST_THREADS
