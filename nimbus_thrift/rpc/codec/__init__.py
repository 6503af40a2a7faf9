"""The socket-free codecs: TBinaryProtocol, TCompactProtocol, THeader, unframed messages,
which form a client speaks, decoded-size costs, and a client's call encoding; with their C
twins (_wire, _compact). Nothing here knows a socket or the server around it.
"""
