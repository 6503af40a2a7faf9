"""spark-submit's entry script: ``spark-submit spark_main.py --workdir DIR``
(``--cluster``: a driver a standalone master runs on a worker).

Run as a script (not a module), so imports are absolute; see
:mod:`nimbus_thrift.runner.driver` and :mod:`nimbus_thrift.runner.cluster_driver`
for what it does.
"""

import sys

from nimbus_thrift.runner import cluster_driver, driver

if __name__ == "__main__":
    argv = sys.argv[1:]
    sys.exit((cluster_driver if "--cluster" in argv else driver).main(argv))
