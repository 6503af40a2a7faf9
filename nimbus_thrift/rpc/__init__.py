"""The generic Thrift server and the socket-free protocol code it is built from.

Serves any thriftpy2 service; knows nothing of Nimbus, topologies or Spark. Nothing in
this package imports from the rest of nimbus_thrift (tests/unit/test_layers.py keeps it
so), which is what lets it be used, and tested, as a library of its own.

Layers, each importing only those below it::

    processes   make_server(processes=N): the parent that forks, feeds and supervises
                children       child  a child's life (its server, metrics, stop)
    children    the parent's record of each child, its requests for figures, the
                totals of children gone
    handoff     connections passed from the parent's accept to a child
    supervision options per child, the sums of metrics and per-method figures,
                back-off, child states
    control     the control channel's messages (snapshots, per-method figures in parts)
    server      Server (start, stop, metrics) and make_server
    selector    the selector thread's loop: read, hand off, write
    inline_calls  its base: calls it runs itself, the hand-over when one blocks
    lifetime    the base of that: accept, TLS handshake, the sweep of deadlines, the
                drain at stop, linger and close
    completion  a worker's side of a call: run it, send the reply, queue the outcome
    inline      which methods the selector runs itself, and the watch for blocked ones
    workers     the worker pool that runs handlers     wakeup  wakes the selector
    dispatch    decode a request, call the handler, encode the reply
    connection  per-connection framing and read-buffer accounting
    states      the connection's states, events and transition table
    deadlines   when a connection is closed: first request, frame rate, parking, writes
    memory      the server-wide read-buffer budget      metrics  counters
    methodstats calls by outcome and latency per IDL method (when asked)
    throttle    log lines at most once per peer per interval
    calls       call encoding and reply decoding for clients (no sockets)
    forms       which form a client speaks (first bytes), the request object of
                non-framed-binary forms, replies wrapped in the client's form
    binary      TBinaryProtocol (C fast path in _wire.c; pydecode the Python decoder)
    compact     TCompactProtocol (C fast path in _compact.c)
    unframed    where an unframed message ends: an incremental, bounded scan
    header      THeader frames: parse, inflate ZLIB within a limit, echo
    decoded     what decoded objects cost, charged against a per-request budget
    fastio      socket calls (C in _fastio.c)           options, errors, context
"""
