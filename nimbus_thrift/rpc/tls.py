"""TLS on the selector's connections: the stream object a TLS connection reads and
writes through, the handshake as one nonblocking step, and who the client is.

Theory of operation
-------------------
An accepted TCP socket is wrapped by the server's ``ssl.SSLContext`` without a
handshake (``do_handshake_on_connect=False``) and the connection starts in
HANDSHAKING (connection.py). Each time epoll reports the socket, the selector calls
:func:`handshake_step`: it returns what to wait for next (readable, writable), or that
the handshake is done, or raises :class:`HandshakeFailed` with a sentence for the log.
Before the first step, :func:`first_bytes_are_tls` checks that the client sent a
TLS record at all. Nothing of the read budget or the worker pool is used until it is
done, and
``handshake_timeout`` (deadlines.py) closes a client that never finishes.

Once done, the connection's ``io`` is a :class:`TLSStream`. The selector's and the
workers' I/O calls (fastio) pass anything that is not a descriptor to its methods of
the same names, so framing, the budget, parking, deadlines and replies written by
workers work unchanged. Two things differ from a plain socket, both handled here and
in the selector:

* the TLS layer may hold decrypted bytes the kernel no longer has (a record larger
  than the read asked for; a pipelined request in the record that ended the previous
  one): epoll will not report them, so the selector asks :meth:`TLSStream.pending`
  whenever it goes back to reading;
* a read may need a write and the reverse (TLS 1.3 key updates; session tickets):
  both are reported as "would block" and retried on the next event, as the socket
  stays registered.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable
from typing import Any

from .fastio import NATIVE_TLS
from .codec.forms import classify_prefix

#: What a verified client certificate (``SSLSocket.getpeercert()``) maps to as the
#: request's principal; it raises :class:`CertificateRefused` for a certificate that
#: may not be anyone here.
PrincipalFromCert = Callable[[dict[str, Any]], "str | None"]

#: The first byte of every TLS record carrying a handshake (a ClientHello).
_TLS_HANDSHAKE_RECORD = 0x16

#: Handshake outcomes: wait for the socket to be readable or writable, or done.
WANT_READ, WANT_WRITE, DONE = "read", "write", "done"


class HandshakeFailed(Exception):
    """The handshake cannot succeed; the message says why, for one log line."""


class CertificateRefused(Exception):
    """A verified client certificate names a principal the server will not accept
    (a :data:`PrincipalFromCert` mapping raises it): the connection is closed after
    the handshake. ``principal`` is the name it claimed, ``reason`` why it may not."""

    def __init__(self, principal: str, reason: str):
        self.principal = principal
        self.reason = reason
        super().__init__(f"client certificate for {principal!r} refused: {reason}")


def common_name(cert: dict[str, Any]) -> str | None:
    """The subject's commonName of a certificate as ``getpeercert()`` gives it (the
    default principal, as Storm takes it from the X.509 subject)."""
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


class TLSStream:
    """A TLS connection with the nonblocking socket calls fastio makes (recv_into,
    send, sendmsg), raising BlockingIOError where a socket would.

    :attr:`io` is what the connection's I/O calls take: with fastio's C module, ssl's
    own C object (``SSLSocket._sslobj``), which the C calls read and write directly
    with the same error mapping as the methods below (three Python frames fewer per
    call each way); otherwise this stream."""

    __slots__ = ("ssl", "io")

    def __init__(self, sock: ssl.SSLSocket) -> None:
        self.ssl = sock
        native = getattr(sock, "_sslobj", None) if NATIVE_TLS else None
        self.io: Any = native if native is not None else self

    def recv_into(self, buffer: Any, nbytes: int = 0, /) -> int:
        try:
            return self.ssl.recv_into(buffer, nbytes)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            raise BlockingIOError from None
        except ssl.SSLZeroReturnError:
            return 0            # the client's close_notify: end of stream
        except ssl.SSLError as exc:
            raise ConnectionError(f"TLS error: {getattr(exc, 'reason', None) or exc}") from None

    def send(self, data: Any, /) -> int:
        try:
            return self.ssl.send(data)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            raise BlockingIOError from None
        except ssl.SSLError as exc:
            raise ConnectionError(f"TLS error: {getattr(exc, 'reason', None) or exc}") from None

    def sendmsg(self, buffers: Any, /) -> int:
        # TLS has no scatter-gather write: one record stream from one buffer. A retry
        # after "would block" passes the same bytes again (see unsent_part), which is
        # what OpenSSL requires of a write it could not finish.
        return self.send(b"".join(buffers))

    def pending(self) -> int:
        """Decrypted bytes held in the TLS layer, not yet read."""
        io = self.io
        held: int = io.pending() if io is not self else self.ssl.pending()
        return held


def first_bytes_are_tls(sock: ssl.SSLSocket) -> bool:
    """Check what a new connection sent before OpenSSL sees it, without consuming it:
    True when it starts with a TLS record, False when nothing has arrived yet. A
    plaintext client raises :class:`HandshakeFailed` saying what it sent (rather than
    OpenSSL's cipher error)."""
    try:
        head = socket.socket.recv(sock, 5, socket.MSG_PEEK)
    except (BlockingIOError, InterruptedError):
        return False
    except OSError as exc:
        raise HandshakeFailed(f"connection failed before the TLS handshake: {exc}") \
            from None
    if not head:
        raise HandshakeFailed("closed by the client before the TLS handshake")
    if head[0] != _TLS_HANDSHAKE_RECORD:
        raise HandshakeFailed(f"not TLS: the client sent {_plaintext_kind(head)} "
                              f"(first bytes {head.hex()}) to a TLS port")
    return True


def handshake_step(sock: ssl.SSLSocket) -> str:
    """Advance the handshake of ``sock`` as far as it goes without blocking; return
    WANT_READ, WANT_WRITE or DONE."""
    try:
        sock.do_handshake()
    except ssl.SSLWantReadError:
        return WANT_READ
    except ssl.SSLWantWriteError:
        return WANT_WRITE
    except ssl.SSLCertVerificationError as exc:
        raise HandshakeFailed(f"client certificate refused: {exc.verify_message}") \
            from None
    except ssl.SSLError as exc:
        raise HandshakeFailed(f"TLS handshake failed: {_ssl_reason(exc)}") from None
    except OSError as exc:
        raise HandshakeFailed(f"connection failed during the TLS handshake: {exc}") \
            from None
    return DONE


def _plaintext_kind(head: bytes) -> str:
    """What a client that skipped TLS sent, for the log line."""
    kind = classify_prefix(head[:4]) if len(head) >= 4 else None
    if kind is not None:
        return kind
    if head[:1] == b"\x00" and len(head) >= 5 and head[4] in (0x80, 0x82):
        return "plaintext framed Thrift (a client without TLS)"
    return "something that is not a TLS ClientHello"


def _ssl_reason(exc: ssl.SSLError) -> str:
    reason = (getattr(exc, "reason", None) or "").replace("_", " ").lower()
    if reason in ("peer did not return a certificate", "certificate required"):
        return "the client presented no certificate, and one is required"
    return reason or str(exc)


def principal_of(sock: ssl.SSLSocket | ssl.SSLObject, mapping: PrincipalFromCert | None
                 ) -> str | None:
    """The principal of a connection whose handshake is done: from its verified client
    certificate (``mapping``, or the subject's common name), None without one.

    Raises:
        CertificateRefused: the mapping refuses the certificate's principal.
    """
    cert = sock.getpeercert()
    if not cert:
        return None
    return (mapping or common_name)(cert)
