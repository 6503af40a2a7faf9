"""The generic Thrift server and the socket-free protocol code it is built from.

Serves any thriftpy2 service; knows nothing of Nimbus, topologies or Spark. Nothing in
this package imports from the rest of nimbus_thrift (tests/unit/test_layers.py keeps it
so), which is what lets it be used, and tested, as a library of its own.

Layers, each importing only those below it::

    make        make_server: one Server, or a parent of N processes (multiprocess/)
    multiprocess/  the parent that forks, feeds and supervises children; a child's
                life; handoff of connections; the control channel; restart back-off
    server      Server (start, stop, metrics)
    selector    the selector thread's loop: read, hand off, write; it holds
      lifetime      accept, TLS handshake, the sweep of deadlines, drain, linger, close
      inline_calls  calls it runs itself, and the hand-over when one blocks
      completion    HandBack: the workers' side of a call and the way back
    channel     what the selector holds of one connection (socket, TLS, output)
    inline      which methods the selector runs itself, the watch for blocked ones
    workers     the worker pool that runs handlers     wakeup  wakes the selector
    dispatch    decode a request, call the handler, encode the reply
    connection  per-connection framing and read-buffer accounting (no socket)
    states      the connection's states, events and transition table
    deadlines   when a connection is closed: first request, frame rate, parking, writes
    memory      the server-wide read-buffer budget      metrics  counters
    methodstats calls by outcome and latency per IDL method (when asked)
    throttle    rate-limited log lines       backoff  one schedule for every retry
    peers  tls  unixsock  localpeer  fastio (socket calls; C in _fastio.c)
    codec/      no sockets, no server: TBinaryProtocol and TCompactProtocol (C fast
                paths _wire, _compact), THeader, unframed scans, which form a client
                speaks, decoded-size costs, a client's call encoding
    options, errors, context   shared by all of the above
"""
