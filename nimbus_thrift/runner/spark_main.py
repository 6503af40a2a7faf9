"""spark-submit's entry script: ``spark-submit spark_main.py --workdir DIR``.

Run as a script (not a module), so imports are absolute; see
:mod:`nimbus_thrift.runner.driver` for what it does.
"""

import sys

from nimbus_thrift.runner.driver import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
