"""The daemon's configuration: built once from defaults, a YAML file, environment
variables and command-line flags (each overriding the one before), validated, frozen.

YAML keys are the field names below (``data_dir`` or ``data-dir``); environment
variables are ``NIMBUS_THRIFT_`` + the field name in capitals (``NIMBUS_THRIFT_PORT``).
Lists of principals (``admins``, ``users``) are YAML lists, or comma-separated strings
in the environment and flags (``NIMBUS_THRIFT_ADMINS=alice,ops``).
"""

from __future__ import annotations

import dataclasses
import os
import typing
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..idl import ENV_PREFIX, NIMBUS_PORT, UNIX_SOCKET_NAME, default_data_dir
# The server library's defaults are already Storm's (64 workers as nimbus.thrift.threads,
# storm.thrift.socket.timeout.ms's 10 minutes idle); the daemon keeps them.
from ..rpc.options import (DEFAULT_DECODED_SIZE_FACTOR, DEFAULT_FIRST_REQUEST_TIMEOUT,
                           DEFAULT_FRAME_READ_TIMEOUT, DEFAULT_IDLE_TIMEOUT,
                           DEFAULT_MAX_CONNECTIONS, DEFAULT_MIN_FRAME_RATE,
                           DEFAULT_PARK_TIMEOUT, DEFAULT_WORKER_THREADS,
                           DEFAULT_WRITE_TIMEOUT)


#: Storm's nimbus.thrift.max_buffer_size, the daemon's default on purpose instead of the
#: server library's (Thrift's 16 MB): upload chunks are 300 KiB, so 1 MiB frames are
#: plenty, and a stray client cannot make the daemon buffer 16 MB per connection.
STORM_MAX_FRAME_SIZE = 1_048_576
#: Zipped Python code is small; this bounds the disk one upload can fill.
DEFAULT_MAX_UPLOAD_BYTES = 256 << 20
#: Storm's nimbus.file.copy.expiration.secs: an upload idle this long is dropped.
DEFAULT_FILE_COPY_EXPIRATION_SECS = 600.0
#: Storm cleans its inbox of jars older than an hour; unused uploads go after this.
DEFAULT_UPLOAD_RETENTION_SECS = 3600.0
#: The daemon's memory bounds, tighter than the server library's (which serves 16 MB
#: frames to trusted callers): its frames are at most 1 MiB and its large replies rare
#: (confs, topologies; download chunks are 300 KiB), and it must stay within its RSS
#: targets against clients that send frames they never finish or ask for replies they
#: never read (scripts/abuse/nimbus_rows.py, rows 3 and 5). Frames in read buffers: 64
#: of the largest at once.
DAEMON_MAX_READ_BUFFER_BYTES = 64 << 20
#: Reply bytes held for slow readers: 16 replies of 1 MiB. The daemon's RSS can grow by
#: this plus one reply per worker waiting to hand its reply over.
DAEMON_MAX_UNSENT_REPLY_BYTES = 16 << 20
#: SO_SNDBUF: what the kernel queues for one client that does not read (Linux doubles
#: it). With the library's 256 KiB, 1,000 clients not reading 900 KB replies held 512
#: MiB of TCP memory; with 64 KiB, a download chunk still goes out in three writes.
DAEMON_SEND_BUFFER_SIZE = 64 << 10
#: Bytes per downloadChunk reply: Storm's upload chunk size, so that a reply fits the
#: 1 MiB frame limit Storm's own clients read with (nimbus.thrift.max_buffer_size).
DEFAULT_DOWNLOAD_CHUNK_BYTES = 307_200
#: How often expired uploads and downloads are swept.
DEFAULT_SWEEP_SECS = 30.0
#: How long a topology's Spark application gets to stop by itself (control file
#: ``stop``) before it is sent SIGTERM: a graceful stop measured 2-4 s on 2 vCPUs.
DEFAULT_STOP_GRACE_SECS = 30.0
#: Relaunches of a crashed topology before it is left failed (a bug in a bolt fails
#: every time; a lost executor or a full disk usually does not).
DEFAULT_MAX_RESTARTS = 3
#: Uploads in progress from one client address: a submit uploads one file, so 32 is
#: more than any deploy script runs in parallel, and 8 such addresses still fit the
#: daemon's 256 open uploads (transfers.MAX_OPEN_UPLOADS).
DEFAULT_MAX_UPLOADS_PER_PEER = 32
#: Downloads in progress from one client address: a client reads one file at a time;
#: 64 addresses at this cap still fit the daemon's 4096 (transfers.MAX_DOWNLOADS).
DEFAULT_MAX_DOWNLOADS_PER_PEER = 64
#: Bytes of uploads in the inbox, open (acknowledged bytes) and complete together:
#: 16 uploads of the largest size (max_upload_bytes); topology code is usually KBs.
DEFAULT_MAX_INBOX_BYTES = 16 * DEFAULT_MAX_UPLOAD_BYTES
#: Free space a chunk must leave on the inbox's file system: room for SQLite to commit
#: and checkpoint its WAL and for the logs, so a full inbox cannot stop the daemon
#: recording state.
DEFAULT_MIN_FREE_DISK_BYTES = 64 << 20

