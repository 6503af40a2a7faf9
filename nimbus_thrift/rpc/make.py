"""``make_server``: one :class:`~nimbus_thrift.rpc.server.Server` in this process, or
a supervising parent of N forked children (rpc/multiprocess/). It sits above both: the
server core never imports the multi-process server built on it
(tests/unit/test_layers.py keeps it so).
"""

from __future__ import annotations

import socket
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, overload

from .dispatch import Dispatcher
from .options import OptionError, ServerOptions
from .server import Server

if TYPE_CHECKING:
    from .multiprocess.processes import ProcessServer


@overload
def make_server(service: ModuleType | Any, handler: object, host: str = ..., port: int = ...,
                *, services: dict[str, tuple[Any, object]] | None = ...,
                processes: Literal[1] = ..., **options: Any) -> Server: ...


@overload
def make_server(service: ModuleType | Any, handler: object, host: str = ..., port: int = ...,
                *, services: dict[str, tuple[Any, object]] | None = ...,
                processes: int, **options: Any) -> "Server | ProcessServer": ...


def make_server(service: ModuleType | Any, handler: object, host: str = "127.0.0.1",
                port: int = 0, *, services: dict[str, tuple[Any, object]] | None = None,
                processes: int = 1, **options: Any) -> "Server | ProcessServer":
    """Build a server for a thriftpy2 service and its handler.

    Args:
        service: a service from ``thriftpy2.load(...)`` (e.g. ``demo.Echo``), answering
            unprefixed method names; None to serve only ``services``.
        handler: the object whose methods implement ``service``.
        host, port: where to listen; port 0 picks a free port (read it from ``start()``).
        services: ``{"Name": (service, handler)}`` for TMultiplexedProtocol clients.
        processes: 1 (the default) is one :class:`Server` in this process; N > 1 is a
            :class:`~nimbus_thrift.rpc.multiprocess.processes.ProcessServer`: a supervising parent
            and N forked children on one shared listening socket, each with its own
            copy of the handlers (see rpc/multiprocess/processes.py for what that means for their
            state) and 1/N of the memory budgets.
        **options: any :class:`~nimbus_thrift.rpc.options.ServerOptions` field, e.g.
            ``transports=("framed",)`` or ``protocols=("binary",)`` to accept fewer
            forms of client than all (rpc/codec/forms.py).

    Raises:
        OptionError: an unknown option or an invalid value.
        ValueError: nothing to serve, or a bad multiplexed service name.
    """
    opts = ServerOptions.from_kwargs(**options)
    if (service is None) != (handler is None):
        raise OptionError("give both a service and its handler, or neither (with services=).")
    default = (service, handler) if service is not None else None
    dispatcher = Dispatcher(default, services, strict_read=opts.strict_read,
                            decoded_size_factor=opts.decoded_size_factor,
                            transports=opts.transports, protocols=opts.protocols,
                            max_message_size=opts.max_frame_size,
                            method_metrics=opts.method_metrics)
    if processes == 1 and not isinstance(processes, bool):
        return Server(dispatcher, host, port, opts)
    # Imported only here: a one-process server pays nothing for the other kind.
    from .multiprocess.processes import ProcessServer
    from .multiprocess.supervision import check_processes

    check_processes(processes, opts)

    def build_child(listener: socket.socket, child_opts: ServerOptions,
                    address: tuple[str, int]) -> Server:
        # Runs in a forked child.
        return Server(dispatcher, address[0], address[1], child_opts, listener=listener)

    return ProcessServer(build_child, host, port, opts, processes)
