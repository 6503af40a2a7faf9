"""Who may do what: authorization (Storm's ACLs), the audit log, the TLS context and the
OS user a topology runs as. Refusals are logged through :mod:`nimbus_thrift.rpc.throttle`.
"""
