#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh) and runs the whole test suite: type checks on
# the package, then pytest (bytes, fakes, real sockets, real clients from other
# libraries and languages). Extra arguments go to pytest.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
scripts/setup.sh
echo "test: mypy nimbus_thrift"
.venv/bin/python -m mypy
echo "test: pytest"
exec .venv/bin/python -m pytest "$@"
