"""What the daemon keeps: the SQLite store, the topology status table, per-topology
locks, timers, the background queues of launcher calls, and the figures per window.
"""
