"""nimbus-thrift: a Thrift-compatible half-sync/half-async RPC server.

Serve any service loaded with ``thriftpy2.load(...)``::

    server = nimbus_thrift.make_server(service, handler, host="127.0.0.1", port=0)
    host, port = server.start()      # serves in the background; returns once listening
    server.stop(grace=10.0)          # graceful: in-flight replies still reach clients

    with nimbus_thrift.make_server(service, handler) as server:
        ...                          # started on enter, stopped on exit

Several services on one port (TMultiplexedProtocol, ``"Service:method"``)::

    make_server(None, None, services={"Echo": (Echo, h1), "Calculator": (Calc, h2)})

Call a nimbus daemon (idl/nimbus.thrift)::

    with nimbus_thrift.NimbusClient("127.0.0.1", 6627, timeout=30) as nimbus:
        for topology in nimbus.getClusterInfo().topologies: ...
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lazy import lazy_exports

#: The package's names and the module each comes from, imported on first use: every
#: process that imports a submodule imports this package first, and a topology's Spark
#: Python workers import the runner (nimbus_thrift.runner.*), which needs neither the
#: server nor the client (with thriftpy2, structlog and asyncio: 0.1 s per process).
_EXPORTS = {
    "BadReply": "client", "ConnectionLost": "client", "FrameRefused": "client",
    "NimbusClient": "client", "NimbusClientError": "client", "NimbusTimeout": "client",
    "NimbusUnavailable": "client", "ServerError": "client", "TlsError": "client",
    "OptionError": "rpc.options", "ServerOptions": "rpc.options",
    "Server": "rpc.server", "make_server": "rpc.make",
    "ProcessServer": "rpc.multiprocess.processes",
    "MetricsSnapshot": "rpc.metrics",
    "RequestInfo": "rpc.context", "current_request": "rpc.context",
}

if TYPE_CHECKING:
    from .client import (BadReply, ConnectionLost, FrameRefused, NimbusClient,
                         NimbusClientError, NimbusTimeout, NimbusUnavailable, ServerError,
                         TlsError)
    from .rpc.context import RequestInfo, current_request
    from .rpc.metrics import MetricsSnapshot
    from .rpc.options import OptionError, ServerOptions
    from .rpc.multiprocess.processes import ProcessServer
    from .rpc.make import make_server
    from .rpc.server import Server

__all__ = ["BadReply", "ConnectionLost", "FrameRefused", "MetricsSnapshot", "NimbusClient",
           "NimbusClientError", "NimbusTimeout", "NimbusUnavailable", "OptionError",
           "ProcessServer", "RequestInfo", "Server", "ServerError", "ServerOptions", "TlsError",
           "current_request", "make_server"]
__version__ = "0.1.0"


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
