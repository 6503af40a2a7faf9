"""Where scripts/install_interop.sh puts Apache Thrift's own cross-language test clients, and
the ThriftTest service they call, loaded for our server.

Apache's test/ThriftTest.thrift, test/py/TestClient.py and lib/nodejs/test/client.js are in
no PyPI or npm package; they come, unmodified, from Apache Thrift's 0.17.0 source release as
Debian's mirror serves it (the upstream tarball of Debian's ``thrift`` source package, the
version of Debian's thrift-compiler). The installer extracts them, keeping Apache's layout,
because the clients find their helpers and generated code by relative paths::

    tests/interop/cache/thrifttest/
        test/ThriftTest.thrift
        test/py/TestClient.py, util.py          python3 TestClient.py --genpydir gen-py
        test/py/gen-py/ThriftTest/              thrift --gen py
        lib/nodejs/test/client.js, helpers.js, test_driver.js, test-cases.js
        lib/nodejs/test/gen-nodejs/             thrift --gen js:node
        lib/nodejs/lib/thrift -> tests/interop/thrifttest-node/node_modules/thrift/...

The Node client's own dependencies (commander, tape, node-int64 and npm thrift) are in
tests/interop/thrifttest-node/node_modules, found through NODE_PATH.
"""

from __future__ import annotations

import io
import re
from functools import lru_cache
from pathlib import Path
from types import ModuleType

import thriftpy2

from interop import INTEROP_DIR, require_file

#: The Apache Thrift release the clients come from (scripts/install_interop.sh's
#: thrift_src_version).
APACHE_THRIFT_VERSION = "0.17.0"
THRIFTTEST_DIR = INTEROP_DIR / "cache" / "thrifttest"
THRIFTTEST_IDL = THRIFTTEST_DIR / "test" / "ThriftTest.thrift"
PY_CLIENT = THRIFTTEST_DIR / "test" / "py" / "TestClient.py"
PY_GEN = THRIFTTEST_DIR / "test" / "py" / "gen-py"
NODE_CLIENT = THRIFTTEST_DIR / "lib" / "nodejs" / "test" / "client.js"
NODE_GEN = THRIFTTEST_DIR / "lib" / "nodejs" / "test" / "gen-nodejs"
NODE_MODULES = INTEROP_DIR / "thrifttest-node" / "node_modules"

# thriftpy2 0.7.1's grammar has no annotations on a namespace, and ThriftTest.thrift has one
# (`namespace xsd test (uri = '...')`, for the XSD generator). The line names no type, so the
# service is the same without it; the file on disk stays as Apache wrote it.
_ANNOTATED_NAMESPACE = re.compile(r"^namespace\s+\S+\s+\S+\s*\(.*$", re.MULTILINE)


def require_installed() -> None:
    """Fail the calling test (never skip) unless the installer has put every file in place."""
    for path, what in [
        (THRIFTTEST_IDL, "Apache's ThriftTest.thrift"),
        (PY_CLIENT, "Apache's test/py/TestClient.py"),
        (PY_GEN / "ThriftTest" / "ThriftTest.py", "ThriftTest generated Python code"),
        (NODE_CLIENT, "Apache's lib/nodejs/test/client.js"),
        (NODE_GEN / "ThriftTest.js", "ThriftTest generated Node code"),
        (NODE_MODULES / "thrift" / "package.json", "npm thrift for the Node test client"),
        (NODE_MODULES / "commander" / "package.json", "npm commander for the Node test client"),
        (NODE_MODULES / "tape" / "package.json", "npm tape for the Node test client"),
        (THRIFTTEST_DIR / "lib" / "nodejs" / "lib" / "thrift" / "index.js",
         "the lib/nodejs/lib/thrift link to npm thrift"),
    ]:
        require_file(path, what)


@lru_cache(maxsize=None)
def thrifttest_thrift(path: Path = THRIFTTEST_IDL) -> ModuleType:
    """The thriftpy2 module of Apache's ThriftTest.thrift (services ThriftTest and
    SecondService), loaded once."""
    source = _ANNOTATED_NAMESPACE.sub("", path.read_text(encoding="utf-8"))
    return thriftpy2.load_fp(io.StringIO(source), module_name="ThriftTest_thrift")
