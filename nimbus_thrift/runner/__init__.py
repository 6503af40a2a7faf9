"""Runs a topology as one Spark Structured Streaming query.

``spec``, ``rundir``, ``plan``, ``execute`` and ``figures`` import no PySpark (the
daemon imports the first two); ``source``, ``dataflow``, ``query``, ``driver`` and
``local`` are the Spark side, imported only where a topology runs.
"""
