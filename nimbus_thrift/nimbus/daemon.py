"""The nimbus daemon: state, launcher, handler and the Thrift server, started and
stopped in the right order.

    data_dir/
      nimbus.lock          held (flock) while a daemon uses the directory
      nimbus.sock          the Unix socket local users connect to (unless unix_socket
                           puts it elsewhere or turns it off)
      nimbus.sqlite3       state (WAL: also -wal and -shm files)
      ui.url               the web UI's bound URL while it serves (nimbus-thrift ui)
      inbox/               uploads: <id>.part while open, <id>.zip once finished
      topologies/<id>/     per-topology work directory (the launcher's; for the spark
                           launcher see nimbus_thrift/runner/rundir.py)

Everything in it is the owner's only: at every start the directory, ``inbox/`` and
``topologies/`` are forced to 0700 and the lock and database files to 0600 (whatever
mode they were created with, say by a data directory made 0755 beforehand), and while
a daemon runs the process's umask is 077, so what it and the processes it starts
(spark-submit, the topologies' drivers) write is owner-only too. Why: the daemon runs
other people's code on other people's data; uploaded code, confs (which may hold
credentials), checkpoints with keyed state and logs of tuples must not be readable by
every local user.

The socket file is made 0660, but inside the 0700 data directory only the daemon's
user can reach it: a team shares a daemon through a socket placed (``unix_socket``) in
a directory its group may enter.

Who may connect at all: on a loopback address anyone on the machine, each as the OS
user the kernel says owns the client's socket (rpc/localpeer.py), on the Thrift and the
HTTP side alike, and the ACLs apply to them (by default only the daemon's own user and
the admins may use the service: authz.py); on any other address only with mutual TLS
(``tls_cert_file``, ``tls_key_file``, ``tls_client_ca_file``), unless ``insecure`` says
otherwise. A certificate may not claim ``anonymous``, ``root`` or the daemon's own user
(authz.CertificatePrincipals).
"""

from __future__ import annotations

import errno
import fcntl
import ipaddress
import os
import socket
import stat
import threading
import time
from pathlib import Path
from typing import Any, Callable

import structlog

from ..idl import nimbus_idl
from ..rpc.make import make_server
from ..rpc.server import Server
from .config import ConfigError, NimbusConfig
from .settings import MAX_UNIX_SOCKET_PATH_BYTES
from .security.authz import CertificatePrincipals
from .service.handler import NimbusHandler
from .launcher import Launcher
from .security.authz import daemon_principal
from .launcher_choice import load_launcher
from .security.runas import TRAVERSE_MODE, seal_process
from .state.store import Store
from .security.tlsconf import server_ssl_context
from .web import HttpServer, make_web_server
from .web.address import forget_bound_url, ui_url, write_bound_url
from .web.limits import MAX_CONNECTIONS as WEB_MAX_CONNECTIONS

log = structlog.get_logger(__name__)

#: The data directory and the directories in it: only the daemon's user may list,
#: read or enter them.
DIR_MODE = 0o700
#: The lock file and the database (with SQLite's -wal and -shm, which SQLite creates
#: with the database's mode): only the daemon's user may read or write them.
FILE_MODE = 0o600
#: The umask while a daemon runs: new files 0600, new directories 0700, also in the
#: processes it starts (they inherit it).
DAEMON_UMASK = 0o077
DATABASE = "nimbus.sqlite3"
#: Descriptors the Thrift side's connections leave to the daemon's own files, below the
#: open-files limit (rpc ServerOptions.reserved_descriptors): SQLite's database, -wal
#: and -shm per connection, uploads and downloads being written or read (32 per peer),
#: blobs being unpacked, each launch's spark-submit pipes and log, the audit log, stdio.
#: 256 is a round figure with room for a few peers' uploads and launches at once (an
#: idle daemon with its web side holds 37); the web side's 256 slots come on top.
OWN_DESCRIPTORS = 256

