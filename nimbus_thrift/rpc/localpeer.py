"""Who is on the other end of an accepted loopback TCP connection: the OS user that owns
the client's socket, asked of the kernel with one exact netlink ``sock_diag`` request
(what ``ss -e`` shows as ``uid:``), so a client on this machine is its OS user, as on
the Unix socket (unixsock.py), rather than anonymous.

Theory of operation
-------------------
Both ends of a loopback connection live in this kernel. The client's socket is the one
whose local address is our peer's and whose remote address is ours; ``sock_diag``
looks exactly that socket up by its four-tuple (``inet_diag_find_one_icsk``, no dump,
nothing scanned) and answers with its owner's uid, the uid that created it (as this
process's user namespace sees it). One request and one reply on a netlink socket each
accepting thread keeps (the selector's, the HTTP loop's): 9-13 us here, ~25 us with the
user name (scripts/bench/local_peers.py).

::

    request   nlmsghdr (16)           len, SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, seq, 0
              inet_diag_req_v2 (56)   family, IPPROTO_TCP, ext 0, pad, states all,
                                      inet_diag_sockid:
                                        sport, dport (be16)   the peer's, ours
                                        src[16], dst[16]      the peer's, ours
                                        if (u32) 0, cookie (2 x u32) INET_DIAG_NOCOOKIE
    reply     nlmsghdr (16)           SOCK_DIAG_BY_FAMILY, or NLMSG_ERROR (-errno)
              inet_diag_msg (72)      family, state, timer, retrans (4 x u8),
                                      inet_diag_sockid (48), expires, rqueue, wqueue,
                                      uid, inode (5 x u32); attributes follow

The answer is trusted only when it is the socket asked for and a live one: the ports
asked for, a family it may have (an IPv4 connection's client may be an IPv6 socket on a
v4-mapped address), and an inode (the socket is still open in some process). A client
that closed before the accept leaves a time-wait socket, which the kernel reports with
uid 0 and inode 0: taking that uid would make any local account root by closing fast.
Anything else (not loopback, an NLMSG_ERROR, a timeout, a short or foreign reply) is
"unknown" (None), never a guess. The functions that build and read the messages take
and return bytes; only :class:`PeerLookup` has a socket.
"""

from __future__ import annotations

import ipaddress
import os
import pwd
import select
import socket
import struct
import time
from typing import Any, NamedTuple

#: The netlink family of socket diagnostics (linux/netlink.h).
NETLINK_SOCK_DIAG = 4
#: sock_diag's message type for a request by address family (linux/sock_diag.h).
SOCK_DIAG_BY_FAMILY = 20
#: nlmsghdr flags: a request, and nothing else (NLM_F_DUMP would scan every socket).
NLM_F_REQUEST = 0x1
#: The reply type carrying a negative errno (ENOENT: no such socket).
NLMSG_ERROR = 0x2
#: The cookie that matches any socket (linux/inet_diag.h).
INET_DIAG_NOCOOKIE = 0xFFFFFFFF
#: idiag_states: every TCP state (the exact lookup ignores it; a dump would filter).
ALL_STATES = 0xFFFFFFFF
#: TCP states whose diag answer carries no owner: a time-wait mini-socket (uid 0),
#: a listener (found only if the client's socket is gone), a request socket.
TCP_TIME_WAIT, TCP_LISTEN, TCP_NEW_SYN_RECV = 6, 10, 12
_OWNERLESS_STATES = frozenset((TCP_TIME_WAIT, TCP_LISTEN, TCP_NEW_SYN_RECV))
#: How long one lookup may wait for its reply. The kernel answers while the request is
#: being sent (the reply is queued before send() returns), so this bounds only a
#: kernel without sock_diag's inet module; the selector thread waits at most this.
LOOKUP_TIMEOUT = 0.05
#: Bytes read per reply: the fixed message (88) and the attributes the kernel adds.
_REPLY_BYTES = 8192

