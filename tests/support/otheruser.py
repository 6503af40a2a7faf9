"""Another local account for the tests of who a caller is: clients run as uid 65534
(``nobody``) in a child process, so the daemon sees a loopback client that is not the
daemon's user.

The child runs Debian's /usr/bin/python3 (the test interpreter lives under /root, which
uid 65534 cannot enter) with a few lines of the standard library: it sends the bytes it
is given (built here with thriftpy2) and prints what came back.
"""

from __future__ import annotations

import os
import pwd
import subprocess
from typing import Any

import pytest

from support.nimbus import N
from support.rawthrift import decode, frame, message

NOBODY_UID = 65534
SYSTEM_PYTHON = "/usr/bin/python3"


def _nobody() -> str | None:
    try:
        return pwd.getpwuid(NOBODY_UID).pw_name
    except KeyError:
        return None


NOBODY = _nobody()
another_account = pytest.mark.skipif(
    os.geteuid() != 0 or NOBODY is None or not os.access(SYSTEM_PYTHON, os.X_OK),
    reason="needs root (to start a child as uid 65534), an account with uid 65534 and "
           f"{SYSTEM_PYTHON}")

#: The other account's Thrift client: connect, send the request, print the uid it runs
#: as and the reply frame's payload in hex (empty if the server closed first).
THRIFT_CLIENT = """
import os, socket, struct, sys
host, port, request = sys.argv[1], int(sys.argv[2]), bytes.fromhex(sys.argv[3])
print(os.getuid())
with socket.create_connection((host, port), timeout=20) as s:
    s.sendall(request)
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
print(data[4:].hex())
"""
#: Its HTTP client: print the uid, the status, then the body.
HTTP_CLIENT = """
import http.client, os, sys
print(os.getuid())
c = http.client.HTTPConnection(sys.argv[1], int(sys.argv[2]), timeout=20)
c.request("GET", sys.argv[3])
r = c.getresponse()
print(r.status)
sys.stdout.write(r.read().decode())
"""


def as_nobody(script: str, *args: str) -> list[str]:
    """Run ``script`` as uid 65534 with the system Python; its output lines after the
    uid it checked it runs as."""
    done = subprocess.run([SYSTEM_PYTHON, "-I", "-c", script, *args], user=NOBODY_UID,
                          group=NOBODY_UID, extra_groups=[], cwd="/",
                          env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    uid, *rest = done.stdout.split("\n")
    assert int(uid) == NOBODY_UID
    return rest


def call_as_nobody(port: int, method: str, **kwargs: Any) -> Any:
    """One call of the Nimbus service on 127.0.0.1:``port`` from the other account, on
    its own connection: its result struct."""
    args = getattr(N.Nimbus, method + "_args")(**kwargs)
    request = frame(message(method, 1, args))
    (reply, *_) = as_nobody(THRIFT_CLIENT, "127.0.0.1", str(port), request.hex())
    decoded = decode(bytes.fromhex(reply), N.Nimbus)
    assert decoded.type == 2, decoded
    return decoded.body
