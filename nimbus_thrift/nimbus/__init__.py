"""The Nimbus service (after Apache Storm's Nimbus) on the nimbus-thrift server.

Rooms, each importing only those below it (tests/unit/test_layers.py keeps it so)::

    daemon.py     config, state, launcher, service and servers wired together
    web/          the page, Storm UI's REST API and /metrics, over the service
    service/      the IDL's surface: a group of calls per object, one method table
    blobs/        Storm's blob store: files, ACLs, placement (and its calls)
    transfers/    chunked uploads and downloads of code (and their calls)
    state/        SQLite store, status table, locks, timers, queues, time series
    security/     authorization, audit, TLS context, the OS users topologies run as
    spark/        the Spark launcher (beside the service, never inside it)
    launcher_choice.py  'spark' (imported when chosen), 'none', module:factory
    launcher.py   the interface to whatever runs topologies   admission.py  what fits
    settings.py   every setting once   config.py  file < environment < flags

Submit-time checks (validate, code) live in nimbus_thrift.topology: users run them
before uploading, the daemon runs them again on what arrives.
"""

from .config import ConfigError, NimbusConfig, load_config
from .daemon import DaemonError, NimbusDaemon, nimbus_idl

__all__ = ["ConfigError", "DaemonError", "NimbusConfig", "NimbusDaemon", "load_config",
           "nimbus_idl"]
