"""Helpers shared by the test tiers: fakes of the launcher and clock, raw Thrift frames,
the Spark fixtures, a scripted launcher for daemons in subprocesses, a fake spark-submit
and a standalone Spark cluster. Importable because tests/conftest.py's folder is on
sys.path."""
