"""The Nimbus service (after Apache Storm's Nimbus) on the nimbus-thrift server.

Layers, each importing only those below it::

    daemon      config, state, launcher, handler and server wired together
    handler     the IDL's methods: checks, state, launcher calls, timers
    transfers   uploads and downloads       lifecycle  the topology status table
    store       SQLite state                timers     delayed kills and rebalances
    launchers   the registry: 'spark' (spark/, imported when chosen), 'none', module:factory
    launcher    the interface to whatever runs topologies
    config      settings: file < environment < flags

Submit-time checks (validate, code) live in nimbus_thrift.topology: users run them
before uploading, the daemon runs them again on what arrives.
"""

from .config import ConfigError, NimbusConfig, load_config
from .daemon import DaemonError, NimbusDaemon, nimbus_idl

__all__ = ["ConfigError", "DaemonError", "NimbusConfig", "NimbusDaemon", "load_config",
           "nimbus_idl"]
