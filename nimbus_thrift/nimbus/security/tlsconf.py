"""The daemon's server-side TLS context, from its settings (``tls_cert_file``,
``tls_key_file``, ``tls_client_ca_file``; checked for presence and readability by
:mod:`.config`, loaded here).

TLS 1.2 at least (1.0 and 1.1 are deprecated by RFC 8996), no compression (CRIME), no
renegotiation (a client could make the server redo handshakes at will), and with a
client CA every client must present a certificate it signed.
"""

from __future__ import annotations

import ssl

from ..config import ConfigError, NimbusConfig


def server_ssl_context(config: NimbusConfig) -> ssl.SSLContext | None:
    """The TLS context the daemon's TCP port serves with; None without a certificate.

    Raises:
        ConfigError: a file is not PEM, the key does not match the certificate, the key
            is encrypted (the daemon cannot ask for a passphrase), or the CA file holds
            no certificate.
    """
    cert, key, ca = config.tls_cert_file, config.tls_key_file, config.tls_client_ca_file
    if cert is None or key is None:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_COMPRESSION
    context.options |= getattr(ssl, "OP_NO_RENEGOTIATION", 0)

    def no_passphrase() -> str:
        # Without this, OpenSSL would prompt on the terminal and block the start.
        raise ConfigError(f"tls_key_file {str(key)!r} is encrypted; the daemon needs it "
                          "without a passphrase (readable by its user only)")

    try:
        context.load_cert_chain(str(cert), str(key), password=no_passphrase)
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            raise ConfigError(f"tls_key_file {str(key)!r} is not the private key of "
                              f"tls_cert_file {str(cert)!r}") from None
        raise ConfigError(f"cannot load tls_cert_file {str(cert)!r} with tls_key_file "
                          f"{str(key)!r}: {_reason(exc)}") from None
    except OSError as exc:
        raise ConfigError(f"cannot load tls_cert_file {str(cert)!r} with tls_key_file "
                          f"{str(key)!r}: {exc.strerror or exc}") from None
    if ca is not None:
        context.verify_mode = ssl.CERT_REQUIRED
        try:
            context.load_verify_locations(cafile=str(ca))
        except ssl.SSLError as exc:
            raise ConfigError(f"cannot load tls_client_ca_file {str(ca)!r}: "
                              f"{_reason(exc)}") from None
        except OSError as exc:
            raise ConfigError(f"cannot load tls_client_ca_file {str(ca)!r}: "
                              f"{exc.strerror or exc}") from None
        if not context.get_ca_certs():
            raise ConfigError(f"tls_client_ca_file {str(ca)!r} holds no CA certificate "
                              "(PEM 'BEGIN CERTIFICATE' blocks)")
    return context


def _reason(exc: ssl.SSLError) -> str:
    """OpenSSL's reason code in words (``NO_START_LINE`` -> ``no start line``)."""
    reason = exc.reason or exc.strerror or str(exc)
    return str(reason).replace("_", " ").lower()
