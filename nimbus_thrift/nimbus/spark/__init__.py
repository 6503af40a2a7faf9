"""The Spark launcher: each topology is one Spark application started with spark-submit.

The only daemon code that knows Spark, and it never imports PySpark: it finds the
installation on disk and runs ``runner/spark_main.py`` in a separate process.

Modules, each importing only those listed before it::

    processes   /proc, process sessions and signals, exit texts
    install     finding Spark and Java; the cache: the Spark-home mirror
    master      where a master runs applications (local threads, a standalone master)
    records     what the launcher knows of one application (launch.json)
    archive     the driver JVM's class data sharing archive and its JVM options
    submit      the code, log files, command line and environment of a launch
    status      the state and detail sentence the launcher reports
    standby     the pool of standby drivers and its state table (no processes)
    standby_app one standby driver's process and directory; the hand-off
    launcher    SparkLauncher, the Launcher of nimbus/launcher.py
    warmup      the first launch ahead of time (``nimbus-thrift warm-up``)
"""
