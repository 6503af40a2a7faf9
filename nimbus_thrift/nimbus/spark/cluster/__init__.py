"""Cluster deploy mode: each topology's driver runs on a worker of a standalone Spark
master, submitted through the master's REST server and supervised by the master, so
that it runs on while this daemon is down and another daemon adopts it by its driver
id (:mod:`.launcher`)."""
