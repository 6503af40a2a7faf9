"""A module of a namespace package (no __init__.py): packaged, being *.py."""


def words(line):
    return [w for w in line.lower().split() if w.isalpha()]
