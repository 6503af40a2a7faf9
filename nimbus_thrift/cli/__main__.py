"""``python -m nimbus_thrift.cli``: the same command as ``nimbus-thrift``."""

from . import main

if __name__ == "__main__":  # pragma: no cover
    main()
