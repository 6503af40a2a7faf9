"""The Spark launcher: each topology is one Spark application started with spark-submit.

The only daemon code that knows Spark, and it never imports PySpark: it finds the
installation on disk and runs ``runner/spark_main.py`` in a separate process.

Modules, each importing only those listed before it::

    processes       /proc, process sessions and signals, exit texts
    install         finding Spark and Java; the cache: the Spark-home mirror
    master          where a master runs applications (local threads, a standalone master)
    memory          the memory an application takes, read from its configuration
    records         what the launcher knows of one application (launch.json)
    archive         the driver JVM's class data sharing archive and its JVM options
    submit          the code, log files, command line and environment of a launch
    status          the state and detail sentence the launcher reports
    standby         the pool of standby drivers and its state table (no processes)
    warmup_topology the topology a warm-up and the standby drivers run
    standby_app     one standby driver's process and directory; the hand-off
    app_home        the applications' SPARK_HOME (the mirror, made once)
    archive_choice  which class archive a launch maps or lists classes for
    termination     stopping an application's session: grace, SIGTERM, SIGKILL
    spawn           starting an application cold; what its record says of it
    recovery        a dead application: its death recorded, its relaunch with back-off
    standby_drivers the launcher's standbys: starting, taking, the memory they may use
    launcher        SparkLauncher, the Launcher of nimbus/launcher.py: the table of runs
    warmup          the first launch ahead of time (``nimbus-thrift warm-up``)
"""
