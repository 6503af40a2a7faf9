#!/usr/bin/env bash
# Sets up everything nimbus-thrift needs on a fresh Debian/Ubuntu machine, idempotently:
#   - a virtualenv in .venv with the package (editable) and its test extras;
#   - the real Thrift peers the interoperability tests talk to (scripts/install_interop.sh).
# Usage: scripts/setup.sh            (safe to run again; does only what is missing)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"

PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $($PYTHON -V)"
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.nimbus-setup-stamp
if [ ! -f "$stamp" ] || [ setup.cfg -nt "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "setup: installing nimbus-thrift and its test extras into .venv"
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e '.[test]'
  touch "$stamp"
fi

if [ -x scripts/install_interop.sh ]; then
  scripts/install_interop.sh
fi
