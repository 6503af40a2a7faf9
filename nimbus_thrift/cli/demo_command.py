"""``nimbus-thrift demo``: serve the demo service (idl/demo.thrift, handlers in
nimbus_thrift/demo.py) with every server limit as a flag."""

from __future__ import annotations

from typing import Any

import click

from .. import logs
from ..rpc.options import (DEFAULT_FIRST_REQUEST_TIMEOUT, DEFAULT_FRAME_READ_TIMEOUT,
                           DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_FRAME_SIZE,
                           DEFAULT_MAX_READ_BUFFER_BYTES, DEFAULT_MAX_UNSENT_REPLY_BYTES,
                           DEFAULT_MIN_FRAME_RATE, DEFAULT_PARK_TIMEOUT,
                           DEFAULT_SEND_BUFFER_SIZE, DEFAULT_WORKER_QUEUE_SIZE,
                           DEFAULT_WORKER_THREADS, OptionError)
from ..tuning import tune_allocator
from .options import logging_options
from .stop_signals import on_stop_signals, wait


@click.command(short_help="Serve the demo service (Echo, Calculator).")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(0, 65535), default=9090, show_default=True)
@click.option("--workers", type=click.IntRange(1), default=DEFAULT_WORKER_THREADS,
              show_default=True, help="Worker threads running handlers.")
@click.option("--queue-size", type=click.IntRange(1), default=DEFAULT_WORKER_QUEUE_SIZE,
              show_default=True, help="Requests waiting for a worker before 'overloaded'.")
@click.option("--max-frame-size", type=click.IntRange(1), default=DEFAULT_MAX_FRAME_SIZE,
              show_default=True)
@click.option("--max-read-buffer-bytes", type=click.IntRange(1),
              default=DEFAULT_MAX_READ_BUFFER_BYTES, show_default=True,
              help="Bytes all connections together may hold in read buffers.")
@click.option("--max-read-buffer-bytes-per-peer", type=click.IntRange(1), default=None,
              help="Bytes one client address's frames may declare at once [default: a "
                   "quarter of --max-read-buffer-bytes, at least one --max-frame-size].")
@click.option("--max-connections", type=click.IntRange(1), default=DEFAULT_MAX_CONNECTIONS,
              show_default=True)
@click.option("--idle-timeout", type=click.FloatRange(0, min_open=True),
              default=DEFAULT_IDLE_TIMEOUT, show_default=True)
@click.option("--frame-read-timeout", type=click.FloatRange(0, min_open=True),
              default=DEFAULT_FRAME_READ_TIMEOUT, show_default=True)
@click.option("--max-connections-per-peer", type=click.IntRange(1), default=None,
              help="Connections one client address may hold [default: a quarter of "
                   "--max-connections, at least 64].")
@click.option("--first-request-timeout", type=click.FloatRange(0, min_open=True),
              default=DEFAULT_FIRST_REQUEST_TIMEOUT, show_default=True,
              help="Seconds a new connection has to deliver its first request.")
@click.option("--park-timeout", type=click.FloatRange(0, min_open=True),
              default=DEFAULT_PARK_TIMEOUT, show_default=True,
              help="Seconds a frame may wait for read-buffer memory before it is refused.")
@click.option("--min-frame-rate", type=click.IntRange(1), default=DEFAULT_MIN_FRAME_RATE,
              show_default=True, help="Bytes/s a frame in progress must average.")
@click.option("--max-unsent-reply-bytes", type=click.IntRange(1),
              default=DEFAULT_MAX_UNSENT_REPLY_BYTES, show_default=True,
              help="Reply bytes held for clients that do not read them.")
@click.option("--send-buffer-size", type=click.IntRange(1), default=DEFAULT_SEND_BUFFER_SIZE,
              show_default=True, help="SO_SNDBUF of accepted sockets.")
@click.option("--processes", type=click.IntRange(1), default=1, show_default=True,
              help="Serve from this many forked processes on the one port (SIGHUP "
                   "restarts them one by one).")
@logging_options
def demo(host: str, port: int, workers: int, queue_size: int, max_frame_size: int,
         max_read_buffer_bytes: int, max_read_buffer_bytes_per_peer: int | None,
         max_connections: int, idle_timeout: float,
         frame_read_timeout: float, max_connections_per_peer: int | None,
         first_request_timeout: float, park_timeout: float, min_frame_rate: int,
         max_unsent_reply_bytes: int, send_buffer_size: int | None, processes: int,
         log_level: str, log_format: Any) -> None:
    """Serve the demo service (idl/demo.thrift: Echo, and Calculator multiplexed)."""
    from .. import make_server
    from ..demo import CalculatorHandler, EchoHandler, demo_thrift, reload_on_hangup

    logs.configure(log_level, log_format)
    tune_allocator()
    module = demo_thrift()
    echo = EchoHandler()
    stop = on_stop_signals()
    try:
        server = make_server(
            module.Echo, echo, host=host, port=port,
            services={"Echo": (module.Echo, echo),
                      "Calculator": (module.Calculator, CalculatorHandler())},
            worker_threads=workers, worker_queue_size=queue_size,
            max_frame_size=max_frame_size, max_read_buffer_bytes=max_read_buffer_bytes,
            max_read_buffer_bytes_per_peer=max_read_buffer_bytes_per_peer,
            max_connections=max_connections, idle_timeout=idle_timeout,
            frame_read_timeout=frame_read_timeout,
            max_connections_per_peer=max_connections_per_peer,
            first_request_timeout=first_request_timeout, park_timeout=park_timeout,
            min_frame_rate=min_frame_rate, max_unsent_reply_bytes=max_unsent_reply_bytes,
            send_buffer_size=send_buffer_size, processes=processes)
        bound_host, bound_port = server.start()
        reload_on_hangup(server)
    except OptionError as exc:
        raise click.UsageError(str(exc)) from None
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror or exc}") \
            from None
    click.echo(f"serving idl/demo.thrift on {bound_host}:{bound_port} "
               f"(Echo; Echo and Calculator multiplexed); Ctrl-C or SIGTERM stops", err=True)
    wait(stop)
    server.stop(grace=10.0)