#: Components (spouts and bolts) in one topology: Storm's largest topologies have a few
#: hundred; every submit-time check and every listing is linear in this.
DEFAULT_MAX_COMPONENTS = 1000
#: Source bytes of one module parsed to check that a component's class exists (a larger
#: module is accepted unchecked). Parses run in a child process (nimbus/codecheck.py);
#: this bounds each one's time and memory: 256 KiB of dense source took 0.18 s and
#: ~110 MB here (900 KiB: 0.77 s and ~370 MB). Topology modules are a few KB.
DEFAULT_MAX_CODE_PARSE_BYTES = 256 << 10
#: Source bytes parsed per submit, over distinct modules (each is parsed once): about
#: 3 s of parsing at worst, in parses of at most 0.2 s each; more is refused.
DEFAULT_MAX_CODE_PARSE_TOTAL_BYTES = 4 << 20
#: Topologies one nimbus keeps at once (active, inactive, or killed and not yet
#: removed): recovery at start and every listing are linear in this, and a Storm
#: cluster's Nimbus rarely keeps more than a few hundred.
DEFAULT_MAX_TOPOLOGIES = 500
#: How long a call waits for its launcher operation before answering anyway (the
#: outcome then shows in the topology's status): a spark-submit spawns in well under
#: a second, a stop may take stop_grace_secs + 5 s.
DEFAULT_LAUNCHER_REPLY_WAIT_SECS = 1.0
#: Bytes of a Unix socket's path, the terminating NUL excluded: sun_path is 108 bytes
#: on Linux, and bind() refuses a longer path.
MAX_UNIX_SOCKET_PATH_BYTES = 107
#: Storm's ui.port: the HTTP side's default port (also Spark's standalone master UI's:
#: set ui_port when both run on one machine).
DEFAULT_UI_PORT = 8080
#: ui_port's "any free port" (0 is "off", as a port of 0 cannot be asked for).
UI_PORT_ANY = -1


class ConfigError(ValueError):
    """A configuration value is unusable; the message names the key and its source."""