_NLMSGHDR = struct.Struct("=IHHII")           # len, type, flags, seq, pid
_REQ_HEAD = struct.Struct("=BBBBI")           # family, protocol, ext, pad, states
_SOCKID_ADDR = struct.Struct(">HH16s16s")     # sport, dport, src, dst (network order)
_SOCKID_TAIL = struct.Struct("=III")          # if, cookie[0], cookie[1] (host order)
_MSG_HEAD = struct.Struct("=BBBB")            # family, state, timer, retrans
_MSG_TAIL = struct.Struct("=IIIII")           # expires, rqueue, wqueue, uid, inode
_ERRNO = struct.Struct("=i")
#: Offsets in a reply (after its nlmsghdr) and its least size.
_MSG_SOCKID = _NLMSGHDR.size + _MSG_HEAD.size
_MSG_TAIL_AT = _MSG_SOCKID + _SOCKID_ADDR.size + _SOCKID_TAIL.size
REPLY_MIN_BYTES = _MSG_TAIL_AT + _MSG_TAIL.size

_V4_MAPPED = ipaddress.ip_network("::ffff:127.0.0.0/104")
#: The family a reply may carry for a request's: the socket's own. An IPv4 connection's
#: client socket may be an IPv6 one talking to a v4-mapped address (Java's sockets are
#: dual-stack), filed under IPv4 but reported as AF_INET6.
_FAMILIES_FOR: dict[int, tuple[int, ...]] = {
    socket.AF_INET: (socket.AF_INET, socket.AF_INET6), socket.AF_INET6: (socket.AF_INET6,)}


class DiagKey(NamedTuple):
    """What identifies the client's socket: its family, its address and port (our
    peer's), and the address and port it is connected to (ours), addresses packed."""

    family: int
    src: bytes
    sport: int
    dst: bytes
    dport: int


