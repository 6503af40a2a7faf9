"""The base install (``pip install nimbus-thrift``, no ``[spark]`` extra) holds the
server library, the client, the CLI and the daemon with ``--launcher none``: none of
their modules may import PySpark, pandas, pyarrow or numpy, even lazily at import time.
Only nimbus_thrift/runner/ (which runs inside Spark) does; the daemon finds Spark on
disk without importing it. tests/packaging/ checks the same from a wheel installed
without them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from nimbus_thrift.nimbus.launcher import LauncherError
from nimbus_thrift.nimbus.spark.install import default_submit

#: What the ``spark`` extra brings (setup.cfg) and the base must not import.
SPARK_EXTRA = ("pyspark", "py4j", "pandas", "pyarrow", "numpy")

#: Imports every module of the package except the runner's (and ``__main__`` modules,
#: which would run the CLI), then prints which of SPARK_EXTRA got imported.
_PROBE = """
import importlib, json, pkgutil, sys
import nimbus_thrift
names = [m.name for m in pkgutil.walk_packages(nimbus_thrift.__path__, "nimbus_thrift.")
         if not m.name.endswith("__main__")
         and (not m.name.startswith("nimbus_thrift.runner.")
              or m.name in ("nimbus_thrift.runner.spec", "nimbus_thrift.runner.rundir"))]
for name in names:
    importlib.import_module(name)
# The lazy export tables of the package and the client resolve on access.
for name in nimbus_thrift.__all__:
    getattr(nimbus_thrift, name)
print(json.dumps({"modules": len(names),
                  "spark": sorted({m.split(".")[0] for m in sys.modules} & set(%r))}))
"""


def test_no_module_of_the_base_install_imports_the_spark_extra() -> None:
    done = subprocess.run([sys.executable, "-c", _PROBE % (SPARK_EXTRA,)],
                          capture_output=True, text=True, timeout=120, check=True)
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["modules"] > 100
    assert found["spark"] == []


def test_the_spark_launcher_without_pyspark_names_the_extra() -> None:
    with pytest.raises(LauncherError) as raised:
        default_submit(None)
    message = str(raised.value)
    assert "pip install 'nimbus-thrift[spark]'" in message
    assert message.count(". ") == 0 and "--launcher none" in message
