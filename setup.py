"""Only the C accelerators live here (_fastio: socket calls, _wire: binary decoding and
encoding, _compact: compact decoding and encoding, and the unframed scan); the metadata
is in setup.cfg.

``optional=True``: without a C compiler or Python's headers the package still installs
and runs on the pure-Python socket calls (nimbus_thrift/rpc/fastio.py says which is in
use); scripts/setup.sh installs both, so the project's own machines always build it.
"""

from setuptools import Extension, setup

_FLAGS = ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"]

setup(ext_modules=[
    Extension("nimbus_thrift.rpc._fastio", ["nimbus_thrift/rpc/_fastio.c"], extra_compile_args=_FLAGS,
              optional=True),
    Extension("nimbus_thrift.rpc._wire", ["nimbus_thrift/rpc/_wire.c"], extra_compile_args=_FLAGS,
              optional=True),
    Extension("nimbus_thrift.rpc._compact", ["nimbus_thrift/rpc/_compact.c"],
              extra_compile_args=_FLAGS, optional=True),
])
