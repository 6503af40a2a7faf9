#!/bin/sh
# The control-plane benchmark of issue 26 with the project's interpreter, from any
# directory; arguments go to control_plane.py (--help lists them), e.g.
#   scripts/bench/control_plane.sh --topologies 50,500 --duration 10 --baseline main~5
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
exec "$root/.venv/bin/python" "$root/scripts/bench/control_plane.py" "$@"
