"""``python -m nimbus_thrift``: the ``nimbus-thrift`` command, for an install whose
scripts directory is not on PATH (``pip install --user``, ``--target``)."""

from .cli import main

if __name__ == "__main__":  # pragma: no cover
    main(prog_name="nimbus-thrift")
