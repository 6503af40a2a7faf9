"""Only the C accelerators live here (_fastio: socket calls; _wire: binary decoding and
encoding; _compact: compact decoding and encoding, and the unframed scan); the metadata
is in setup.cfg.

Each extension is one module built from a few C files (one job each) and headers: the
headers shared by _wire and _compact hold the plan, the decoded-size budget and the
output buffer once for both. ``depends`` lists the headers so that editing one
rebuilds the modules that include it (scripts/setup.sh checks the same files).

``optional=True``: without a C compiler or Python's headers the package still installs
and runs on the pure-Python socket calls (nimbus_thrift/rpc/fastio.py says which is in
use); scripts/setup.sh installs both, so the project's own machines always build it.
"""

from setuptools import Extension, setup

_FLAGS = ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"]
_RPC = "nimbus_thrift/rpc/"
_CODEC = "nimbus_thrift/rpc/codec/"


def _files(*names: str, where: str = _CODEC) -> list[str]:
    return [where + name for name in names]


setup(ext_modules=[
    Extension("nimbus_thrift.rpc._fastio", _files("_fastio.c", where=_RPC), extra_compile_args=_FLAGS,
              optional=True),
    Extension("nimbus_thrift.rpc.codec._wire", _files("_wire.c", "_wireencode.c"),
              depends=_files("_wirecommon.h", "_wireout.h", "_wire.h"),
              extra_compile_args=_FLAGS, optional=True),
    Extension("nimbus_thrift.rpc.codec._compact",
              _files("_compact.c", "_compactencode.c", "_compactscan.c"),
              depends=_files("_wirecommon.h", "_wireout.h", "_compact.h", "_compactread.h"),
              extra_compile_args=_FLAGS, optional=True),
])
