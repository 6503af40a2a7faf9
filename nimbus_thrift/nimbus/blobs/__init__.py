"""Storm's blob store: blob files and versions, keys and ACLs, placement in topologies'
work directories, and its IDL calls.
"""
