"""Runs a topology as one Spark Structured Streaming query.

``spec``, ``rundir``, ``plan``, ``figures`` and the user-code modules ``usercode``,
``decode``, ``columns``, ``emitter`` and ``tasks`` import no PySpark (the daemon imports
the first two); ``source``, ``dataflow``, ``query``, ``driver``, ``local``, ``standby`` (a
standby driver: warm-up, then waiting for its hand-off) and ``worker_daemon`` (Python
workers forked after their imports) are the Spark side, imported only where a topology
runs.
"""
