"""The Python client of a nimbus daemon: :class:`NimbusClient` and submitting topologies.

Built on the socket-free call encoding of :mod:`nimbus_thrift.rpc.calls`; the daemon's
code (:mod:`nimbus_thrift.nimbus`) is never imported here.
"""

from .client import (BadReply, ConnectionLost, FrameRefused, NimbusClient,
                     NimbusClientError, NimbusTimeout, NimbusUnavailable, ServerError)

__all__ = ["BadReply", "ConnectionLost", "FrameRefused", "NimbusClient",
           "NimbusClientError", "NimbusTimeout", "NimbusUnavailable", "ServerError"]