# The umask is the process's, not the daemon's: several daemons in one process (tests,
# an embedding application) share it. The first start sets it and the last stop puts
# back what was there, whatever order they stop in. The CLI's process keeps it for
# good; an embedding process gets its own back once no daemon runs. Modes are forced
# explicitly as well, so the state is owner-only even if someone changes the umask
# while a daemon runs.
_umask_lock = threading.Lock()
_umask_users = 0
_umask_saved = 0


def _hold_umask() -> None:
    global _umask_users, _umask_saved
    with _umask_lock:
        if _umask_users == 0:
            _umask_saved = os.umask(DAEMON_UMASK)
        _umask_users += 1


def _release_umask() -> None:
    global _umask_users
    with _umask_lock:
        _umask_users -= 1
        if _umask_users == 0:
            os.umask(_umask_saved)


def force_mode(path: Path, mode: int) -> None:
    """Set ``path``'s permission bits to ``mode`` if it exists and they differ.

    A symbolic link is left alone (chmod would change what it points to, which the
    daemon did not create). Raises :class:`DaemonError` when the mode cannot be set
    (a directory owned by another user).
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise DaemonError(f"cannot read the mode of {path}: {exc.strerror or exc}") from None
    if stat.S_ISLNK(st.st_mode) or stat.S_IMODE(st.st_mode) == mode:
        return
    try:
        os.chmod(path, mode)
    except OSError as exc:
        raise DaemonError(f"cannot make {path} owner-only (mode {mode:04o}): "
                          f"{exc.strerror or exc}") from None
    log.info("mode_tightened", path=str(path), was=f"{stat.S_IMODE(st.st_mode):04o}",
             now=f"{mode:04o}")


class DaemonError(Exception):
    """The daemon cannot start; the message says why."""


def is_loopback(host: str) -> bool:
    """True if every address ``host`` names is a loopback address (127.0.0.0/8, ::1).
    A name that does not resolve counts as not loopback."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return False
    addresses = {info[4][0] for info in infos}
    return bool(addresses) and all(
        ipaddress.ip_address(str(a).split("%", 1)[0]).is_loopback for a in addresses)


def check_exposure(config: NimbusConfig) -> None:
    """Refuse a non-loopback host without mutual TLS, unless ``insecure`` is set: the
    daemon runs the code it is sent, so whoever reaches the port must be known.

    Raises:
        DaemonError: one sentence naming the settings.
    """
    if config.mutual_tls or config.insecure or is_loopback(config.host):
        return
    raise DaemonError(
        f"refusing to listen on {config.host}, which is not a loopback address, without "
        "mutual TLS: set tls_cert_file, tls_key_file and tls_client_ca_file (--tls-cert, "
        "--tls-key, --tls-client-ca), or insecure: true (--insecure) to let anyone who "
        "reaches the port connect as 'anonymous' (who may call nothing unless "
        "allow_anonymous is set)")


def check_ui_exposure(config: NimbusConfig) -> None:
    """The HTTP side's :func:`check_exposure`: a non-loopback ``ui_host`` needs mutual
    TLS (its actions kill topologies), unless ``insecure`` is set.

    Raises:
        DaemonError: one sentence naming the settings.
    """
    if config.ui_port == 0 or config.mutual_tls or config.insecure \
            or is_loopback(config.ui_bind_host):
        return
    raise DaemonError(
        f"refusing to serve the web UI on {config.ui_bind_host} (ui_host), which is not a "
        "loopback address, without mutual TLS: set tls_cert_file, tls_key_file and "
        "tls_client_ca_file, or insecure: true, or ui_port: 0 to turn the web UI off")