@dataclass(frozen=True)
class NimbusConfig:
    host: str = "127.0.0.1"
    port: int = NIMBUS_PORT
    data_dir: Path = dataclasses.field(default_factory=default_data_dir)
    worker_threads: int = DEFAULT_WORKER_THREADS
    max_frame_size: int = STORM_MAX_FRAME_SIZE
    max_read_buffer_bytes: int = DAEMON_MAX_READ_BUFFER_BYTES
    #: What one client address's frames may declare at once; 0 means a quarter of
    #: max_read_buffer_bytes (at least one max_frame_size).
    max_read_buffer_bytes_per_peer: int = 0
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    #: The server's deadlines and per-client bounds (see the server options in the
    #: README): a frame must arrive whole within frame_read_timeout, a connection's
    #: first request within first_request_timeout, a frame no slower than min_frame_rate
    #: bytes/s; a frame waits park_timeout at most for read-buffer memory; a reply must
    #: be taken within write_timeout.
    frame_read_timeout: float = DEFAULT_FRAME_READ_TIMEOUT
    first_request_timeout: float = DEFAULT_FIRST_REQUEST_TIMEOUT
    min_frame_rate: int = DEFAULT_MIN_FRAME_RATE
    park_timeout: float = DEFAULT_PARK_TIMEOUT
    write_timeout: float = DEFAULT_WRITE_TIMEOUT
    #: Connections from one client address; 0 means a quarter of max_connections.
    max_connections_per_peer: int = 0
    #: Reply bytes held for clients that do not read them, all connections together.
    max_unsent_reply_bytes: int = DAEMON_MAX_UNSENT_REPLY_BYTES
    #: SO_SNDBUF of accepted sockets; 0 leaves it to the kernel's autotuning.
    send_buffer_size: int = DAEMON_SEND_BUFFER_SIZE
    #: A request may decode into at most this many times its frame's bytes.
    decoded_size_factor: int = DEFAULT_DECODED_SIZE_FACTOR
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES
    file_copy_expiration_secs: float = DEFAULT_FILE_COPY_EXPIRATION_SECS
    upload_retention_secs: float = DEFAULT_UPLOAD_RETENTION_SECS
    download_chunk_bytes: int = DEFAULT_DOWNLOAD_CHUNK_BYTES
    sweep_secs: float = DEFAULT_SWEEP_SECS
    #: What runs topologies: ``spark`` (each topology is a Spark application started
    #: with spark-submit), ``none`` (topologies are stored and controlled but never
    #: run), or ``module:factory`` for a launcher of your own.
    launcher: str = "spark"
    #: Spark master URL for topologies: ``local[*]`` (this machine, every core),
    #: ``local[N]``, or ``spark://host:port`` of a standalone cluster.
    spark_master: str = "local[*]"
    #: The spark-submit to run, as a path or a command line (``python fake.py``);
    #: empty means ``$SPARK_HOME/bin/spark-submit`` of the PySpark installed with
    #: the daemon.
    spark_submit: str = ""
    #: Web UI of a standalone Spark master (``http://host:8080``), read for the
    #: cluster's workers; empty means port 8080 on the host of ``spark_master``.
    spark_master_ui: str = ""
    #: Where the Spark launcher keeps what it makes once per Java and Spark
    #: installation to start topologies sooner: a mirror of Spark home without the
    #: zipped PySpark (symbolic links) and the driver JVM's class data sharing archive
    #: (about 200 MB). Empty means ``$XDG_CACHE_HOME/nimbus-thrift`` (``~/.cache``),
    #: ``off`` neither (each topology then starts 5-10 s later).
    spark_cache_dir: str = ""
    #: Relaunch a topology whose Spark application failed, from its checkpoint
    #: (at most ``max_restarts`` times in a row, waiting longer each time).
    restart_failed: bool = True
    #: Relaunches in a row before a failing topology is left failed.
    max_restarts: int = DEFAULT_MAX_RESTARTS
    #: Seconds a topology gets to stop by itself (at removal and rebalance) before
    #: its processes are sent SIGTERM, then SIGKILL.
    stop_grace_secs: float = DEFAULT_STOP_GRACE_SECS
    #: Uploads and downloads in progress from one client address (one address cannot
    #: take every slot).
    max_uploads_per_peer: int = DEFAULT_MAX_UPLOADS_PER_PEER
    max_downloads_per_peer: int = DEFAULT_MAX_DOWNLOADS_PER_PEER
    #: Bytes all uploads in the inbox may hold, in progress and complete together.
    max_inbox_bytes: int = DEFAULT_MAX_INBOX_BYTES
    #: A chunk is refused when storing it would leave less free disk than this.
    min_free_disk_bytes: int = DEFAULT_MIN_FREE_DISK_BYTES
    #: Components (spouts plus bolts) one topology may have.
    max_components: int = DEFAULT_MAX_COMPONENTS
    #: A module larger than this is not parsed at submit (its class is not checked).
    max_code_parse_bytes: int = DEFAULT_MAX_CODE_PARSE_BYTES
    #: Source parsed per submit at most; a topology needing more is refused.
    max_code_parse_total_bytes: int = DEFAULT_MAX_CODE_PARSE_TOTAL_BYTES
    #: Topologies kept at once; a submit beyond it is refused.
    max_topologies: int = DEFAULT_MAX_TOPOLOGIES
    #: Bytes of this machine's memory topologies may take together (for the Spark
    #: launcher: each driver's heap, spark.driver.memory, and its process around it);
    #: a submit that would pass it is refused. 0 means 80 % of the machine's memory.
    spark_memory_budget: int = 0
    #: Idle Spark applications the spark launcher keeps warmed up, so that a submit
    #: without spark.* settings of its own starts in seconds (a standby driver takes
    #: it); -1 means 1 on a local master with PySpark's own spark-submit, else 0 (on
    #: spark:// a standby would hold cluster cores).
    standby_drivers: int = -1
    #: Bytes of this machine's memory standby drivers may hold together, within
    #: spark_memory_budget (they only take what topologies leave); 0 means as much as
    #: standby_drivers drivers of the default size take.
    standby_memory: int = 0
    #: Seconds a call waits for the launcher before answering (it then runs on).
    launcher_reply_wait_secs: float = DEFAULT_LAUNCHER_REPLY_WAIT_SECS
    log_level: str = "info"
    log_format: str = "auto"
    #: Principals allowed everything (Storm's nimbus.admins).
    admins: tuple[str, ...] = ()
    #: Principals allowed to use the service at all: submit, upload and the cluster-wide
    #: reads (Storm's nimbus.users); empty means every principal.
    users: tuple[str, ...] = ()
    #: The daemon's certificate (PEM, its chain after it) and private key: with both,
    #: the TCP port speaks TLS only.
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    #: CA certificates (PEM) client certificates must be signed by: with it, every TCP
    #: client must present one, and its subject's CN is the request's principal.
    tls_client_ca_file: Path | None = None
    #: Listen on a non-loopback host without mutual TLS (anyone who can reach the port
    #: is then "anonymous", and may do what the ACLs let anonymous do).
    insecure: bool = False
    #: The Unix socket local users connect to (their OS user is the principal); None
    #: means ``<data_dir>/nimbus.sock``, empty turns it off. Read it with
    #: :meth:`unix_socket_path`.
    unix_socket: str | None = None
    #: The HTTP side (web page, Storm UI REST API, /metrics): its port (Storm's ui.port;
    #: 0 turns it off, -1 takes any free port, for tests and embedding) and address
    #: (empty: the same as ``host``).
    ui_port: int = DEFAULT_UI_PORT
    ui_host: str = ""
    #: ``anonymous`` (plain TCP from another machine under ``insecure``, a CA-signed
    #: certificate without a CN) may read or change nothing unless this is true.
    allow_anonymous: bool = False
    #: Each topology's processes run as the OS user its owner maps to (Storm's
    #: supervisor.run.worker.as.user); needs a daemon running as root.
    run_as_user: bool = False
    #: Certificate principal -> OS user, for run_as_user (by default the CN itself).
    principal_users: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            _check(f.name, getattr(self, f.name))
        _check_tls(self)

    def unix_socket_path(self) -> Path | None:
        """Where the daemon's Unix socket is (None: turned off)."""
        if self.unix_socket is None:
            return self.data_dir / UNIX_SOCKET_NAME
        return Path(self.unix_socket) if self.unix_socket else None

    @property
    def ui_bind_host(self) -> str:
        """The address the HTTP side listens on: ``ui_host``, else ``host``."""
        return self.ui_host or self.host

    @property
    def mutual_tls(self) -> bool:
        """True when every TCP client must present a certificate the daemon checks."""
        return self.tls_cert_file is not None and self.tls_client_ca_file is not None


