"""Who may do what: authorization (Storm's ACLs), the audit log, the TLS context, the OS
user a topology runs as, and rate-limited logging of refusals.
"""
