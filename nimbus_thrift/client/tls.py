"""TLS for the client: the ``ssl.SSLContext`` built from certificate files, and what a
failed handshake means, as one sentence.

Who refused what is told by where the failure shows (OpenSSL's words in brackets)::

    this client refuses the server's      ssl.SSLCertVerificationError, in the handshake;
      certificate                           its verify_code says why (X509_V_ERR_*)
    the server refuses this client's      an alert from the server (SSLError.reason
      certificate (or its absence)          TLSV1_ALERT_UNKNOWN_CA, ...): in the handshake
                                            with TLS 1.2; with TLS 1.3 the client's
                                            handshake has already finished, so it arrives
                                            on the first read after the request is sent
    the two cannot agree on TLS           WRONG_VERSION_NUMBER (a plaintext server),
                                            TLSV1_ALERT_PROTOCOL_VERSION, ...

A certificate failure is never retried: the same certificates fail the same way.

Socket-free: :func:`classify` reads an exception, :func:`client_context` reads files;
the transport does the I/O.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass

#: TLS 1.0 and 1.1 are deprecated (RFC 8996); Storm 2.6.4's TLS and every client named
#: in docs/server-library.md ("TLS") speak 1.2 or 1.3.
MIN_TLS_VERSION = ssl.TLSVersion.TLSv1_2

#: Why this client refused the server's certificate: X509_V_ERR_* codes (OpenSSL's
#: include/openssl/x509_vfy.h) to the cause named in TlsError.cause.
_VERIFY_CAUSES: dict[int, str] = {
    2: "unknown_ca",     # UNABLE_TO_GET_ISSUER_CERT
    18: "unknown_ca",    # DEPTH_ZERO_SELF_SIGNED_CERT
    19: "unknown_ca",    # SELF_SIGNED_CERT_IN_CHAIN
    20: "unknown_ca",    # UNABLE_TO_GET_ISSUER_CERT_LOCALLY
    21: "unknown_ca",    # UNABLE_TO_VERIFY_LEAF_SIGNATURE
    9: "not_yet_valid",  # CERT_NOT_YET_VALID
    10: "expired",       # CERT_HAS_EXPIRED
    23: "revoked",       # CERT_REVOKED
    62: "hostname",      # HOSTNAME_MISMATCH
    64: "hostname",      # IP_ADDRESS_MISMATCH
}

#: Alerts from the server (SSLError.reason) and local refusals that are not about the
#: server's certificate: the side refused ("client": this client's certificate, None:
#: TLS itself) and the cause.
_REASON_CAUSES: dict[str, tuple[str | None, str]] = {
    "TLSV13_ALERT_CERTIFICATE_REQUIRED": ("client", "no_client_cert"),
    "PEER_DID_NOT_RETURN_A_CERTIFICATE": ("client", "no_client_cert"),
    "TLSV1_ALERT_UNKNOWN_CA": ("client", "unknown_ca"),
    "SSLV3_ALERT_CERTIFICATE_EXPIRED": ("client", "expired"),
    "SSLV3_ALERT_CERTIFICATE_REVOKED": ("client", "revoked"),
    "SSLV3_ALERT_BAD_CERTIFICATE": ("client", "bad_cert"),
    "SSLV3_ALERT_CERTIFICATE_UNKNOWN": ("client", "bad_cert"),
    "SSLV3_ALERT_UNSUPPORTED_CERTIFICATE": ("client", "bad_cert"),
    "TLSV1_ALERT_ACCESS_DENIED": ("client", "bad_cert"),
    "TLSV1_ALERT_DECRYPT_ERROR": ("client", "bad_cert"),
    # A TLS 1.2 server that requires a certificate and got none answers with this
    # generic alert; also sent when no cipher is shared (see classify).
    "SSLV3_ALERT_HANDSHAKE_FAILURE": (None, "handshake_failure"),
    "WRONG_VERSION_NUMBER": (None, "not_tls"),
    "HTTP_REQUEST": (None, "not_tls"),
    "PACKET_LENGTH_TOO_LONG": (None, "not_tls"),
    "RECORD_LAYER_FAILURE": (None, "not_tls"),
    "TLSV1_ALERT_PROTOCOL_VERSION": (None, "protocol"),
    "UNSUPPORTED_PROTOCOL": (None, "protocol"),
    "NO_PROTOCOLS_AVAILABLE": (None, "protocol"),
    "NO_SHARED_CIPHER": (None, "protocol"),
}


@dataclass(frozen=True)
class ClientTls:
    """A client's TLS: the context, and the files it came from (for the messages).
    ``from_files`` is False for a caller's own context, whose contents are unknown."""

    context: ssl.SSLContext
    cert_file: str | None = None
    ca_file: str | None = None
    from_files: bool = False

    @property
    def has_certificate(self) -> bool:
        """Whether this client presents a certificate. Assumed for a caller's own
        context (it may hold one), so that a refusal is not blamed on a missing one."""
        return self.cert_file is not None or not self.from_files

    def trust(self) -> str:
        """The CAs this client trusts, as a user would recognise them."""
        if self.ca_file is not None:
            return f"ca_file {self.ca_file}"
        return "the system's CAs" if self.from_files else "its ssl_context's CAs"


