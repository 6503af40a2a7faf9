"""Every setting of the daemon, declared once: the registry.

Each field of :class:`NimbusConfig` is one setting, declared with :func:`setting`: its
name (the YAML key, ``data_dir`` or ``data-dir``; the environment variable is
``NIMBUS_THRIFT_`` + the name in capitals), its type (the annotation), its default,
its command-line flag if it has one, its bounds and other rules, and one line of doc.
:data:`SETTINGS` holds them as :class:`Setting` objects, from which are made:

- the checks :class:`NimbusConfig` runs on every value (this module), and the loading
  from file < environment < flags whose errors name what the user typed (config.py);
- the daemon's flags with their defaults in their help (cli/options.py);
- the table of docs/configuration.md (:mod:`.settings_doc`).

tests/unit/test_settings_agree.py checks that they agree.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..idl import ENV_PREFIX, NIMBUS_PORT, UNIX_SOCKET_NAME, default_data_dir
# The server library's defaults are already Storm's (storm.thrift.socket.timeout.ms's 10
# minutes idle); the daemon keeps them, except its worker count (DAEMON_WORKER_THREADS).
from ..rpc.options import (DEFAULT_DECODED_SIZE_FACTOR, DEFAULT_FIRST_REQUEST_TIMEOUT,
                           DEFAULT_FRAME_READ_TIMEOUT, DEFAULT_IDLE_TIMEOUT,
                           DEFAULT_MAX_CONNECTIONS, DEFAULT_MIN_FRAME_RATE,
                           DEFAULT_PARK_TIMEOUT, DEFAULT_WRITE_TIMEOUT)
from .setting_checks import (MAX_UNIX_SOCKET_PATH_BYTES, ConfigError, _check_addresses,
                             _check_cache_dir, _check_deploy_mode, _check_ha, _check_principal_map,
                             _check_principals, _check_tls, _check_unix_socket,
                             _check_url, _check_zookeeper_root)


#: RPC workers, fewer than Storm's nimbus.thrift.threads (64, the server library's
#: default): the daemon's calls are Python work under one GIL, so more threads add no
#: throughput on 2 cores, and with every one of them runnable each step where a state
#: change lets the GIL go (its commit's fsync, the hand-off to the launcher queue) waits
#: its turn among them all. Measured with scripts/bench/control_plane.py, 100 clients:
#: with the 2 cores also busy with other work (500 topologies, closed loop),
#: deactivate+activate p50 106 ms with 8 workers, 146-173 ms with 16, 304-400 ms with
#: 64 or 128, reads ~2,400 calls/s with each; on a quiet machine (1,000 topologies),
#: 16 against 64: small reads alone 1.26x the calls/s, the mix 0.92-0.96x, state
#: changes as fast or faster (p50 61-66 against 62-73 ms). 16, not 8: submits may hold
#: 10 in their code check (service/topologies.py, CODE_CHECK_SLOTS +
#: CODE_CHECK_WAITERS) and a state change one for up to launcher_reply_wait_secs while
#: a slow launcher answers.
DAEMON_WORKER_THREADS = 16
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
#: Blob keys one principal may create (in progress too): Storm's deployments keep tens
#: of blobs per team; each row and its ACL count in max_inbox_bytes as well.
DEFAULT_MAX_BLOBS_PER_PRINCIPAL = 1000
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
#: removed). Each costs the daemon ~7 KB of memory (measured with --launcher none: 42 MB
#: empty, 112 MB holding 10,000 small ones) and a submit's checks do not grow with them
#: (admission totals are kept as topologies come and go); recovery at start is linear.
DEFAULT_MAX_TOPOLOGIES = 10_000
#: How long a call waits for its launcher operation before answering anyway (the
#: outcome then shows in the topology's status): a spark-submit spawns in well under
#: a second, a stop may take stop_grace_secs + 5 s.
DEFAULT_LAUNCHER_REPLY_WAIT_SECS = 1.0
#: Storm's ui.port: the HTTP side's default port (also Spark's standalone master UI's:
#: set ui_port when both run on one machine).
DEFAULT_UI_PORT = 8080
#: HA mode: how long ZooKeeper keeps a silent nimbus's session, so its leadership.
#: A killed leader is replaced about this long after its death (then the new leader
#: catches up and takes over): 6 s keeps the worst failover under 10 s with the client
#: finding the new leader (scripts/bench/failover.py); Storm's is 20 s.
DEFAULT_ZOOKEEPER_SESSION_TIMEOUT = 6.0
#: ui_port's "any free port" (0 is "off", as a port of 0 cannot be asked for).
UI_PORT_ANY = -1



#: The sections of docs/configuration.md, in its order.
LISTENING = "Listening and who may call"
TOPOLOGIES = "Running topologies"
LIMITS = "Limits: admission, submit-time checks, transfers"
SERVER = "The server: workers, memory, deadlines"
WEB = "The web UI, REST API and /metrics"
LOGGING = "Logging"
HA = "High availability: several nimbuses on ZooKeeper"
SECTIONS = (LISTENING, TOPOLOGIES, LIMITS, SERVER, WEB, LOGGING, HA)

#: The declared types of the settings that are not plain scalars.
PRINCIPALS = tuple[str, ...]
OPTIONAL_PATH = Path | None
OPTIONAL_STR = str | None
PRINCIPAL_MAP = tuple[tuple[str, str], ...]
#: ``host:port`` entries, or None for none (zookeeper_servers).
OPTIONAL_ADDRESSES = tuple[str, ...] | None


@dataclass(frozen=True)
class Setting:
    """One setting: what the registry knows of it (see the module's docstring)."""

    name: str                   #: the field, the YAML key
    kind: Any                   #: the declared type (a float is seconds)
    default: Any                #: the value (computed by default_factory when that is set)
    doc: str                    #: one line: the flag's help and the docs' meaning
    section: str                #: where docs/configuration.md lists it
    default_factory: Callable[[], Any] | None = None
    flag: str | None = None     #: the daemon's command-line flag (``--workers``), if any
    minimum: int | None = None  #: lowest allowed value (numbers), inclusive
    maximum: int | None = None  #: highest allowed value, inclusive
    between: str = ""           #: how the range reads when not "<minimum> and <maximum>"
    choices: tuple[str, ...] = ()
    nonempty: bool = False
    #: A string naming a path or a command (where, what runs): never shown to users,
    #: like the settings typed as paths.
    holds_path: bool = False
    unit: str = ""              #: bytes, B/s (floats are seconds)
    default_text: str = ""      #: how the default reads when its value alone does not say
    details: str = ""           #: docs/configuration.md only: more than the one line
    #: The flag's value is checked against the bounds by click, before loading.
    flag_checks_bounds: bool = False
    check: Callable[[str, Any], None] | None = None     #: a further rule

    @property
    def env(self) -> str:
        """The environment variable that sets it."""
        return ENV_PREFIX + self.name.upper()

    @property
    def flag_text(self) -> str:
        """How an error names a flag value: the CLI's flag, else the name with dashes
        (a ``flags=`` value given to load_config for a setting the CLI has no flag of)."""
        return self.flag or "--" + self.name.replace("_", "-")

    def default_value(self) -> Any:
        """The default (computed now for a default_factory one)."""
        return self.default_factory() if self.default_factory is not None else self.default

    @property
    def shown_default(self) -> str:
        """The default as the flag's help and the docs show it."""
        if self.default_text:
            return self.default_text
        value = self.default
        if isinstance(value, bool):
            return "true" if value else "false"
        if value is None or value == ():
            return "none"
        if self.kind is float:
            return f"{value:g} s"
        if self.unit == "bytes":
            return _size(value)
        return f"{value} {self.unit}" if self.unit else str(value)

    def validate(self, value: Any) -> None:
        """Raise ConfigError, naming the setting, if ``value`` breaks one of its rules."""
        name = self.name
        low, high = self.minimum, self.maximum
        if low is not None and high is not None and not low <= value <= high:
            between = self.between or f"{low} and {high}"
            raise ConfigError(f"{name} must be between {between}, not {value}")
        if low is not None and value < low:
            raise ConfigError(f"{name} must be at least {self.minimum}, not {value}")
        # By the declared type, not the value's: NimbusConfig(sweep_secs=0) passes an int.
        if self.kind is float and not (value > 0 and value != float("inf")):
            raise ConfigError(f"{name} must be a positive number of seconds, not {value}")
        if self.choices and value not in self.choices:
            spelled = ", ".join(self.choices[:-1]) + " or " + self.choices[-1]
            raise ConfigError(f"{name} must be {spelled}, not {value!r}")
        if self.nonempty and not value:
            raise ConfigError(f"{name} must not be empty")
        if self.check is not None:
            self.check(name, value)
        if self.kind is bool and not isinstance(value, bool):
            raise ConfigError(f"{name} must be true or false, not {value!r}")
        if self.kind == PRINCIPALS:
            _check_principals(name, value)
        if self.kind == PRINCIPAL_MAP:
            _check_principal_map(name, value)
        if self.kind == OPTIONAL_ADDRESSES and value is not None:
            _check_addresses(name, value)
        if self.kind == OPTIONAL_PATH and value is not None and not isinstance(value, Path):
            raise ConfigError(f"{name} must be a path, not {value!r}")


def _size(value: int) -> str:
    """Bytes as the largest binary unit they are a whole number of (256 MiB)."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value and value % size == 0:
            return f"{value // size} {unit}"
    return f"{value:,}"


#: The key under which a field's metadata holds what :func:`setting` was told.
_SPEC = "nimbus_thrift.setting"


def setting(default: Any = dataclasses.MISSING, *, doc: str, section: str,
            default_factory: Callable[[], Any] | None = None, **spec: Any) -> Any:
    """Declare a field of :class:`NimbusConfig` as a setting (the keywords are
    :class:`Setting`'s; the name and the type come from the field)."""
    metadata = {_SPEC: dict(spec, doc=doc, section=section, default_factory=default_factory)}
    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


_SEE_LIMITS = "See [Limits](daemon.md#limits)."
_SERVER_OPTIONS = "As for the server library ([Options](server-library.md#options))."


@dataclass(frozen=True)
class NimbusConfig:
    """The daemon's configuration, validated, frozen; each field is a setting of the
    registry (:data:`SETTINGS`). Build it with :func:`.config.load_config`."""

    host: str = setting(
        "127.0.0.1", flag="--host", nonempty=True, section=LISTENING,
        doc="Address to listen on; a non-loopback one needs mutual TLS or insecure.")
    port: int = setting(
        NIMBUS_PORT, flag="--port", minimum=0, maximum=65535, section=LISTENING,
        doc="TCP port to listen on (Storm's nimbus.thrift.port); 0 takes any free port.")
    data_dir: Path = setting(
        default_factory=default_data_dir, flag="--data-dir", section=LISTENING,
        default_text="~/.local/share/nimbus-thrift ($XDG_DATA_HOME)",
        doc="State database, uploads and work directories.")
    worker_threads: int = setting(
        DAEMON_WORKER_THREADS, flag="--workers", minimum=1, section=SERVER,
        doc="RPC worker threads (Storm's nimbus.thrift.threads).",
        details="Fewer than Storm's 64: on a few cores, more threads only make a state "
                "change wait longer behind reads for the GIL (measured in settings.py).")
    max_frame_size: int = setting(
        STORM_MAX_FRAME_SIZE, flag="--max-frame-size", minimum=64, unit="bytes",
        section=SERVER, default_text="1 MiB (1,048,576)",
        doc="Largest request frame (Storm's nimbus.thrift.max_buffer_size).",
        details="Not the library's 16 MB: upload chunks are 300 KiB, so a stray client "
                "cannot make the daemon buffer 16 MB per connection.")
    max_read_buffer_bytes: int = setting(
        DAEMON_MAX_READ_BUFFER_BYTES, minimum=64, unit="bytes", section=SERVER,
        doc="Bytes of frames being read, all clients together (the read budget).",
        details="Tighter than the library's 256 MiB. " + _SEE_LIMITS)
    max_read_buffer_bytes_per_peer: int = setting(
        0, minimum=0, unit="bytes", section=SERVER,
        default_text="0: a quarter of max_read_buffer_bytes (16 MiB), at least one "
                     "max_frame_size",
        doc="Bytes one client address's frames may declare at once.",
        details=_SEE_LIMITS)
    max_connections: int = setting(
        DEFAULT_MAX_CONNECTIONS, minimum=1, section=SERVER,
        doc="Open connections; at most the open-files limit less what the daemon keeps "
            "for its own files.",
        details="The daemon raises its soft open-files limit (ulimit -n) to the hard "
                "one at start, then clamps this to the limit less 512 descriptors "
                "(SQLite, uploads, launches, the web side); its nimbus_started log "
                "line says what is in force. When full, the oldest idle connection "
                "is closed to make room. " + _SERVER_OPTIONS)
    idle_timeout: float = setting(
        DEFAULT_IDLE_TIMEOUT, section=SERVER,
        doc="A connection idle this long between requests is closed.",
        details=_SERVER_OPTIONS)
    frame_read_timeout: float = setting(
        DEFAULT_FRAME_READ_TIMEOUT, section=SERVER,
        doc="A frame must arrive whole within this, from its first byte.",
        details=_SERVER_OPTIONS)
    first_request_timeout: float = setting(
        DEFAULT_FIRST_REQUEST_TIMEOUT, section=SERVER,
        doc="A new connection must deliver its first request within this.",
        details=_SERVER_OPTIONS)
    min_frame_rate: int = setting(
        DEFAULT_MIN_FRAME_RATE, minimum=1, unit="B/s", section=SERVER,
        doc="A frame arriving slower than this (after 10 s) closes its connection.",
        details=_SERVER_OPTIONS)
    park_timeout: float = setting(
        DEFAULT_PARK_TIMEOUT, section=SERVER,
        doc="A frame waits this long at most for read-buffer memory.",
        details=_SERVER_OPTIONS)
    write_timeout: float = setting(
        DEFAULT_WRITE_TIMEOUT, section=SERVER,
        doc="A client must take a reply within this.", details=_SERVER_OPTIONS)
    max_connections_per_peer: int = setting(
        0, minimum=0, section=SERVER,
        default_text="0: a quarter of max_connections",
        doc="Connections one client address may hold.",
        details="Shrinks in proportion when max_connections is clamped to the "
                "open-files limit. An address at its share loses its own oldest idle "
                "connection to a new one. " + _SERVER_OPTIONS)
    max_unsent_reply_bytes: int = setting(
        DAEMON_MAX_UNSENT_REPLY_BYTES, minimum=1, unit="bytes", section=SERVER,
        doc="Reply bytes held for clients that do not read them, all connections together.",
        details="Tighter than the library's 64 MiB. " + _SEE_LIMITS)
    send_buffer_size: int = setting(
        DAEMON_SEND_BUFFER_SIZE, minimum=0, unit="bytes", section=SERVER,
        doc="SO_SNDBUF of accepted sockets; 0 leaves it to the kernel's autotuning.",
        details="Tighter than the library's 256 KiB. " + _SEE_LIMITS)
    decoded_size_factor: int = setting(
        DEFAULT_DECODED_SIZE_FACTOR, minimum=1, section=SERVER,
        doc="A request may decode into at most this many times its frame's bytes.",
        details=_SERVER_OPTIONS)
    max_upload_bytes: int = setting(
        DEFAULT_MAX_UPLOAD_BYTES, flag="--max-upload-bytes", minimum=1, unit="bytes",
        section=LIMITS, doc="Largest code upload (and blob).")
    file_copy_expiration_secs: float = setting(
        DEFAULT_FILE_COPY_EXPIRATION_SECS, section=LIMITS,
        doc="An upload or download idle this long is dropped (Storm's "
            "nimbus.file.copy.expiration.secs).")
    upload_retention_secs: float = setting(
        DEFAULT_UPLOAD_RETENTION_SECS, section=LIMITS,
        doc="A finished upload no topology uses is deleted after this.")
    download_chunk_bytes: int = setting(
        DEFAULT_DOWNLOAD_CHUNK_BYTES, minimum=1, unit="bytes", section=LIMITS,
        doc="Bytes per downloadChunk reply (it must fit Storm clients' 1 MiB frames).")
    sweep_secs: float = setting(
        DEFAULT_SWEEP_SECS, section=LIMITS,
        doc="How often expired uploads and downloads are swept.")
    launcher: str = setting(
        "spark", flag="--launcher", nonempty=True, section=TOPOLOGIES,
        doc="What runs topologies: spark, none (store and control them, run nothing) "
            "or module:factory.")
    spark_master: str = setting(
        "local[*]", flag="--spark-master", nonempty=True, section=TOPOLOGIES,
        doc="Where topologies run: local[*] (every core here), local[N] or "
            "spark://host:port.")
    spark_submit: str = setting(
        "", holds_path=True, section=TOPOLOGIES,
        default_text="$SPARK_HOME/bin/spark-submit of the PySpark installed with the daemon",
        doc="The spark-submit to run instead, as a path or a command line.")
    spark_master_ui: str = setting(
        "", check=_check_url, section=TOPOLOGIES,
        default_text="port 8080 on the host of spark_master",
        doc="A standalone master's web UI (http://host:8080), read for getClusterInfo's "
            "supervisors.")
    deploy_mode: str = setting(
        "client", flag="--deploy-mode", choices=("client", "cluster"), section=TOPOLOGIES,
        doc="Where a topology's driver runs: client (a child of this daemon) or cluster "
            "(on a worker of the spark:// master, supervised by it).",
        details="Cluster mode submits through the standalone master's REST server "
                "(spark.master.rest.enabled); its drivers outlive the daemon. See "
                "[operations.md](operations.md#drivers-on-the-cluster).")
    spark_master_rest: str = setting(
        "", check=_check_url, section=TOPOLOGIES,
        default_text="port 6066 on the host of spark_master",
        doc="A standalone master's REST submission server (http://host:6066), used in "
            "cluster deploy mode.")
    spark_cache_dir: str = setting(
        "", holds_path=True, check=_check_cache_dir, section=TOPOLOGIES,
        default_text="~/.cache/nimbus-thrift ($XDG_CACHE_HOME); none with a custom "
                     "spark_submit",
        doc="What makes topologies start sooner, made once per Java and Spark installation; "
            "off for neither.",
        details="A symlink mirror of Spark home without the zipped PySpark and the driver "
                "JVM's class data sharing archive (about 200 MB); with off, each topology "
                "starts 5-10 s later.")
    restart_failed: bool = setting(
        True, section=TOPOLOGIES,
        doc="Relaunch a topology whose Spark application failed, from its checkpoint.",
        details="At most max_restarts times in a row, with back-off (5 s ×4 per try).")
    max_restarts: int = setting(
        DEFAULT_MAX_RESTARTS, minimum=0, section=TOPOLOGIES,
        doc="Relaunches in a row before a failing topology is left failed.")
    stop_grace_secs: float = setting(
        DEFAULT_STOP_GRACE_SECS, section=TOPOLOGIES,
        doc="A stopping topology's time to finish its batch before SIGTERM (SIGKILL 5 s "
            "later).")
    max_uploads_per_peer: int = setting(
        DEFAULT_MAX_UPLOADS_PER_PEER, minimum=1, section=LIMITS,
        doc="Uploads in progress from one client address.",
        details="Counted apart for code and for blobs. " + _SEE_LIMITS)
    max_downloads_per_peer: int = setting(
        DEFAULT_MAX_DOWNLOADS_PER_PEER, minimum=1, section=LIMITS,
        doc="Downloads in progress from one client address.",
        details="Counted apart for code and for blobs. " + _SEE_LIMITS)
    max_inbox_bytes: int = setting(
        DEFAULT_MAX_INBOX_BYTES, minimum=1, unit="bytes", section=LIMITS,
        doc="Bytes all uploads in the inbox may hold, in progress and complete together.",
        details="Code uploads and blobs together. " + _SEE_LIMITS)
    max_blobs_per_principal: int = setting(
        DEFAULT_MAX_BLOBS_PER_PRINCIPAL, minimum=1, section=LIMITS,
        doc="Blob keys one principal may have created (creates in progress count).",
        details="Every principal, admins too; the daemon's own are not counted. A "
                "blob's key and ACL also count in max_inbox_bytes. " + _SEE_LIMITS)
    min_free_disk_bytes: int = setting(
        DEFAULT_MIN_FREE_DISK_BYTES, minimum=0, unit="bytes", section=LIMITS,
        doc="A chunk is refused when storing it would leave less free disk than this.",
        details=_SEE_LIMITS)
    max_components: int = setting(
        DEFAULT_MAX_COMPONENTS, minimum=1, section=LIMITS,
        doc="Components (spouts plus bolts) one topology may have.", details=_SEE_LIMITS)
    max_code_parse_bytes: int = setting(
        DEFAULT_MAX_CODE_PARSE_BYTES, minimum=1, unit="bytes", section=LIMITS,
        doc="A module larger than this is not parsed at submit (its class is not checked).",
        details=_SEE_LIMITS)
    max_code_parse_total_bytes: int = setting(
        DEFAULT_MAX_CODE_PARSE_TOTAL_BYTES, minimum=1, unit="bytes", section=LIMITS,
        doc="Source parsed per submit at most; a topology needing more is refused.",
        details=_SEE_LIMITS)
    max_topologies: int = setting(
        DEFAULT_MAX_TOPOLOGIES, minimum=1, section=LIMITS,
        doc="Topologies kept at once; a submit beyond it is refused.", details=_SEE_LIMITS)
    spark_memory_budget: int = setting(
        0, minimum=0, unit="bytes", section=LIMITS,
        default_text="0: 80 % of the machine's memory",
        doc="Memory topologies may take together (each driver's heap and its process); "
            "a submit past it is refused.",
        details=_SEE_LIMITS)
    standby_drivers: int = setting(
        -1, minimum=-1, section=TOPOLOGIES,
        default_text="-1: 1 on a local master with PySpark's own spark-submit, else 0",
        doc="Idle Spark applications kept warmed up for submits without spark.* settings "
            "of their own; 0 turns them off.",
        details="A submit whose Spark settings match takes one and shows its first output "
                "in about 3 s instead of about 12 s ([standby drivers]"
                "(topologies.md#submitting-and-controlling-it)); on spark:// set it "
                "explicitly (a standby holds cluster cores). None in HA mode, where "
                "every driver takes the fence's claim as it starts.")
    standby_memory: int = setting(
        0, minimum=0, unit="bytes", section=TOPOLOGIES,
        default_text="0: what standby_drivers default-sized drivers take (1.7 GiB each)",
        doc="Memory standby drivers may hold together, within spark_memory_budget.",
        details="They only take what topologies leave of spark_memory_budget (a cold start "
                "stops one to make room).")
    launcher_reply_wait_secs: float = setting(
        DEFAULT_LAUNCHER_REPLY_WAIT_SECS, section=TOPOLOGIES,
        doc="How long a call waits for its launcher operation before answering (it then "
            "runs on).",
        details="The outcome then shows in the topology's sched_status and errors.")
    log_level: str = setting(
        "info", flag="--log-level", choices=("debug", "info", "warning", "error"),
        section=LOGGING, doc="The lowest level logged.")
    log_format: str = setting(
        "auto", flag="--log-format", choices=("auto", "console", "json"),
        section=LOGGING, doc="auto: console on a terminal, JSON otherwise.")
    admins: tuple[str, ...] = setting(
        (), section=LISTENING,
        doc="Principals allowed everything (Storm's nimbus.admins).",
        details="A YAML list, comma-separated in the environment.")
    users: tuple[str, ...] = setting(
        (), section=LISTENING, default_text="none: the daemon's own OS user",
        doc="Principals allowed to use the service at all (Storm's nimbus.users); with "
            "none, only the daemon's own OS user and the admins.",
        details="Submit, upload and the cluster-wide reads. A YAML list, comma-separated "
                "in the environment.")
    tls_cert_file: Path | None = setting(
        None, flag="--tls-cert", section=LISTENING,
        doc="The daemon's certificate (PEM, its chain after it); with tls_key_file the "
            "TCP port speaks TLS only.",
        details="TLS 1.2 or later.")
    tls_key_file: Path | None = setting(
        None, flag="--tls-key", section=LISTENING,
        doc="The private key of tls_cert_file (PEM, unencrypted).")
    tls_client_ca_file: Path | None = setting(
        None, flag="--tls-client-ca", section=LISTENING,
        doc="CA certificates (PEM): every TCP client must present a certificate one "
            "signed; its CN is the caller's principal.")
    insecure: bool = setting(
        False, flag="--insecure", section=LISTENING,
        doc="Allow a non-loopback host without mutual TLS (every TCP client from another "
            "machine is then anonymous).")
    unix_socket: str | None = setting(
        None, flag="--unix-socket", holds_path=True, check=_check_unix_socket,
        section=LISTENING, default_text=f"<data_dir>/{UNIX_SOCKET_NAME}",
        doc="Unix socket for local users, whose OS user is their principal; empty "
            "turns it off.",
        details="The default data directory is 0700: see [team.md](team.md) to share it.")
    ui_port: int = setting(
        DEFAULT_UI_PORT, flag="--ui-port", minimum=UI_PORT_ANY, maximum=65535,
        between="0 (off) and 65535, or -1 (any free port)", flag_checks_bounds=True,
        section=WEB, default_text=f"{DEFAULT_UI_PORT} (Storm's ui.port)",
        doc="Port of the web page, Storm UI's REST API and /metrics; 0 turns them off, "
            "-1 takes any free port.",
        details="With -1 the URL is printed and logged; a port in use stops the daemon "
                "with one sentence. Spark's standalone master UI also defaults to 8080: "
                "on one machine, set one of them. See [Watching it](daemon.md"
                "#watching-it-the-web-page-storms-rest-api-prometheus).")
    ui_host: str = setting(
        "", section=WEB, default_text="the same as host",
        doc="The HTTP side's address; not loopback needs mutual TLS or insecure, as "
            "for host.")
    allow_anonymous: bool = setting(
        False, flag="--allow-anonymous", section=LISTENING,
        doc="Let anonymous (plain TCP from another machine under insecure, a certificate "
            "without a CN) in, as a user; otherwise it may call nothing.")
    run_as_user: bool = setting(
        False, flag="--run-as-user", section=LISTENING,
        default_text="false: topologies run as the daemon's user",
        doc="Run each topology as its owner's OS user (Storm's "
            "supervisor.run.worker.as.user); needs a daemon running as root.",
        details="And an install other users can read: see [team.md](team.md"
                "#run_as_user-each-topology-as-its-owners-os-user).")
    principal_users: tuple[tuple[str, str], ...] = setting(
        (), section=LISTENING, default_text="none: a principal's own name",
        doc="With run_as_user, the OS user each certificate principal's topologies run as.",
        details="A YAML mapping; CN=user pairs, comma-separated, in the environment.")

    zookeeper_servers: tuple[str, ...] | None = setting(
        None, section=HA, default_text="none: one nimbus, state in data_dir alone",
        doc="ZooKeeper servers (host:port) of the ensemble the nimbuses elect a leader "
            "on and keep their state in; set, the daemon runs in HA mode.",
        details="A YAML list; comma-separated in the environment. Storm's "
                "storm.zookeeper.servers. Needs shared_dir. See "
                "[operations.md](operations.md#high-availability).")
    zookeeper_root: str = setting(
        "/nimbus-thrift", section=HA, check=_check_zookeeper_root,
        doc="The ZooKeeper path under which one cluster of nimbuses keeps its nodes.")
    zookeeper_session_timeout: float = setting(
        DEFAULT_ZOOKEEPER_SESSION_TIMEOUT, section=HA,
        doc="How long a nimbus that ZooKeeper stops hearing from keeps its leadership: "
            "the bulk of a failover's time.",
        details="Storm's storm.zookeeper.session.timeout is 20 s. Lower fails over "
                "sooner, but a leader whose pause (a long garbage collection, a "
                "swapping host) outlasts it loses its leadership.")
    shared_dir: Path | None = setting(
        None, section=HA, default_text="none",
        doc="HA mode: the directory of the topologies' code and work directories and of "
            "the blobs, mounted at the same path on every nimbus (NFS, a mounted "
            "object store).",
        details="data_dir keeps each nimbus's own copy of the state, its lock and socket.")

    def __post_init__(self) -> None:
        for name, declared in SETTINGS.items():
            declared.validate(getattr(self, name))
        _check_tls(self)
        _check_ha(self)
        _check_deploy_mode(self)

    @property
    def files_dir(self) -> Path:
        """Where uploads, the topologies' work directories and the blobs live: the
        shared_dir in HA mode, else the data_dir."""
        return self.shared_dir if self.shared_dir is not None else self.data_dir

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


def _registry() -> dict[str, Setting]:
    kinds = typing.get_type_hints(NimbusConfig)
    found = {}
    for field in dataclasses.fields(NimbusConfig):
        spec = dict(field.metadata[_SPEC])
        default = None if field.default is dataclasses.MISSING else field.default
        found[field.name] = Setting(name=field.name, kind=kinds[field.name],
                                    default=default, **spec)
    return found


#: Every setting, in NimbusConfig's order: name -> Setting.
SETTINGS: dict[str, Setting] = _registry()