_LIMITS = {  # field -> (lowest allowed, inclusive)
    "port": 0, "worker_threads": 1, "max_frame_size": 64, "max_read_buffer_bytes": 64,
    "max_connections": 1, "max_upload_bytes": 1, "download_chunk_bytes": 1,
    "max_restarts": 0,
    "max_uploads_per_peer": 1, "max_downloads_per_peer": 1, "max_inbox_bytes": 1,
    "min_free_disk_bytes": 0,
    "max_components": 1, "max_code_parse_bytes": 1, "max_code_parse_total_bytes": 1,
    "max_topologies": 1, "spark_memory_budget": 0,
    "standby_drivers": -1, "standby_memory": 0,
    "min_frame_rate": 1, "max_connections_per_peer": 0, "max_read_buffer_bytes_per_peer": 0,
    "max_unsent_reply_bytes": 1, "send_buffer_size": 0, "decoded_size_factor": 1,
}
#: Words a boolean setting may be spelled with in YAML strings and the environment.
_BOOL_WORDS = {"true": True, "yes": True, "on": True, "1": True,
               "false": False, "no": False, "off": False, "0": False}


def _check(name: str, value: Any) -> None:
    if name == "port" and not 0 <= value <= 65535:
        raise ConfigError(f"port must be between 0 and 65535, not {value}")
    if name == "ui_port" and not UI_PORT_ANY <= value <= 65535:
        raise ConfigError(f"ui_port must be between 0 (off) and 65535, or -1 (any free "
                          f"port), not {value}")
    if name in _LIMITS and value < _LIMITS[name]:
        raise ConfigError(f"{name} must be at least {_LIMITS[name]}, not {value}")
    # By the declared type, not the value's: NimbusConfig(sweep_secs=0) passes an int.
    if _TYPES[name] is float and not (value > 0 and value != float("inf")):
        raise ConfigError(f"{name} must be a positive number of seconds, not {value}")
    if name == "log_level" and value not in ("debug", "info", "warning", "error"):
        raise ConfigError(f"log_level must be debug, info, warning or error, not {value!r}")
    if name == "log_format" and value not in ("auto", "console", "json"):
        raise ConfigError(f"log_format must be auto, console or json, not {value!r}")
    if name in ("host", "launcher", "spark_master") and not value:
        raise ConfigError(f"{name} must not be empty")
    if name == "spark_master_ui" and value and \
            not value.startswith(("http://", "https://")):
        raise ConfigError(f"spark_master_ui must be an http:// or https:// URL, "
                          f"not {value!r}")
    if name == "spark_cache_dir" and value not in ("", "off") and \
            not Path(value).expanduser().is_absolute():
        raise ConfigError(f"spark_cache_dir must be an absolute path, empty or off, "
                          f"not {value!r}")
    if _TYPES[name] is bool and not isinstance(value, bool):
        raise ConfigError(f"{name} must be true or false, not {value!r}")
    if _TYPES[name] == _PRINCIPALS:
        _check_principals(name, value)
    if _TYPES[name] == _PRINCIPAL_MAP:
        _check_principal_map(name, value)
    if _TYPES[name] == _OPTIONAL_PATH and value is not None and not isinstance(value, Path):
        raise ConfigError(f"{name} must be a path, not {value!r}")
    if name == "unix_socket" and value is not None:
        if not isinstance(value, str):
            raise ConfigError(f"unix_socket must be a path, or empty to turn it off, "
                              f"not {value!r}")
        size = len(os.fsencode(value))
        if size > MAX_UNIX_SOCKET_PATH_BYTES:
            raise ConfigError(f"unix_socket {value!r} is {size} bytes long; a Unix socket "
                              f"path may have at most {MAX_UNIX_SOCKET_PATH_BYTES}")


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


