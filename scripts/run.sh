#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh) and runs the main job in the foreground:
# the demo service (idl/demo.thrift) on 127.0.0.1:9090 until Ctrl-C or SIGTERM.
# Extra arguments go to `nimbus-thrift demo` (see --help), e.g. --port 0.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
scripts/setup.sh
exec .venv/bin/nimbus-thrift demo "$@"
