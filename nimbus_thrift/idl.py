"""Where the project's IDL files are, loading them with thriftpy2, and the few facts of
the Nimbus contract that the IDL file cannot say (shared by the daemon and its clients).

The files ship inside the package (``nimbus_thrift/idl_files/``, package data) and are
read with :mod:`importlib.resources`, so every kind of install finds them: a venv,
``pip install --user``, ``--target``, ``--prefix``, a zip. The repository's top-level
``idl/`` holds the same files for other languages to compile;
tests/unit/test_idl_files.py keeps the two byte for byte equal.
"""

from __future__ import annotations

import os
import re
from functools import lru_cache
from importlib import resources
from importlib.resources.abc import Traversable
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


#: The package-data folder holding the IDL files (beside this module).
IDL_FILES = "idl_files"


def idl_resource(name: str) -> Traversable:
    """The packaged IDL file ``name`` (for example ``demo.thrift``), as a resource.

    Raises:
        FileNotFoundError: the package has no such IDL file.
    """
    resource = resources.files(__package__ or "nimbus_thrift") / IDL_FILES / name
    if not resource.is_file():
        raise FileNotFoundError(f"the package has no IDL file {name!r} "
                                f"(looked for {resource})")
    return resource


def idl_dir() -> Path:
    """Return the directory holding ``demo.thrift`` and ``nimbus.thrift``, for tools that
    need a path on disk (the Thrift compiler).

    Raises:
        FileNotFoundError: the package is not installed as files (a zip, say): the IDL
            is readable with :func:`idl_resource` but has no directory.
    """
    folder = resources.files(__package__ or "nimbus_thrift") / IDL_FILES
    if not isinstance(folder, Path) or not (folder / "demo.thrift").is_file():
        raise FileNotFoundError(f"the package's IDL files are not a directory on disk "
                                f"({folder}); read them with idl_resource()")
    return folder


def idl_path(name: str) -> Path:
    """Return the path of the packaged ``<name>`` (for example ``demo.thrift``)."""
    return idl_dir() / name


@lru_cache(maxsize=None)
def load(name: str) -> ModuleType:
    """Load the packaged IDL file ``name`` with thriftpy2, once per process.

    The module name is derived from the file name (``demo.thrift`` -> ``demo_thrift``),
    as thriftpy2 requires, so its structs pickle and compare consistently. thriftpy2
    registers that name in ``sys.modules``, so ``nimbus.thrift`` becomes
    ``nimbus_idl_thrift``: plain ``nimbus_thrift`` would replace this package.
    """
    import thriftpy2  # here: the CLI reads NIMBUS_PORT without paying for thriftpy2

    stem = name.removesuffix(".thrift")
    module_name = stem + "_thrift"
    if module_name == __package__:
        module_name = stem + "_idl_thrift"
    # thriftpy2 parses a path; as_file is the file itself in any installed package and a
    # temporary copy only when the package is zipped (the files include nothing else).
    with resources.as_file(idl_resource(name)) as path:
        return thriftpy2.load(str(path), module_name=module_name)


def nimbus_idl() -> ModuleType:
    """The thriftpy2 module of ``nimbus.thrift`` (``nimbus_idl_thrift``), loaded once:
    the structs Nimbus calls take and return, the exceptions they raise."""
    return load("nimbus.thrift")
