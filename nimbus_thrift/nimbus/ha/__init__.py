"""High availability (issue 28): several nimbuses on one ZooKeeper ensemble, one of
them the leader. coordinator.py holds the session, leadership.py the election and the
epoch that fences a former leader, replication.py the journal of state changes every
nimbus replays. Nothing here is imported unless ``zookeeper_servers`` is set."""
