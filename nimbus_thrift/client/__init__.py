"""The Python client of a nimbus daemon: :class:`NimbusClient` and submitting topologies.

Built on the socket-free call encoding of :mod:`nimbus_thrift.rpc.codec.calls`; the daemon's
code (:mod:`nimbus_thrift.nimbus`) is never imported here.

Modules, each importing only those listed before it: ``defaults`` (plain constants),
``errors``, ``seeds`` (nimbus seeds as written, a follower's refusal read), ``tls`` (the
TLS context and what a refusal means), ``options`` (a client's settings, checked once),
``transport`` (the socket), ``leader`` (a client of several seeds: where each call
goes, the leader followed), ``files`` (uploads and downloads in chunks), ``submit``
(packaging, uploading, waiting), ``client`` (:class:`NimbusClient`: options and a
transport or a router of seeds, the IDL's methods, the file and submit shortcuts);
``blobs`` (the blob store over a client) imports ``defaults``; ``settings`` (where the
CLI connects: client.yaml, environment, flags) imports only ``defaults``, ``errors``
and ``seeds``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

#: The package's names and the module each comes from, imported on first use: the CLI
#: imports nimbus_thrift.client.defaults at start-up (and so this package), which must
#: not cost it thriftpy2 and structlog.
_EXPORTS = {
    "BadReply": "errors", "ConnectionLost": "errors", "DownloadTooLarge": "errors",
    "FrameRefused": "errors", "LeaderChanged": "errors", "NoLeader": "errors",
    "NoNimbusAnswered": "errors",
    "NimbusClient": "client", "NimbusClientError": "errors", "NimbusTimeout": "errors",
    "NimbusUnavailable": "errors", "ServerError": "errors", "TlsError": "errors",
    "ClientSettings": "settings", "load_client_settings": "settings",
}

if TYPE_CHECKING:
    from .client import NimbusClient
    from .errors import (BadReply, ConnectionLost, DownloadTooLarge, FrameRefused,
                         LeaderChanged, NimbusClientError, NimbusTimeout, NimbusUnavailable,
                         NoLeader, NoNimbusAnswered, ServerError, TlsError)
    from .settings import ClientSettings, load_client_settings

__all__ = ["BadReply", "ClientSettings", "ConnectionLost", "DownloadTooLarge", "FrameRefused",
           "LeaderChanged", "NimbusClient", "NimbusClientError", "NimbusTimeout",
           "NimbusUnavailable", "NoLeader", "NoNimbusAnswered", "ServerError", "TlsError",
           "load_client_settings"]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
