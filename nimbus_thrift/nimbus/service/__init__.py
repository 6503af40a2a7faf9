"""The IDL's surface: the objects that answer each group of Nimbus calls (topologies,
queries, storm2, logs, pages; the blob store's and the file transfers' in ``blobs/`` and
``transfers/``), the helpers they share (access, infos, launching), what the daemon does
on its own (upkeep), the handler that assembles them with its method table, the code
checks at submit, and errors as Storm clients expect them.
"""
