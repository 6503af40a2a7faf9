#!/usr/bin/env python3
"""Make certificates for running nimbus-thrift over mutual TLS: a CA, the daemon's
certificate and one certificate per client, with the ``openssl`` command.

    scripts/tls/make_certs.py certs --host nimbus.example.org --client alice --client ci
    scripts/tls/make_certs.py certs --no-server --client bob         # add a client later
    scripts/tls/make_certs.py certs --client alice --p12-password s3cret   # Java clients

In ``certs/`` (keys mode 0600, the directory 0700 when it is made):

    ca.pem, ca.key              the CA; clients trust ca.pem, the daemon checks client
                                certificates against it (tls_client_ca_file)
    server.pem, server.key      the daemon's certificate (tls_cert_file, tls_key_file),
                                naming localhost, 127.0.0.1, ::1 and every --host
    NAME.pem, NAME.key          a client's certificate, common name NAME: the principal
                                the daemon sees (--tls-cert, --tls-key of the CLI)
    NAME.p12                    with --p12-password: NAME's key, certificate and the CA
                                in a PKCS12 key store (Java's TSSLTransportFactory)
    truststore.p12              with --p12-password and Java's keytool: ca.pem as a
                                trusted entry, for the Java client's trust store

An existing CA in the directory is used again, so clients can be added later; an
existing server or client certificate is not overwritten unless --force is given. To
start over with a new CA, remove the directory. Keys are ECDSA P-256, which the Python,
Java, Node and C++ clients all accept and which take milliseconds to make.

This is for tests and small teams; a CA whose key sits next to its certificates is not
a production PKI. Exit status 1 with one sentence on error.
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

#: Debian's openssl; any OpenSSL 1.1.1 or later on PATH does too.
OPENSSL = "/usr/bin/openssl" if os.path.exists("/usr/bin/openssl") else "openssl"
CA_NAME = "ca"
SERVER_NAME = "server"
TRUSTSTORE_NAME = "truststore"
CA_COMMON_NAME = "nimbus-thrift test CA"
#: Names every server certificate lists, so that a client on the daemon's own machine
#: can check the name it connects to, whichever loopback form it uses.
LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")
#: A year: long enough for a test setup to outlive its first team, short enough that a
#: forgotten test certificate does not stay valid for a decade.
DEFAULT_DAYS = 365
CA_DAYS = 3650
#: A common name is also a file name here and a principal in the daemon's ACLs; these
#: characters need no escaping in either, nor in openssl's -subj.
_COMMON_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
_HOST_NAME = re.compile(r"(\*\.)?[A-Za-z0-9]([A-Za-z0-9-]{0,62})(\.[A-Za-z0-9]([A-Za-z0-9-]{0,62}))*")
_P12_PASSWORD_ENV = "NIMBUS_THRIFT_P12_PASSWORD"
#: keytool's minimum store password length.
MIN_P12_PASSWORD = 6


class CertError(Exception):
    """A request the script refuses, or an openssl failure, in one sentence."""


@dataclass(frozen=True)
class Issued:
    """A certificate and its key (and its PKCS12 store, if one was made)."""

    cert: Path
    key: Path
    p12: Path | None = None


def _openssl(*args: str, stdin: bytes | None = None, env: dict[str, str] | None = None
             ) -> bytes:
    try:
        done = subprocess.run([OPENSSL, *args], input=stdin, capture_output=True,
                              env=None if env is None else {**os.environ, **env},
                              check=False)
    except FileNotFoundError:
        raise CertError(f"cannot run {OPENSSL}: it is not installed (apt-get install "
                        f"openssl)") from None
    if done.returncode != 0:
        lines = done.stderr.decode(errors="replace").strip().splitlines()
        last = lines[-1] if lines else f"exit status {done.returncode}"
        raise CertError(f"openssl {args[0]} failed: {last}")
    return done.stdout


def _write(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to ``path`` with ``mode``; a key is never readable by others,
    not even for a moment (the mode is set when the file is created)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)          # an existing file (--force) keeps its old mode
        os.write(fd, data)
    finally:
        os.close(fd)


def _new_key() -> bytes:
    return _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256")


def _time(when: dt.datetime) -> str:
    return when.astimezone(dt.timezone.utc).strftime("%Y%m%d%H%M%SZ")


def check_common_name(name: str) -> str:
    """Return ``name`` if it can be a client's common name and file name.

    Raises:
        CertError: it cannot, or it is one of the names the script uses itself.
    """
    if not _COMMON_NAME.fullmatch(name):
        raise CertError(f"client name {name!r} must be 1 to 64 letters, digits, '.', '_', "
                        f"'@' or '-', starting with a letter or digit")
    if name in (CA_NAME, SERVER_NAME, TRUSTSTORE_NAME):
        raise CertError(f"client name {name!r} is taken by the script's own {name}.pem")
    return name


def _san(hosts: Iterable[str], local_names: bool = True) -> str:
    entries: list[str] = []
    for host in dict.fromkeys([*(LOCAL_NAMES if local_names else ()), *hosts]):
        try:
            entries.append(f"IP:{ipaddress.ip_address(host)}")
        except ValueError:
            if not _HOST_NAME.fullmatch(host) or len(host) > 253:
                raise CertError(f"--host {host!r} is neither an IP address nor a DNS "
                                f"name") from None
            entries.append(f"DNS:{host}")
    return ", ".join(entries)


def make_ca(out: Path, *, days: int = CA_DAYS) -> Issued:
    """The CA in ``out`` (``ca.pem``, ``ca.key``): the one there, else a new one.

    Raises:
        CertError: only one of the two files exists, or openssl failed.
    """
    cert, key = out / f"{CA_NAME}.pem", out / f"{CA_NAME}.key"
    if cert.exists() and key.exists():
        return Issued(cert, key)
    if cert.exists() or key.exists():
        half = cert if cert.exists() else key
        raise CertError(f"{half} exists without its {'key' if half == cert else 'certificate'}"
                        f"; remove it or the directory to make a new CA")
    out.mkdir(mode=0o700, parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="nimbus-ca-") as tmp:
        config = Path(tmp) / "ca.cnf"
        config.write_text(
            "[req]\nprompt = no\ndistinguished_name = dn\nx509_extensions = ca_ext\n"
            f"[dn]\nCN = {CA_COMMON_NAME}\n"
            "[ca_ext]\nbasicConstraints = critical, CA:TRUE, pathlen:0\n"
            "keyUsage = critical, keyCertSign, cRLSign\n"
            "subjectKeyIdentifier = hash\n")
        key_pem = _new_key()
        key_tmp = Path(tmp) / "ca.key"
        _write(key_tmp, key_pem, 0o600)
        cert_pem = _openssl("req", "-x509", "-new", "-config", str(config), "-key",
                            str(key_tmp), "-sha256", "-days", str(days))
    _write(key, key_pem, 0o600)
    _write(cert, cert_pem, 0o644)
    return Issued(cert, key)


def issue(out: Path, name: str, common_name: str, *, kind: str, ca: Issued,
          hosts: Sequence[str] = (), days: int = DEFAULT_DAYS,
          not_before: dt.datetime | None = None, not_after: dt.datetime | None = None,
          local_names: bool = True, force: bool = False) -> Issued:
    """Make ``NAME.pem`` and ``NAME.key`` in ``out``, signed by ``ca``.

    Args:
        kind: ``"server"`` (extended key usage serverAuth; the names are localhost,
            127.0.0.1, ::1 and ``hosts``) or ``"client"`` (clientAuth).
        days: validity from now, unless ``not_before``/``not_after`` say otherwise
            (tests make expired certificates with both in the past).
        local_names: a server certificate lists localhost, 127.0.0.1 and ::1 too
            (tests turn it off for one that does not name the host they connect to).
        force: overwrite existing files.

    Raises:
        CertError: a file exists (without ``force``), a bad host, openssl failed.
    """
    if kind not in ("server", "client"):
        raise CertError(f"kind must be 'server' or 'client', not {kind!r}")
    cert, key = out / f"{name}.pem", out / f"{name}.key"
    _refuse_existing([cert, key], force)
    start = not_before or dt.datetime.now(dt.timezone.utc)
    end = not_after or start + dt.timedelta(days=days)
    if end <= start:
        raise CertError(f"the certificate {name} would end ({end}) before it begins ({start})")
    usage = "serverAuth" if kind == "server" else "clientAuth"
    names = _san(hosts, local_names) if kind == "server" else ""
    san = f"subjectAltName = {names}\n" if names else ""
    with tempfile.TemporaryDirectory(prefix="nimbus-cert-") as tmp:
        work = Path(tmp)
        (work / "index.txt").write_text("")
        config = work / "ca.cnf"
        # Only the temporary directory's paths go into the file (openssl's config
        # syntax would expand a '$' in a user's path); the CA's are flags.
        config.write_text(
            "[ca]\ndefault_ca = ca_default\n"
            f"[ca_default]\ndatabase = {work}/index.txt\nnew_certs_dir = {work}\n"
            "default_md = sha256\npolicy = policy_any\nrand_serial = yes\n"
            "unique_subject = no\ncopy_extensions = none\nemail_in_dn = no\n"
            "[policy_any]\ncommonName = supplied\n"
            "[leaf]\nbasicConstraints = critical, CA:FALSE\n"
            "keyUsage = critical, digitalSignature\n"
            f"extendedKeyUsage = {usage}\n{san}"
            "subjectKeyIdentifier = hash\nauthorityKeyIdentifier = keyid\n")
        key_pem = _new_key()
        key_tmp = work / "leaf.key"
        _write(key_tmp, key_pem, 0o600)
        csr = work / "leaf.csr"
        csr.write_bytes(_openssl("req", "-new", "-key", str(key_tmp), "-subj",
                                 f"/CN={common_name}"))
        cert_tmp = work / "leaf.pem"
        _openssl("ca", "-batch", "-config", str(config), "-extensions", "leaf", "-notext",
                 "-cert", str(ca.cert), "-keyfile", str(ca.key), "-in", str(csr),
                 "-out", str(cert_tmp), "-startdate", _time(start), "-enddate", _time(end))
        cert_pem = cert_tmp.read_bytes()
    _write(key, key_pem, 0o600)
    _write(cert, cert_pem, 0o644)
    return Issued(cert, key)


def export_p12(out: Path, issued: Issued, ca: Issued, name: str, password: str, *,
               force: bool = False) -> Issued:
    """``NAME.p12``: the key, its certificate and the CA, under ``password`` (which
    reaches openssl through its environment, not its command line).

    Raises:
        CertError: the file exists (without ``force``), openssl failed.
    """
    p12 = out / f"{name}.p12"
    _refuse_existing([p12], force)
    data = _openssl("pkcs12", "-export", "-in", str(issued.cert), "-inkey", str(issued.key),
                    "-certfile", str(ca.cert), "-name", name,
                    "-passout", f"env:{_P12_PASSWORD_ENV}",
                    env={_P12_PASSWORD_ENV: password})
    _write(p12, data, 0o600)
    return Issued(issued.cert, issued.key, p12)


def java_truststore(out: Path, ca: Issued, password: str, *, force: bool = False
                    ) -> Path | None:
    """``truststore.p12`` holding ca.pem as a trusted entry, made with Java's keytool
    (openssl 3.0 cannot mark an entry trusted for Java); None without keytool."""
    keytool = shutil.which("keytool")
    if keytool is None:
        return None
    store = out / f"{TRUSTSTORE_NAME}.p12"
    _refuse_existing([store], force)
    store.unlink(missing_ok=True)      # keytool adds to an existing store
    done = subprocess.run([keytool, "-importcert", "-noprompt", "-alias", "nimbus-ca",
                           "-file", str(ca.cert), "-keystore", str(store),
                           "-storetype", "PKCS12", "-storepass:env", _P12_PASSWORD_ENV],
                          capture_output=True, env={**os.environ, _P12_PASSWORD_ENV: password},
                          check=False)
    if done.returncode != 0:
        raise CertError(f"keytool failed: {done.stdout.decode(errors='replace').strip()}")
    os.chmod(store, 0o644)
    return store


def _refuse_existing(paths: Iterable[Path], force: bool) -> None:
    if force:
        return
    existing = [str(p) for p in paths if p.exists()]
    if existing:
        raise CertError(f"{', '.join(existing)} already exist{'s' if len(existing) == 1 else ''}"
                        f"; pass --force to make {'it' if len(existing) == 1 else 'them'} "
                        f"again (with the same CA)")


def make_all(out: Path, *, hosts: Sequence[str] = (), clients: Sequence[str] = (),
             server: bool = True, p12_password: str | None = None,
             days: int = DEFAULT_DAYS, force: bool = False) -> list[Path]:
    """What the command does: the CA (kept if there), the server certificate (unless
    ``server`` is False), each client's; with ``p12_password`` the PKCS12 stores.
    Everything is checked before anything is written. Returns the files written.

    Raises:
        CertError: a bad name or host, a file that exists (without ``force``).
    """
    if days < 1:
        raise CertError(f"--days must be at least 1, not {days}")
    names = [check_common_name(c) for c in clients]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise CertError(f"client {duplicates[0]!r} is given twice")
    if not server and not names:
        raise CertError("nothing to make: --no-server and no --client")
    if p12_password is not None and len(p12_password) < MIN_P12_PASSWORD:
        raise CertError(f"--p12-password must be at least {MIN_P12_PASSWORD} characters "
                        f"(Java's keytool refuses a shorter store password)")
    _san(hosts)                                  # refuse a bad --host before writing
    planned = ([out / f"{SERVER_NAME}.pem", out / f"{SERVER_NAME}.key"] if server else [])
    for name in names:
        planned += [out / f"{name}.pem", out / f"{name}.key"]
        if p12_password is not None:
            planned.append(out / f"{name}.p12")
    _refuse_existing(planned, force)
    ca_existed = (out / f"{CA_NAME}.pem").exists()
    ca = make_ca(out)
    written = [] if ca_existed else [ca.cert, ca.key]
    if server:
        issued = issue(out, SERVER_NAME, SERVER_NAME, kind="server", ca=ca, hosts=hosts,
                       days=days, force=force)
        written += [issued.cert, issued.key]
    for name in names:
        issued = issue(out, name, name, kind="client", ca=ca, days=days, force=force)
        written += [issued.cert, issued.key]
        if p12_password is not None:
            p12 = export_p12(out, issued, ca, name, p12_password, force=force).p12
            assert p12 is not None
            written.append(p12)
    if p12_password is not None:
        store = java_truststore(out, ca, p12_password, force=True)
        if store is not None:
            written.append(store)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Make a test CA, the nimbus daemon's certificate and client "
                    "certificates (for mutual TLS).")
    parser.add_argument("out", type=Path, help="directory to write into (made if missing)")
    parser.add_argument("--host", action="append", default=[],
                        help="a DNS name or IP address the server certificate lists, "
                             "besides localhost, 127.0.0.1 and ::1; repeatable")
    parser.add_argument("--client", action="append", default=[], metavar="NAME",
                        help="make a client certificate with common name NAME (the "
                             "principal the daemon sees); repeatable")
    parser.add_argument("--no-server", dest="server", action="store_false",
                        help="do not make the server certificate (to add clients)")
    parser.add_argument("--p12-password", help="also write NAME.p12 for each client and "
                                               "truststore.p12 (Java), with this password")
    parser.add_argument("--days", type=int, default=DEFAULT_DAYS,
                        help=f"validity of the new certificates (default {DEFAULT_DAYS})")
    parser.add_argument("--force", action="store_true",
                        help="overwrite existing server and client files (the CA is kept)")
    args = parser.parse_args(argv)
    try:
        written = make_all(args.out, hosts=args.host, clients=args.client,
                           server=args.server, p12_password=args.p12_password,
                           days=args.days, force=args.force)
    except CertError as exc:
        print(f"make_certs: {exc}", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
