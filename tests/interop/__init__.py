"""Helpers for the interoperability tests (tests/test_interop_*.py).

Those tests talk to the demo server with real Thrift peers that scripts/install_interop.sh
installs (it runs at the end of scripts/setup.sh):

    tests/interop/gen-py/            Apache Thrift Python code, `thrift --gen py idl/demo.thrift`
    tests/interop/node/node_modules  npm `thrift`, pinned by package-lock.json
    tests/interop/node/gen-nodejs/   `thrift --gen js:node idl/demo.thrift`
    tests/interop/node/client.js     the Node client script
    tests/interop/cache/thrifttest/  Apache Thrift 0.17.0's own cross-language test clients
                                     (test/py/TestClient.py, lib/nodejs/test/client.js) and
                                     test/ThriftTest.thrift, from its source release on
                                     Debian's mirror (pinned by sha256), unchanged
    tests/interop/thrifttest-node/node_modules  the Node test client's dependencies

A missing peer FAILS the test (never skips), so a machine without them cannot pass silently.
"""

from __future__ import annotations

from pathlib import Path

import pytest

INTEROP_DIR = Path(__file__).resolve().parent
REPO_ROOT = INTEROP_DIR.parent.parent
DEMO_IDL = REPO_ROOT / "idl" / "demo.thrift"
GEN_PY = INTEROP_DIR / "gen-py"
NODE_DIR = INTEROP_DIR / "node"
NODE_CLIENT = NODE_DIR / "client.js"
GEN_NODEJS = NODE_DIR / "gen-nodejs"

SETUP_HINT = "run scripts/setup.sh (or scripts/install_interop.sh) to install the interop peers"


def require_file(path: Path, what: str) -> Path:
    """Return ``path``; fail the calling test (not skip) if the file is missing.

    Args:
        path: a file the installer writes (for example an installed package's package.json).
        what: a few words saying what it is, for the failure message.
    """
    if not path.is_file():
        pytest.fail(f"{what} is missing ({path}): {SETUP_HINT}", pytrace=False)
    return path


def require_generated(path: Path, what: str) -> Path:
    """Like :func:`require_file`, for code generated from idl/demo.thrift: also fails if the
    file is older than the IDL (the installer regenerates it then)."""
    require_file(path, what)
    if path.stat().st_mtime < DEMO_IDL.stat().st_mtime:
        pytest.fail(f"{what} is older than {DEMO_IDL} ({path}): {SETUP_HINT}", pytrace=False)
    return path