def _check_tls(config: "NimbusConfig") -> None:
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


#: The declared types of the settings that are not plain scalars.
_PRINCIPALS = tuple[str, ...]
_OPTIONAL_PATH = Path | None
_OPTIONAL_STR = str | None
_PRINCIPAL_MAP = tuple[tuple[str, str], ...]

_FIELDS = {f.name: f for f in dataclasses.fields(NimbusConfig)}
_TYPES: dict[str, type] = typing.get_type_hints(NimbusConfig)


def _coerce(name: str, value: Any, source: str) -> Any:
    kind = _TYPES[name]
    try:
        if kind == _PRINCIPALS:
            return _principals(value)
        if kind == _PRINCIPAL_MAP:
            return _principal_map(value)
        if kind == _OPTIONAL_PATH:
            if value is None or value == "":
                return None
            if not isinstance(value, (str, Path)):
                raise ValueError
            return Path(value).expanduser().absolute()
        if name == "unix_socket":
            if not isinstance(value, (str, Path)):
                raise ValueError
            # Absolute: the daemon may be started from anywhere, clients look for it.
            return str(Path(value).expanduser().absolute()) if str(value) else ""
        if kind is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.strip().lower() in _BOOL_WORDS:
                return _BOOL_WORDS[value.strip().lower()]
            raise ValueError
        if kind is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if kind is float:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if kind is Path:
            if not isinstance(value, (str, Path)) or not str(value):
                raise ValueError
            # Absolute: upload locations and getNimbusConf carry it to other processes.
            return Path(value).expanduser().absolute()
        if not isinstance(value, str):
            raise ValueError
        return value
    except (TypeError, ValueError):
        expected = {int: "an integer", float: "a number", Path: "a path", str: "a string",
                    bool: "true or false",
                    _PRINCIPALS: "a list of principal names (comma-separated in the "
                                 "environment and flags)",
                    _OPTIONAL_PATH: "a path (or empty)",
                    _OPTIONAL_STR: "a path, or empty to turn it off",
                    _PRINCIPAL_MAP: "a mapping of principal to OS user name (principal="
                                    "user pairs, comma-separated, in the environment)"}
        raise ConfigError(f"{source}: {name} must be {expected[kind]}, not {value!r}") \
            from None


