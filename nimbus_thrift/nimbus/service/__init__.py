"""The IDL's surface: the objects that answer each group of Nimbus calls, the code checks
at submit, and errors as Storm clients expect them.
"""
