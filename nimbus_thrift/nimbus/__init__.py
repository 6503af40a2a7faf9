"""The Nimbus service (after Apache Storm's Nimbus) on the nimbus-thrift server.

Layers, each importing only those below it::

    daemon      config, state, launcher, handler and server wired together
    warmup      a first Spark launch ahead of time (``nimbus-thrift warm-up``)
    handler     the IDL's methods: checks, state, launcher calls, timers
    validate    submit-time checks          transfers  uploads and downloads
    lifecycle   the topology status table   store      SQLite state
    launcher    the interface to whatever runs topologies (PySpark: its own module)
"""

from .config import ConfigError, NimbusConfig, load_config
from .daemon import DaemonError, NimbusDaemon, nimbus_idl

__all__ = ["ConfigError", "DaemonError", "NimbusConfig", "NimbusDaemon", "load_config",
           "nimbus_idl"]