def unix_socket_of(config: NimbusConfig) -> Path | None:
    """The Unix socket to listen on, or None (turned off, or the default path inside
    a data directory too deep for a socket: logged).

    Raises:
        DaemonError: a ``unix_socket`` set explicitly whose directory does not exist.
    """
    path = config.unix_socket_path()
    if path is None:
        return None
    if config.unix_socket is None and len(os.fsencode(str(path))) > MAX_UNIX_SOCKET_PATH_BYTES:
        log.warning("unix_socket_off", path=str(path),
                    reason=f"the path is longer than the {MAX_UNIX_SOCKET_PATH_BYTES} bytes "
                           "a Unix socket may have; set unix_socket to a shorter one")
        return None
    if config.unix_socket is not None:
        if not path.parent.is_dir():
            raise DaemonError(f"cannot listen on unix_socket {path}: its directory "
                              f"{path.parent} does not exist")
        if not os.access(path.parent, os.W_OK | os.X_OK):
            raise DaemonError(f"cannot listen on unix_socket {path}: the daemon's user "
                              f"may not create files in {path.parent}")
    return path


def _open_ha(config: NimbusConfig, store: Store) -> Any:
    """HA mode's parts, connected and caught up (imported here: kazoo is needed only
    in HA mode). Raises DaemonError when ZooKeeper cannot be reached."""
    from .ha.coordinator import CoordinationError
    from .ha.node import HaNimbus
    ha = HaNimbus(config, store)
    try:
        ha.open()
    except CoordinationError as exc:
        raise DaemonError(str(exc)) from None
    return ha


