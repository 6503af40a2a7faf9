"""The Spark launcher: each topology is one Spark application started with spark-submit.

The only daemon code that knows Spark, and it never imports PySpark: it finds the
installation on disk and runs ``runner/spark_main.py`` in a separate process.
"""