def _loopback(host: str) -> tuple[int, bytes] | None:
    """(family, packed address) of a loopback address as the kernel files the socket
    (a v4-mapped IPv6 address is its IPv4 address), or None if it is not loopback."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address in _V4_MAPPED:
        mapped = address.ipv4_mapped
        assert mapped is not None
        address = mapped
    if not address.is_loopback:
        return None
    family = socket.AF_INET if address.version == 4 else socket.AF_INET6
    return family, address.packed


def diag_key(peer: Any, local: Any) -> DiagKey | None:
    """The key of the client's socket for an accepted connection from ``peer`` to
    ``local`` (``accept()``'s and ``getsockname()``'s addresses: (host, port, ...)), or
    None when the peer is not on loopback (127.0.0.0/8, ::1, ::ffff:127.0.0.0/104) or
    the two do not make one loopback connection."""
    if not (isinstance(peer, tuple) and isinstance(local, tuple)
            and len(peer) >= 2 and len(local) >= 2):
        return None
    theirs, ours = _loopback(str(peer[0])), _loopback(str(local[0]))
    if theirs is None or ours is None or theirs[0] != ours[0]:
        return None
    return DiagKey(theirs[0], theirs[1], int(peer[1]), ours[1], int(local[1]))


def build_request(key: DiagKey, seq: int) -> bytes:
    """The netlink message asking for the one socket ``key`` names."""
    payload = (_REQ_HEAD.pack(key.family, socket.IPPROTO_TCP, 0, 0, ALL_STATES)
               + _SOCKID_ADDR.pack(key.sport, key.dport, key.src, key.dst)
               + _SOCKID_TAIL.pack(0, INET_DIAG_NOCOOKIE, INET_DIAG_NOCOOKIE))
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(payload), SOCK_DIAG_BY_FAMILY,
                          NLM_F_REQUEST, seq, 0) + payload


class Reply(NamedTuple):
    """A reply read: ``seq`` (which request it answers) and the owner's uid, or None
    when it names no live socket that matches the request."""

    seq: int | None
    uid: int | None


def parse_reply(data: bytes, key: DiagKey) -> Reply:
    """Read the first message of a reply to the request for ``key``."""
    if len(data) < _NLMSGHDR.size:
        return Reply(None, None)
    length, kind, _, seq, _ = _NLMSGHDR.unpack_from(data)
    if kind != SOCK_DIAG_BY_FAMILY or length < REPLY_MIN_BYTES or len(data) < length:
        return Reply(seq, None)             # NLMSG_ERROR (ENOENT ...), or not ours
    family, state, _, _ = _MSG_HEAD.unpack_from(data, _NLMSGHDR.size)
    sport, dport, _, _ = _SOCKID_ADDR.unpack_from(data, _MSG_SOCKID)
    _, _, _, uid, inode = _MSG_TAIL.unpack_from(data, _MSG_TAIL_AT)
    if family not in _FAMILIES_FOR[key.family] or (sport, dport) != (key.sport, key.dport) \
            or state in _OWNERLESS_STATES or inode == 0:
        return Reply(seq, None)
    return Reply(seq, uid)


def user_name(uid: int) -> str:
    """The login name of ``uid``, or the number when it has none: the principal of a
    local client (the Unix socket's too)."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


class PeerLookup:
    """Lookups on one netlink socket, made on first use: :meth:`user` for an accepted
    connection. One thread at a time (the selector's, the HTTP loop's), as accepting
    is; a forked child makes its own socket. Never raises."""

    def __init__(self, timeout: float = LOOKUP_TIMEOUT):
        self.timeout = timeout
        self._sock: socket.socket | None = None
        self._pid = 0
        self._seq = 0

    def _socket(self) -> socket.socket:
        sock = self._sock
        if sock is None or self._pid != os.getpid():
            if sock is not None:
                # Inherited across a fork: the parent's requests' replies may come here
                # (and ours there), so this process closes its copy and makes its own.
                sock.close()
            sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG)
            # Nonblocking, not a timeout: Python polls before every read of a socket
            # with one, and the reply is almost always there already (see _receive).
            sock.setblocking(False)
            self._sock, self._pid = sock, os.getpid()
        return sock

    def _receive(self, sock: socket.socket, deadline: float) -> bytes:
        """The next reply: read at once (the kernel queued it while we sent), else
        waited for until ``deadline``. Raises TimeoutError after it."""
        while True:
            try:
                return sock.recv(_REPLY_BYTES)
            except (BlockingIOError, InterruptedError):
                pass
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([sock], [], [], left)[0]:
                raise TimeoutError("no sock_diag reply")

    def uid(self, peer: Any, local: Any) -> int | None:
        """The uid owning the client's socket of a connection from ``peer`` to ``local``;
        None when the peer is not on loopback or the kernel does not say."""
        key = diag_key(peer, local)
        if key is None:
            return None
        self._seq = seq = (self._seq + 1) & 0xFFFFFFFF
        try:
            sock = self._socket()
            sock.send(build_request(key, seq))
            deadline = time.monotonic() + self.timeout
            while True:
                # A reply to an earlier request that timed out may come first: skip it.
                reply = parse_reply(self._receive(sock, deadline), key)
                if reply.seq == seq:
                    return reply.uid
        except OSError:             # no sock_diag, a timeout: start afresh next time
            self.close()
            return None

    def user(self, peer: Any, local: Any) -> str | None:
        """The OS user name (:func:`user_name`) owning the client's socket, or None."""
        uid = self.uid(peer, local)
        return user_name(uid) if uid is not None else None

    def close(self) -> None:
        """Close the netlink socket (the next lookup opens another)."""
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()


def connection_user(lookup: PeerLookup, sock: socket.socket, peer: Any) -> str | None:
    """The OS user of an accepted TCP connection's client if it is local, else None."""
    try:
        local = sock.getsockname()
    except OSError:
        return None
    return lookup.user(peer, local)

