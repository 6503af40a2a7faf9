"""PySpark's worker daemon (``pyspark.daemon``) with the imports every Python worker of
a topology makes done once, in the daemon, before it forks the workers.

A standby driver runs it (``spark.python.daemon.module``, set by the launcher): Spark
ends a Python worker that has been idle for a minute, so a standby that waits longer
has none left when it is handed a topology, and each worker its first batch needs
would import PySpark's SQL side, pyarrow, pandas and the runner again (0.6-0.7 s of
CPU each, measured on 2 vCPUs); forked from this daemon, a worker starts with them.

Only modules are imported here, no threads are started (a fork copies only the
forking thread).
"""

import pyspark.daemon

import nimbus_thrift.runner.dataflow  # noqa: F401  # the runner, PySpark SQL, pyarrow
import pandas  # noqa: F401  # applyInPandasWithState's

if __name__ == "__main__":
    pyspark.daemon.manager()