def _principals(value: Any) -> tuple[str, ...]:
    """A YAML list, or a comma-separated string (the environment, flags), as a tuple
    of names; numbers are names too (a user without a login name is its uid)."""
    if isinstance(value, str):
        items: list[Any] = [part.strip() for part in value.split(",")]
        return tuple(item for item in items if item)
    if not isinstance(value, (list, tuple)):
        raise ValueError
    names = []
    for item in value:
        if isinstance(item, bool) or not isinstance(item, (str, int)):
            raise ValueError
        names.append(str(item))
    return tuple(names)


def _principal_map(value: Any) -> tuple[tuple[str, str], ...]:
    """A YAML mapping, or ``principal=user`` pairs comma-separated (the environment),
    as sorted pairs (a frozen config holds no dict)."""
    if isinstance(value, str):
        pairs = [part.strip().split("=", 1) for part in value.split(",") if part.strip()]
        if any(len(pair) != 2 for pair in pairs):
            raise ValueError
        value = {k.strip(): v.strip() for k, v in pairs}
    if isinstance(value, tuple):
        value = dict(value)
    if not isinstance(value, dict):
        raise ValueError
    items = []
    for principal, user in value.items():
        if isinstance(principal, bool) or isinstance(user, bool) or \
                not isinstance(principal, (str, int)) or not isinstance(user, (str, int)):
            raise ValueError
        items.append((str(principal), str(user)))
    return tuple(sorted(items))


def load_config(file: Path | None = None, env: Mapping[str, str] | None = None,
                flags: Mapping[str, Any] | None = None) -> NimbusConfig:
    """Build the configuration.

    Args:
        file: a YAML file of ``key: value`` pairs, or None.
        env: the environment (``os.environ`` when None); ``NIMBUS_THRIFT_*`` is read.
        flags: values given on the command line; None values mean "not given".

    Raises:
        ConfigError: unreadable file, unknown key, wrong type, value out of range.
    """
    values: dict[str, Any] = {}
    if file is not None:
        values.update(_from_file(file))
    env = os.environ if env is None else env
    for name in _FIELDS:
        key = ENV_PREFIX + name.upper()
        if key in env:
            values[name] = _coerce(name, env[key], f"environment variable {key}")
    for name, value in (flags or {}).items():
        if value is None:
            continue
        if name not in _FIELDS:
            raise ConfigError(f"unknown setting {name!r}")
        values[name] = _coerce(name, value, _FLAG_NAMES.get(name)
                               or f"--{name.replace('_', '-')}")
    try:
        return NimbusConfig(**values)
    except ConfigError as exc:
        raise ConfigError(f"invalid configuration: {exc}") from None


#: Settings whose command-line flag is not their name with dashes (the CLI's, see
#: cli/daemon_commands.py), so an error names the flag the user typed.
_FLAG_NAMES = {"tls_cert_file": "--tls-cert", "tls_key_file": "--tls-key",
               "tls_client_ca_file": "--tls-client-ca", "worker_threads": "--workers"}


def _from_file(path: Path) -> dict[str, Any]:
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:   # a ValueError, not an OSError
        raise ConfigError(f"cannot read config file {path}: it is not UTF-8 text "
                          f"({exc.reason} at byte {exc.start})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must be a mapping of settings, "
                          f"not {type(data).__name__}")
    values = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name not in _FIELDS:
            raise ConfigError(f"config file {path}: unknown setting {key!r}; known: "
                              + ", ".join(sorted(_FIELDS)))
        values[name] = _coerce(name, value, f"config file {path}")
    return values


#: Settings that hold a path or a command (what to run, where) though typed as strings:
#: never public, with the ones typed as paths (:func:`to_public`).
_PATH_STRINGS = frozenset({"unix_socket", "spark_cache_dir", "spark_submit"})


def is_public(name: str) -> bool:
    """Whether the setting ``name`` may be shown to the service's users (getNimbusConf,
    the REST API's configuration): not a path (the data directory, the TLS files, the
    socket, the Spark cache, spark-submit) and not a list of principals (admins, users,
    principal_users), which tell a caller where the secrets are and whom to be."""
    kind = _TYPES[name]
    return name not in _PATH_STRINGS and kind not in (
        Path, _OPTIONAL_PATH, _PRINCIPALS, _PRINCIPAL_MAP)


def to_public(config: NimbusConfig) -> dict[str, Any]:
    """The public settings (:func:`is_public`) as JSON-ready values (lists as lists)."""
    return {name: list(v) if isinstance(v, tuple) else v
            for name, v in dataclasses.asdict(config).items() if is_public(name)}
