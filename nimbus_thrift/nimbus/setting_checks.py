"""The rules of the settings that take more than a bound or a list of choices: the
checks settings.py's registry names (``check=``) or runs on a whole configuration."""

from __future__ import annotations

import os
import unicodedata
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .settings import NimbusConfig

#: Bytes of a Unix socket's path, the terminating NUL excluded: sun_path is 108 bytes
#: on Linux, and bind() refuses a longer path.
MAX_UNIX_SOCKET_PATH_BYTES = 107


class ConfigError(ValueError):
    """A configuration value is unusable; the message names the key and its source."""


def _check_url(name: str, value: str) -> None:
    if value and not value.startswith(("http://", "https://")):
        raise ConfigError(f"{name} must be an http:// or https:// URL, not {value!r}")


def _check_cache_dir(name: str, value: str) -> None:
    if value not in ("", "off") and not Path(value).expanduser().is_absolute():
        raise ConfigError(f"{name} must be an absolute path, empty or off, not {value!r}")


def _check_unix_socket(name: str, value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, str):
        raise ConfigError(f"{name} must be a path, or empty to turn it off, not {value!r}")
    size = len(os.fsencode(value))
    if size > MAX_UNIX_SOCKET_PATH_BYTES:
        raise ConfigError(f"{name} {value!r} is {size} bytes long; a Unix socket path "
                          f"may have at most {MAX_UNIX_SOCKET_PATH_BYTES}")


def _check_principals(name: str, value: Any) -> None:
    if not isinstance(value, tuple):
        raise ConfigError(f"{name} must be a list of principals, not {value!r}")
    for principal in value:
        # Names are compared as they are: padding or a control character is a mistake
        # (a copied line end) that would never match a certificate's CN or a user.
        if not isinstance(principal, str) or not principal or principal != principal.strip() \
                or any(unicodedata.category(c).startswith("C") for c in principal):
            raise ConfigError(f"{name} must list principal names (non-empty, without "
                              f"surrounding spaces or control characters), not {principal!r}")


def _check_principal_map(name: str, value: Any) -> None:
    if not isinstance(value, tuple) or not all(
            isinstance(pair, tuple) and len(pair) == 2 for pair in value):
        raise ConfigError(f"{name} must map principals to OS user names, not {value!r}")
    _check_principals(name, tuple(principal for principal, _ in value))
    for principal, user in value:
        if not isinstance(user, str) or not user or user != user.strip() or \
                any(unicodedata.category(c).startswith("C") or c in "/:" for c in user):
            raise ConfigError(f"{name} must map {principal!r} to an OS user name, "
                              f"not {user!r}")


def _check_addresses(name: str, value: Any) -> None:
    if not isinstance(value, tuple) or not value:
        raise ConfigError(f"{name} must list host:port addresses, not {value!r}")
    for entry in value:
        host, _, port = str(entry).rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"{name} must list host:port addresses (ZooKeeper's "
                              f"client port, 2181 by default), not {entry!r}")


def _check_zookeeper_root(name: str, value: Any) -> None:
    if not isinstance(value, str) or not value.startswith("/") or "//" in value \
            or (value != "/" and value.endswith("/")):
        raise ConfigError(f"{name} must be an absolute ZooKeeper path such as "
                          f"/nimbus-thrift, not {value!r}")


def _check_ha(config: NimbusConfig) -> None:
    """HA mode needs the directory every nimbus shares."""
    if config.zookeeper_servers and config.shared_dir is None:
        raise ConfigError("zookeeper_servers is set but shared_dir is not: in HA mode "
                          "every nimbus reads the topologies' code, work directories and "
                          "blobs from one directory mounted at the same path on each")
    if config.shared_dir is not None and config.shared_dir == config.data_dir:
        raise ConfigError("shared_dir must not be data_dir: each nimbus keeps its own "
                          "copy of the state in data_dir")


def _check_deploy_mode(config: NimbusConfig) -> None:
    """Cluster deploy mode is the standalone master's REST submission: only a
    ``spark://`` master with the spark launcher has one."""
    if config.deploy_mode != "cluster":
        return
    master = config.spark_master.strip()
    if not master.startswith("spark://"):
        where = ("Kubernetes masters run drivers in the cluster through spark-submit "
                 "itself (docs/operations.md)") if master.startswith("k8s://") else \
            "a local master runs every driver here"
        raise ConfigError(f"deploy_mode cluster needs a spark:// master (a standalone "
                          f"cluster with its REST server on), not {master!r}: {where}")
    if config.run_as_user:
        raise ConfigError("deploy_mode cluster runs drivers on the workers, as the "
                          "workers' OS user: run_as_user (each topology as its owner's "
                          "OS user on this machine) cannot apply; turn one of them off")
    if "," in master:
        raise ConfigError("deploy_mode cluster takes one spark:// master (its REST "
                          f"server submits the drivers), not the list {master!r}")


def _check_tls(config: NimbusConfig) -> None:
    """The TLS files go together and must be readable files."""
    cert, key, ca = config.tls_cert_file, config.tls_key_file, config.tls_client_ca_file
    if (cert is None) != (key is None):
        given, missing = ("tls_cert_file", "tls_key_file") if cert is not None \
            else ("tls_key_file", "tls_cert_file")
        raise ConfigError(f"{given} is set but {missing} is not: the daemon's certificate "
                          "and its private key go together")
    if ca is not None and cert is None:
        raise ConfigError("tls_client_ca_file needs tls_cert_file and tls_key_file as well: "
                          "clients check the daemon's certificate before they show theirs")
    for name, path in (("tls_cert_file", cert), ("tls_key_file", key),
                       ("tls_client_ca_file", ca)):
        if path is None:
            continue
        try:
            with open(path, "rb") as f:     # what the daemon's user can read, root or not
                f.read(1)
        except OSError as exc:
            raise ConfigError(f"{name} {str(path)!r} cannot be read: "
                              f"{exc.strerror or exc}") from None
