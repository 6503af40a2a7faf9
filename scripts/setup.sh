#!/usr/bin/env bash
# Sets up nimbus-thrift on a fresh Debian/Ubuntu machine, idempotently, in two sizes:
#
#   scripts/setup.sh --demo   what scripts/run.sh needs: a virtualenv in .venv with the
#                             package (editable) and its spark extra, the C accelerators,
#                             Java 17 (from apt if there is none), and the Spark driver's
#                             class archive (`nimbus-thrift warm-up`: about a minute, once,
#                             so that the first topology starts as fast as later ones)
#   scripts/setup.sh          what scripts/test.sh (and CI, .ci/run) needs: the above with
#                             the test and ha extras too, streamparse's CLI, the real Thrift
#                             peers the interoperability tests talk to (the Thrift compiler,
#                             the Java and Node clients: scripts/install_interop.sh),
#                             Chromium for the browser tests (scripts/install_browser.sh)
#                             and Debian's ZooKeeper for the HA tests
#                             (scripts/install_zookeeper.sh)
#
# NIMBUS_THRIFT_WARM_UP=0 skips the warm-up. Safe to run again: does only what is missing.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"

PYTHON="${PYTHON:-python3}"
mode=test
case "${1:-}" in
  --demo) mode=demo ;;
  "") ;;
  *) echo "usage: scripts/setup.sh [--demo]" >&2; exit 2 ;;
esac

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# The C accelerators (nimbus_thrift/rpc/*.c) need a compiler and Python's headers.
# Without them the package still installs, on slower pure-Python socket calls, so
# fetch them first where apt can (tests/test_fastio.py insists on the C module).
has_headers() {
  "$PYTHON" -c 'import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'
}
if ! command -v gcc >/dev/null 2>&1 || ! has_headers; then
  if command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing gcc and python3-dev (to build the C accelerator)"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      -o DPkg::Lock::Timeout=300 gcc python3-dev >/dev/null ||
      echo "setup: could not install gcc/python3-dev; the pure-Python socket calls will be used" >&2
  fi
fi
# Spark runs on Java 17 or later (PySpark 4); the tests' Java clients need its javac too,
# which scripts/install_interop.sh checks for.
if [ -z "${JAVA_HOME:-}" ] && ! command -v java >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing Java 17 (openjdk-17-jre-headless), which Spark runs on"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      -o DPkg::Lock::Timeout=300 openjdk-17-jre-headless >/dev/null ||
      echo "setup: could not install Java 17; install it (or set JAVA_HOME) to run topologies" >&2
  else
    echo "setup: no java on PATH and JAVA_HOME is not set: install Java 17 to run topologies" >&2
  fi
fi
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $($PYTHON -V)"
  "$PYTHON" -m venv .venv
fi
# One stamp per size: the test set-up includes the demo's extras, not the reverse.
stamp=.venv/.nimbus-setup-stamp
demo_stamp=.venv/.nimbus-demo-stamp
fresh() {
  [ -f "$1" ] && [ ! setup.cfg -nt "$1" ] && [ ! pyproject.toml -nt "$1" ] && [ ! setup.py -nt "$1" ]
}
if [ "$mode" = test ] && ! fresh "$stamp"; then
  echo "setup: installing nimbus-thrift and its test, spark and ha extras into .venv"
  .venv/bin/python -m pip install --quiet --upgrade pip
  # spark: PySpark, pandas, pyarrow (the base install runs no topology); ha: kazoo.
  .venv/bin/python -m pip install --quiet -e '.[test,spark,ha]'
  touch "$stamp"
elif [ "$mode" = demo ] && ! fresh "$stamp" && ! fresh "$demo_stamp"; then
  echo "setup: installing nimbus-thrift and its spark extra into .venv"
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e '.[spark]'
  touch "$demo_stamp"
fi
# An edited accelerator is rebuilt (the editable install builds them all in place). A
# module's C files are named after it (_wire.c, _wireencode.c; setup.py lists the same),
# and an edited header in rpc/codec/ may change any of them: each is compared with the .so.
stale=""
for module in rpc/_fastio rpc/codec/_wire rpc/codec/_compact; do
  so=$(ls nimbus_thrift/$module*.so 2>/dev/null | head -n 1 || true)
  if [ -z "$so" ] || [ setup.py -nt "$so" ]; then
    stale=1
    continue
  fi
  for source in nimbus_thrift/"$module"*.c nimbus_thrift/rpc/codec/*.h; do
    if [ -e "$source" ] && [ "$source" -nt "$so" ]; then
      stale=1
    fi
  done
done
if [ -n "$stale" ]; then
  echo "setup: building the C accelerators"
  .venv/bin/python -m pip install --quiet --no-deps -e .
fi

# The rest is the test tooling; the demo stops at the warm-up.
if [ "$mode" = test ]; then

# streamparse's own CLI (`sparse`), which tests/spark/test_streamparse_cli.py runs against
# a daemon as a streamparse user would. In a venv of its own, not .venv: streamparse 5.0.1
# brings ~25 packages the daemon never uses (Fabric39 and paramiko 2.x, pathos, Cython) and
# imports pkg_resources, which recent setuptools no longer ship (84.2 has none; 80.x still
# does), so it needs an older setuptools than .venv may get; the test only runs its
# command, never imports it.
streamparse_version=5.0.1   # the wheel scripts/install_interop.sh takes Storm's IDL from
if [ ! -x .venv-streamparse/bin/sparse ]; then
  echo "setup: installing streamparse $streamparse_version into .venv-streamparse"
  "$PYTHON" -m venv .venv-streamparse
  .venv-streamparse/bin/python -m pip install --quiet "streamparse==$streamparse_version" \
    "setuptools<81"
fi

if [ -x scripts/install_interop.sh ]; then
  scripts/install_interop.sh
fi
scripts/install_browser.sh   # Chromium + ChromeDriver for the web page's browser tests
scripts/install_zookeeper.sh # Debian's ZooKeeper, which the HA tests start on ports of their own

fi   # the test tooling

# Topologies start 4-6 s sooner once the driver's class archive exists; make it now
# rather than during the first submit. Does nothing when it is there already.
if [ "${NIMBUS_THRIFT_WARM_UP:-1}" != "0" ]; then
  .venv/bin/nimbus-thrift warm-up ||
    echo "setup: the warm-up failed (above); topologies still run, the first one starts slower" >&2
fi
