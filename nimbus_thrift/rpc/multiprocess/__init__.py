"""``make_server(processes=N)``: a parent that accepts and hands connections to forked
children, each running the server core, supervised and restarted. The daemon does not use it.
"""
