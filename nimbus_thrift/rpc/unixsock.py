"""The server's Unix domain socket listener: binding it safely (a stale file from a
crashed server is replaced, a live server's is not), and who is on the other end
(SO_PEERCRED: the kernel's word for the peer's process and user, which the peer cannot
forge), which becomes the connection's principal.

Why a Unix socket at all: on one machine it identifies the caller without certificates,
and its file mode (0660 by default) decides who may connect.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
import struct
from typing import NamedTuple

from .localpeer import user_name

_UCRED = struct.Struct("3i")      # struct ucred: pid, uid, gid


class UnixListener(NamedTuple):
    sock: socket.socket
    path: str
    #: (st_dev, st_ino) of the socket file this server made: removed at stop only if
    #: the path still names it.
    identity: tuple[int, int]


def bind_unix(path: str, mode: int, backlog: int) -> UnixListener:
    """Listen on ``path`` (created with ``mode``). A socket file nobody answers on is
    left from a server that died: it is replaced. Raises OSError (EADDRINUSE) when a
    server answers there, and FileExistsError when the path is not a socket."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISSOCK(st.st_mode):
            raise FileExistsError(errno.EEXIST, "exists and is not a socket", path)
        if _answers(path):
            raise OSError(errno.EADDRINUSE, "another server listens on this socket", path)
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        # Bound under a umask that leaves it no wider than asked, then set exactly:
        # between bind and chmod nobody else may connect.
        old = os.umask(0o777 & ~mode)
        try:
            sock.bind(path)
        finally:
            os.umask(old)
        os.chmod(path, mode)
        sock.listen(backlog)
        sock.setblocking(False)
        st = os.stat(path)
    except BaseException:
        sock.close()
        raise
    return UnixListener(sock, path, (st.st_dev, st.st_ino))


def _answers(path: str) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
        return True
    except OSError:
        return False
    finally:
        probe.close()


def remove_unix(listener: UnixListener) -> None:
    """Remove the socket file at stop, if it is still the one this server made."""
    try:
        st = os.stat(listener.path)
        if (st.st_dev, st.st_ino) == listener.identity:
            os.unlink(listener.path)
    except OSError:
        pass


class PeerCredentials(NamedTuple):
    pid: int
    uid: int
    gid: int
    user: str       # the uid's login name, or the number when it has none (user_name)


def peer_credentials(sock: socket.socket) -> PeerCredentials:
    """Who connected to an accepted Unix socket (SO_PEERCRED, Linux)."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    pid, uid, gid = _UCRED.unpack(raw)
    return PeerCredentials(pid, uid, gid, user_name(uid))
