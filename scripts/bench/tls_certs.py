"""The benchmark's certificates, made with the ``openssl`` command.

    python scripts/bench/tls_certs.py [DIR]      # default scripts/bench/build/certs

In DIR (gitignored under scripts/bench/build/):

    ca.pem, ca.key            the CA both sides trust
    server.pem, server.key    every TLS server's certificate, for 127.0.0.1 and localhost
    client.pem, client.key    loadgen's client certificate (CN "bench"): the servers
                              require one, so every handshake is a mutual one

Keys are ECDSA P-256, as scripts/tls/make_certs.py makes for a real deployment, so a
handshake costs what it would there (an RSA-2048 server key would make each one several
times dearer for every server alike). The files are made again when one is missing or
the server certificate expires within a day; otherwise they are kept, so repeated runs
cost nothing. Exit status 1 with one sentence when openssl is missing or fails.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

DEFAULT_DIR = Path(__file__).resolve().parent / "build" / "certs"
FILES = ("ca.pem", "ca.key", "server.pem", "server.key", "client.pem", "client.key")
#: Long enough for a benchmark directory to be reused for weeks; renewed when near.
DAYS = 30
#: Renew when the server certificate expires within this many seconds.
RENEW_MARGIN_S = 86400
EC_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes")

_SERVER_EXT = """\
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
"""
_CLIENT_EXT = """\
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
"""


class CertError(Exception):
    """The certificates cannot be made; the message is one sentence."""


def _openssl(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("openssl")
    if exe is None:
        raise CertError("the `openssl` command is not installed (apt-get install openssl), "
                        "so the TLS scenarios have no certificates")
    return subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True)


def _run(*args: str, cwd: Path) -> None:
    proc = _openssl(*args, cwd=cwd)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise CertError(f"`openssl {args[0]}` failed making the benchmark's certificates: "
                        f"{tail[0]}")


def _fresh(directory: Path) -> bool:
    if not all((directory / name).is_file() for name in FILES):
        return False
    check = _openssl("x509", "-checkend", str(RENEW_MARGIN_S), "-noout", "-in", "server.pem",
                     cwd=directory)
    return check.returncode == 0


def _leaf(directory: Path, name: str, cn: str, ext: str) -> None:
    (directory / f"{name}.ext").write_text(ext)
    _run("req", *EC_KEY, "-keyout", f"{name}.key", "-out", f"{name}.csr",
         "-subj", f"/CN={cn}", cwd=directory)
    _run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
         "-CAcreateserial", "-days", str(DAYS), "-extfile", f"{name}.ext",
         "-out", f"{name}.pem", cwd=directory)


def ensure_certs(directory: Path = DEFAULT_DIR) -> Path:
    """Make the certificates in ``directory`` unless fresh ones are there; return it."""
    directory.mkdir(parents=True, exist_ok=True)
    if _fresh(directory):
        return directory
    _run("req", "-x509", *EC_KEY, "-keyout", "ca.key", "-out", "ca.pem", "-days", str(DAYS),
         "-subj", "/CN=nimbus-thrift bench CA",
         "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=directory)
    _leaf(directory, "server", "localhost", _SERVER_EXT)
    _leaf(directory, "client", "bench", _CLIENT_EXT)
    for name in FILES:
        if name.endswith(".key"):
            (directory / name).chmod(0o600)
    return directory


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        print("usage: tls_certs.py [DIR]", file=sys.stderr)
        return 2
    try:
        print(ensure_certs(Path(argv[0]) if argv else DEFAULT_DIR))
    except CertError as exc:
        print(f"tls_certs: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
