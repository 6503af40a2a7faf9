#!/usr/bin/env bash
# The main job, from a fresh machine: set up what the demo needs (scripts/setup.sh --demo:
# the package with its spark extra, Java, the warm-up; none of the test tooling), start
# the nimbus daemon, submit examples/wordcount.py to an embedded local Spark, and show the
# word counts as they grow. Ctrl-C (or --for SECONDS) kills the topology and stops the
# daemon cleanly. State lives in .run/ (see scripts/wordcount_demo.py --help).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
scripts/setup.sh --demo
exec .venv/bin/python scripts/wordcount_demo.py "$@"
