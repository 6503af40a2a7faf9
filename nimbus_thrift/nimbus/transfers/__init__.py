"""Chunked uploads and downloads of topology code: sessions, crash-safe part files, and
their IDL calls.
"""