class NimbusDaemon:
    """One nimbus: ``start()`` returns once it listens, ``stop()`` is graceful."""

    def __init__(self, config: NimbusConfig, *, launcher: Launcher | None = None,
                 clock: Callable[[], float] = time.time):
        self.config = config
        self._launcher = launcher
        self._clock = clock
        self._lock_fd: int | None = None
        self._umask_held = False
        self.store: Store | None = None
        #: HA mode's parts (zookeeper_servers set), else None.
        self.ha: Any = None
        self.handler: NimbusHandler | None = None
        self.server: Server | None = None
        #: The HTTP side (web page, Storm UI REST API, /metrics); None when ui_port is 0.
        self.web: HttpServer | None = None
        #: Where the HTTP side is reached (``http://127.0.0.1:8080``), once started.
        self.ui_url: str | None = None

    def start(self) -> tuple[str, int]:
        """Open the data directory, recover, and serve.

        Raises:
            DaemonError: the directory is unusable or in use, the launcher cannot start.
            OSError: the address cannot be bound.
        """
        config = self.config
        check_exposure(config)
        check_ui_exposure(config)
        try:
            ssl_context = server_ssl_context(config)
        except ConfigError as exc:
            raise DaemonError(str(exc)) from None
        # Closes /proc/<pid>/environ, memory and descriptors to the daemon's own user
        # (its topologies too, when they run as it): only root reads them then.
        sealed = seal_process()
        if config.run_as_user:
            log.info("topologies_run_as", user="their owner's OS user",
                     process_sealed=sealed)
        elif os.geteuid() == 0:
            # Not refused: containers often run as root. But every topology's code runs
            # with the daemon's rights.
            log.warning("running_as_root",
                        detail="topologies run as the daemon's user: submitted code runs "
                               "as root; set run_as_user, or run the daemon as an "
                               "unprivileged user")
        else:
            log.warning("topologies_run_as", user=daemon_principal(),
                        detail="topologies run as the daemon's OS user and can read "
                               "everything it can (its state, keys, other topologies); "
                               "set run_as_user to run each as its owner's user",
                        process_sealed=sealed)
        unix_socket = unix_socket_of(config)
        try:
            config.data_dir.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
        except OSError as exc:
            raise DaemonError(f"cannot create data directory {config.data_dir}: "
                              f"{exc.strerror or exc}") from None
        # Under run_as_user, topologies' users enter it to reach their work directory.
        force_mode(config.data_dir, TRAVERSE_MODE if config.run_as_user else DIR_MODE)
        _hold_umask()
        self._umask_held = True
        try:
            self._lock_data_dir()
        except BaseException:
            self._close_state()
            raise
        try:
            from .launcher import LauncherError
            from .state.store import StoreError
            database = config.data_dir / DATABASE
            self._force_database_modes(database)     # before SQLite opens them
            try:
                self.store = Store(database)
                launcher = self._launcher or load_launcher(config.launcher, config)
            except (StoreError, LauncherError) as exc:
                raise DaemonError(str(exc)) from None
            self._force_database_modes(database)     # and what opening created
            if config.zookeeper_servers:
                self.ha = _open_ha(config, self.store)
            self.handler = NimbusHandler(nimbus_idl(), config, self.store, launcher,
                                         clock=self._clock, role=self.ha)
            for directory in (self.handler.transfers.inbox, self.handler.blobs.dir):
                force_mode(directory, DIR_MODE)
            # Under run_as_user, each user enters their own work directory in it.
            force_mode(self.handler.topologies_dir,
                       TRAVERSE_MODE if config.run_as_user else DIR_MODE)
            if self.ha is None:
                self.handler.recover()      # in HA mode, once this nimbus leads
            transport: dict[str, Any] = {}
            if unix_socket is not None:
                transport["unix_socket"] = str(unix_socket)
            if ssl_context is not None:
                transport["ssl_context"] = ssl_context
            self.server = make_server(
                nimbus_idl().Nimbus, self.handler, host=config.host, port=config.port,
                worker_threads=config.worker_threads, max_frame_size=config.max_frame_size,
                max_read_buffer_bytes=config.max_read_buffer_bytes,
                max_read_buffer_bytes_per_peer=config.max_read_buffer_bytes_per_peer or None,
                max_connections=config.max_connections, idle_timeout=config.idle_timeout,
                frame_read_timeout=config.frame_read_timeout,
                first_request_timeout=config.first_request_timeout,
                min_frame_rate=config.min_frame_rate, park_timeout=config.park_timeout,
                write_timeout=config.write_timeout,
                max_connections_per_peer=config.max_connections_per_peer or None,
                max_unsent_reply_bytes=config.max_unsent_reply_bytes,
                send_buffer_size=config.send_buffer_size or None,
                decoded_size_factor=config.decoded_size_factor,
                # Every call stays on the worker pool: the handler takes locks, writes
                # the audit log and reads SQLite, so no method is reliably fast (rpc/
                # inline.py). Measured with cached reads (issue 26: 500 topologies, 100
                # clients, 2 busy cores): inline, reads were no faster (~5,300-6,300
                # calls/s either way), deactivate+activate no sooner, and calls kept
                # being sent back to the pool. Per-method figures feed the HTTP side's
                # /metrics (rpc/methodstats.py).
                inline_calls=False, method_metrics=True,
                # Connections never take the descriptors SQLite, uploads, launches and
                # the web side need (issue 27: idle connections from one address took
                # them all); the server clamps max_connections to the soft limit less
                # this (the CLI raises the soft limit to the hard one first).
                reserved_descriptors=OWN_DESCRIPTORS + (WEB_MAX_CONNECTIONS
                                                        if config.ui_port else 0),
                # Who calls: loopback clients as their OS user, certificates as their
                # CN but never a reserved name (authz.py).
                identify_local_peers=True,
                principal_from_cert=CertificatePrincipals(self.handler.daemon_principal),
                **transport)
            try:
                address = self.server.start()
            except OSError as exc:
                if unix_socket is None or exc.filename != str(unix_socket):
                    raise
                raise DaemonError(f"cannot listen on unix_socket {unix_socket}: "
                                  f"{exc.strerror or exc}") from None
            self.handler.start(address)
            if self.ha is not None:
                from .role import NimbusPeer
                from .service.infos import nimbus_version
                host, port = self.handler.address
                self.ha.begin(NimbusPeer(host, port, self.handler.infos.started_at,
                                         nimbus_version()),
                              on_gained=self.handler.take_over,
                              on_lost=self.handler.step_down)
            self._start_web(ssl_context)
        except BaseException:
            if self.server is not None:
                self.server.stop(grace=0)
                self.server = None
            self._close_state()
            raise
        in_force = self.server.options
        log.info("nimbus_started", host=address[0], port=address[1],
                 data_dir=str(config.data_dir), launcher=config.launcher,
                 ha=("off" if self.ha is None else
                     f"zookeeper {','.join(config.zookeeper_servers or ())}"
                     f"{config.zookeeper_root}, shared_dir {config.shared_dir}"),
                 max_connections=in_force.max_connections,
                 max_connections_per_peer=in_force.per_peer_limit,
                 open_files_limit=self.server.open_files_limit,
                 topologies=len(self.store.topologies()),
                 tls="mutual" if config.mutual_tls else "on" if ssl_context else "off",
                 unix_socket=str(unix_socket) if unix_socket is not None else None,
                 admins=len(config.admins),
                 users=len(config.users) or f"{self.handler.daemon_principal} and admins",
                 allow_anonymous=config.allow_anonymous)
        if self.ui_url is not None:
            log.info("ui_listening", url=self.ui_url)
        return address

    def _start_web(self, ssl_context: Any) -> None:
        """Start the HTTP side on ui_port (unless it is 0), with the Thrift side's TLS
        context and principal mapping.

        Raises:
            DaemonError: the port is in use or cannot be bound.
        """
        config = self.config
        if config.ui_port == 0:
            return
        assert self.handler is not None and self.server is not None
        port = 0 if config.ui_port < 0 else config.ui_port
        web = make_web_server(self.handler, lambda: self.server,
                              host=config.ui_bind_host, port=port, ssl_context=ssl_context,
                              principal_from_cert=self.server.options.principal_from_cert,
                              identify_local_peers=True)
        try:
            host, bound = web.start()
        except OSError as exc:
            reason = "is in use" if exc.errno == errno.EADDRINUSE else \
                f"cannot be bound ({exc.strerror or exc})"
            raise DaemonError(f"ui_port {config.ui_port} {reason} on {config.ui_bind_host}: "
                              "set ui_port to a free port (--ui-port), or 0 to turn the web "
                              "UI off") from None
        self.web = web
        self.ui_url = ui_url(config, bound_host=host, bound_port=bound)
        try:
            write_bound_url(config.data_dir, self.ui_url or "")
        except OSError as exc:   # only `nimbus-thrift ui` reads it: it falls back
            log.warning("ui_url_not_recorded", error=exc.strerror or str(exc))

    def stop(self, grace: float = 10.0) -> None:
        """Stop serving (in-flight calls finish within ``grace``), then close state.
        Running topologies are left running: a restarted daemon adopts them."""
        if self.web is not None:
            forget_bound_url(self.config.data_dir)
            self.web.stop()
            self.web = None
            self.ui_url = None
        if self.server is not None:
            self.server.stop(grace=grace)
            self.server = None
        self._close_state()
        log.info("nimbus_stopped")

    def _close_state(self) -> None:
        if self.ha is not None:
            if self.ha.leading() and self.handler is not None:
                # The next leader starts every topology from its checkpoint: this
                # host's drivers must not run on beside them.
                self.handler.step_down()
            self.ha.close()
            self.ha = None
        if self.handler is not None:
            self.handler.close()
            self.handler.launcher.close()
            self.handler = None
        if self.store is not None:
            self.store.close()
            self.store = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        if self._umask_held:
            self._umask_held = False
            _release_umask()

    @staticmethod
    def _force_database_modes(database: Path) -> None:
        for path in (database, database.with_name(database.name + "-wal"),
                     database.with_name(database.name + "-shm")):
            force_mode(path, FILE_MODE)

    def _lock_data_dir(self) -> None:
        path = self.config.data_dir / "nimbus.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
        try:
            os.fchmod(fd, FILE_MODE)        # one made earlier with another mode
        except OSError as exc:
            os.close(fd)
            raise DaemonError(f"cannot make {path} owner-only: {exc.strerror or exc}") \
                from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise DaemonError(f"data directory {self.config.data_dir} is in use by another "
                              f"nimbus (pid {owner})") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    def __enter__(self) -> "NimbusDaemon":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
