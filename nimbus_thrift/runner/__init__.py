"""Runs a topology as one Spark Structured Streaming query.

``spec``, ``rundir``, ``plan``, ``figures`` and the user-code modules ``usercode``,
``decode``, ``columns``, ``emitter`` and ``tasks`` import no PySpark (the daemon imports
the first two); ``source``, ``dataflow``, ``query``, ``driver`` and ``local`` are the
Spark side, imported only where a topology runs.
"""
