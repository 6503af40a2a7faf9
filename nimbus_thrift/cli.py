"""The ``nimbus-thrift`` command: parse, validate, call one library function.

User mistakes are one sentence and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import signal
from typing import Any

import click

from . import logs
from .tuning import tune_allocator
from .options import (DEFAULT_FRAME_READ_TIMEOUT, DEFAULT_IDLE_TIMEOUT,
                      DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_FRAME_SIZE,
                      DEFAULT_MAX_READ_BUFFER_BYTES, DEFAULT_WORKER_QUEUE_SIZE,
                      DEFAULT_WORKER_THREADS, OptionError)


def _logging_options(func: Any) -> Any:
    func = click.option("--log-level", type=click.Choice(logs.LEVELS), default="info",
                        show_default=True, envvar="NIMBUS_THRIFT_LOG_LEVEL")(func)
    func = click.option("--log-format", type=click.Choice(["auto", "console", "json"]),
                        default="auto", show_default=True, envvar="NIMBUS_THRIFT_LOG_FORMAT",
                        help="auto: console on a terminal, JSON otherwise.")(func)
    return func


@click.group()
@click.version_option(package_name="nimbus-thrift")
def main() -> None:
    """nimbus-thrift: a half-sync/half-async Thrift server (and, soon, a Nimbus)."""


@main.command()
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
@click.option("--max-connections", type=click.IntRange(1), default=DEFAULT_MAX_CONNECTIONS,
              show_default=True)
@click.option("--idle-timeout", type=click.FloatRange(0, min_open=True),
              default=DEFAULT_IDLE_TIMEOUT, show_default=True)
@click.option("--frame-read-timeout", type=click.FloatRange(0, min_open=True),
              default=DEFAULT_FRAME_READ_TIMEOUT, show_default=True)
@_logging_options
def demo(host: str, port: int, workers: int, queue_size: int, max_frame_size: int,
         max_read_buffer_bytes: int, max_connections: int, idle_timeout: float,
         frame_read_timeout: float, log_level: str, log_format: Any) -> None:
    """Serve the demo service (idl/demo.thrift: Echo, and Calculator multiplexed)."""
    from . import make_server
    from .demo import CalculatorHandler, EchoHandler, demo_thrift

    logs.configure(log_level, log_format)
    tune_allocator()
    module = demo_thrift()
    echo = EchoHandler()
    try:
        server = make_server(
            module.Echo, echo, host=host, port=port,
            services={"Echo": (module.Echo, echo),
                      "Calculator": (module.Calculator, CalculatorHandler())},
            worker_threads=workers, worker_queue_size=queue_size,
            max_frame_size=max_frame_size, max_read_buffer_bytes=max_read_buffer_bytes,
            max_connections=max_connections, idle_timeout=idle_timeout,
            frame_read_timeout=frame_read_timeout)
        bound_host, bound_port = server.start()
    except OptionError as exc:
        raise click.UsageError(str(exc)) from None
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror or exc}") \
            from None
    click.echo(f"serving idl/demo.thrift on {bound_host}:{bound_port} "
               f"(Echo; Echo and Calculator multiplexed); Ctrl-C or SIGTERM stops", err=True)
    _wait_for_signal(server)


def _wait_for_signal(server: Any) -> None:
    """Block until SIGINT/SIGTERM, then stop the server gracefully."""
    import threading

    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    while not stop.wait(3600):
        pass
    server.stop(grace=10.0)


if __name__ == "__main__":  # pragma: no cover
    main()