def client_context(cert_file: str | os.PathLike[str] | None = None,
                   key_file: str | os.PathLike[str] | None = None,
                   ca_file: str | os.PathLike[str] | None = None) -> ClientTls:
    """A client context: TLS 1.2 at least, the server's certificate verified against
    ``ca_file`` (the system's CAs without it) and its host name checked; this client's
    certificate (``cert_file``, its key in ``key_file`` or in ``cert_file`` itself)
    presented when asked.

    Raises:
        ValueError: a file that cannot be read or is not what it should be, an
            encrypted key, a key without a certificate; in a sentence naming the file.
    """
    if key_file is not None and cert_file is None:
        raise ValueError(f"key_file {os.fspath(key_file)} was given without cert_file: the "
                         f"key belongs to a certificate, give both.")
    ca = None if ca_file is None else os.fspath(ca_file)
    cert = None if cert_file is None else os.fspath(cert_file)
    key = None if key_file is None else os.fspath(key_file)
    try:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca)
    except OSError as exc:
        raise ValueError(_file_error("ca_file", ca, exc)) from None
    context.minimum_version = MIN_TLS_VERSION
    if cert is not None:
        try:
            context.load_cert_chain(cert, key, password=_refuse_password)
        except _EncryptedKey:
            raise ValueError(f"key_file {key or cert} is encrypted; nimbus-thrift reads "
                             f"only unencrypted keys (protect it with mode 0600).") from None
        except OSError as exc:
            raise ValueError(_file_error("cert_file/key_file", f"{cert}, {key or cert}",
                                         exc)) from None
    return ClientTls(context, cert_file=cert, ca_file=ca, from_files=True)


class _EncryptedKey(Exception):
    pass


def _refuse_password() -> bytes:
    # Called by OpenSSL only for an encrypted key; without a callback it would prompt
    # on the terminal, which a CLI run from a script must never do.
    raise _EncryptedKey


def _file_error(what: str, path: str | None, exc: OSError) -> str:
    if isinstance(exc, ssl.SSLError):
        if exc.reason == "KEY_VALUES_MISMATCH":
            return f"{what} {path}: the key does not belong to the certificate."
        return f"{what} {path} is not a PEM certificate (or key) OpenSSL can read " \
               f"({exc.reason or exc})."
    return f"cannot read {what} {path}: {exc.strerror or exc}."


def classify(exc: ssl.SSLError, host: str, tls: ClientTls) -> tuple[str | None, str, str] | None:
    """What a failed handshake (or the first read after it) means: ``(refused,
    cause, sentence)``, with ``refused`` ``"server"`` (this client refused the
    server's certificate), ``"client"`` (the server refused this client's) or None
    (TLS itself failed). None when ``exc`` is not a TLS refusal (a connection that
    closed or broke mid-handshake, which a retry may cure).
    """
    if isinstance(exc, ssl.SSLCertVerificationError):
        code = exc.verify_code
        words = exc.verify_message or exc.reason or str(exc)
        cause = _VERIFY_CAUSES.get(code, "other")
        why = {
            "unknown_ca": f"which is not signed by a CA this client trusts ({tls.trust()})",
            "expired": "which has expired",
            "not_yet_valid": "which is not valid yet (are the two clocks right?)",
            "revoked": "which has been revoked",
            "hostname": f"which is not issued for {host!r} (connect with a name it lists, "
                        f"or reissue it with {host!r} among its names)",
        }.get(cause, "")
        if why:
            return "server", cause, f"this client refused the server's certificate, " \
                                    f"{why} [{words}]"
        return "server", cause, f"this client refused the server's certificate: {words}"
    if isinstance(exc, (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError)):
        return None  # the connection ended, not a refusal: the transport says so
    reason = exc.reason or ""
    refused, cause = _REASON_CAUSES.get(reason, (None, "other"))
    words = f"[{reason}]" if reason else f"[{exc}]"
    if cause == "handshake_failure" and not tls.has_certificate:
        refused, cause = "client", "no_client_cert"
    mine = f"this client's certificate ({tls.cert_file})" if tls.cert_file \
        else "this client's certificate"
    sentence = {
        "no_client_cert": "the server requires a client certificate and this client "
                          "presented none (give it a certificate and key)",
        "unknown_ca": f"the server refused {mine}, which is not signed by a CA it trusts",
        "expired": f"the server refused {mine}, which has expired",
        "revoked": f"the server refused {mine}, which has been revoked",
        "bad_cert": f"the server refused {mine}",
        "handshake_failure": "the server ended the handshake (it may require a client "
                             "certificate it did not accept, or share no cipher with "
                             "this client)",
        "not_tls": "the server does not speak TLS on this port (a plaintext port?)",
        "protocol": "the server and this client share no TLS version or cipher (this "
                    "client speaks TLS 1.2 and 1.3)",
    }.get(cause, "the TLS handshake failed")
    return refused, cause, f"{sentence} {words}"
