"""Where the project's IDL files are, loading them with thriftpy2, and the few facts of
the Nimbus contract that the IDL file cannot say (shared by the daemon and its clients).

The files live in the repository's top-level ``idl/`` (the contract other
languages compile). A source checkout or editable install reads them there; a
wheel installs them under ``<prefix>/share/nimbus-thrift/idl`` (see setup.cfg).
"""

from __future__ import annotations

import os
import re
import sys
from functools import lru_cache
from pathlib import Path
from types import ModuleType

#: Storm's nimbus.thrift.port: where a daemon listens and a client connects by default.
NIMBUS_PORT = 6627
#: The pseudo-component a nimbus files its own errors under in TopologyInfo.errors (the
#: reserved "__" prefix keeps it apart from user component ids); clients look there.
NIMBUS_COMPONENT = "__nimbus"
#: The name of the daemon's Unix socket in its data directory.
UNIX_SOCKET_NAME = "nimbus.sock"
#: Environment variables that set a daemon's or a client's settings start with this.
ENV_PREFIX = "NIMBUS_THRIFT_"

#: In HA mode (issue 28), what a nimbus that is not the leader answers a state change
#: with: a TApplicationException INTERNAL_ERROR, as Storm's followers send (so Storm's
#: own clients behave as with Storm: they ask getLeader), whose message names the
#: leader's ``host:port`` (which Storm's does not), so a client can follow it at once.
NOT_LEADER_MESSAGE = "this nimbus is not the leader; the leader is {leader}"
#: ... and while no leader is elected (a client tries again after a pause).
NO_LEADER_MESSAGE = "this nimbus is not the leader; no leader is elected yet"
#: Finds the leader's ``host:port`` in such a message (IPv6 hosts in brackets).
NOT_LEADER_PATTERN = re.compile(r"not the leader; the leader is (\S+:\d+)")


def default_data_dir() -> Path:
    """Where a daemon keeps its state unless told otherwise ($XDG_DATA_HOME)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "nimbus-thrift"


def default_unix_socket() -> Path:
    """Where a daemon with the default data directory listens for local users, and
    where a client looks for it first."""
    return default_data_dir() / UNIX_SOCKET_NAME


def idl_dir() -> Path:
    """Return the directory holding ``demo.thrift`` and ``nimbus.thrift``.

    Raises:
        FileNotFoundError: neither the checkout nor the installed copy exists.
    """
    candidates = [
        Path(__file__).resolve().parent.parent / "idl",
        Path(sys.prefix) / "share" / "nimbus-thrift" / "idl",
    ]
    for candidate in candidates:
        if (candidate / "demo.thrift").is_file():
            return candidate
    raise FileNotFoundError(
        "cannot find the IDL directory; looked in " + ", ".join(map(str, candidates))
    )


def idl_path(name: str) -> Path:
    """Return the path of ``idl/<name>`` (for example ``demo.thrift``)."""
    return idl_dir() / name


@lru_cache(maxsize=None)
def load(name: str) -> ModuleType:
    """Load ``idl/<name>`` with thriftpy2, once per process.

    The module name is derived from the file name (``demo.thrift`` -> ``demo_thrift``),
    as thriftpy2 requires, so its structs pickle and compare consistently. thriftpy2
    registers that name in ``sys.modules``, so ``nimbus.thrift`` becomes
    ``nimbus_idl_thrift``: plain ``nimbus_thrift`` would replace this package.
    """
    import thriftpy2  # here: the CLI reads NIMBUS_PORT without paying for thriftpy2

    path = idl_path(name)
    module_name = path.stem + "_thrift"
    if module_name == __package__:
        module_name = path.stem + "_idl_thrift"
    return thriftpy2.load(str(path), module_name=module_name)


def nimbus_idl() -> ModuleType:
    """The thriftpy2 module of ``idl/nimbus.thrift`` (``nimbus_idl_thrift``), loaded once:
    the structs Nimbus calls take and return, the exceptions they raise."""
    return load("nimbus.thrift")
