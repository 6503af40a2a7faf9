#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh) and runs the main job in the foreground: the
# nimbus daemon on 127.0.0.1:6627 (state in ~/.local/share/nimbus-thrift) until Ctrl-C or
# SIGTERM. Extra arguments go to `nimbus-thrift nimbus` (see --help), e.g. --port 0 or
# --data-dir /tmp/nimbus. `nimbus-thrift demo` serves the small demo service instead.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
scripts/setup.sh
exec .venv/bin/nimbus-thrift nimbus "$@"
