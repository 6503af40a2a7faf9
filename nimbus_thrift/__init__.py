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

from .client import (BadReply, ConnectionLost, FrameRefused, NimbusClient, NimbusClientError,
                     NimbusTimeout, NimbusUnavailable, ServerError)
from .options import OptionError, ServerOptions
from .server import Server, make_server
from .metrics import MetricsSnapshot

__all__ = ["BadReply", "ConnectionLost", "FrameRefused", "MetricsSnapshot", "NimbusClient",
           "NimbusClientError", "NimbusTimeout", "NimbusUnavailable", "OptionError", "Server",
           "ServerError", "ServerOptions", "make_server"]
__version__ = "0.1.0"
