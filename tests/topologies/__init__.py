"""Small topologies the runner tests run (imported as ``topologies.<module>`` by the
test process, the Spark workers and spark-submit drivers: ``tests/`` is on their
PYTHONPATH)."""
