#!/usr/bin/env bash
# Runs the server benchmark (scripts/bench/bench_servers.py) after setting up what it needs,
# idempotently:
#   - the venv and package (scripts/setup.sh), plus the bench extras (thrift, uvloop);
#   - Debian's Thrift compiler, libthrift-java and a JDK, for the Apache Python and
#     Java reference servers (if apt cannot install them, those servers are reported
#     as unavailable and the others still run);
#   - Debian's libssl-dev, for the load generator's TLS (without it, loadgen is built
#     without TLS and the TLS scenarios are reported as unavailable);
#   - Debian's libthrift-dev, libevent-dev, libboost-dev and g++, for the C++
#     TNonblockingServer reference (plain and TLS; unavailable without them);
#   - the C load generator, compiled into scripts/bench/build/ (gitignored).
# Usage: scripts/bench.sh [--duration S] [--warmup S] [--servers a,b] [--scenarios c1,c16]
#                         [--tls] [--forms] [--json] [--strace] [--baseline DIR]
#                         (all arguments go to bench_servers.py)
#   cpu64 (in the default set) runs the multi-core comparison of issue 18: ours in one
#            process, ours with processes=2, and gunicorn-thrift with 2 workers (sync,
#            and gevent);
#   --tls    adds the mutual-TLS scenarios (tls16, tls256, handshakes);
#   --forms  adds the other client forms (compact16: framed compact; unframed16 and
#            unframed256: unframed binary), ours against thriftpy2's threaded server
#            started with the same transport and protocol.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"

# setup.sh also installs the interoperability-test peers (Node and so on), which the
# benchmark does not need: if that part fails but the venv exists, carry on.
if ! scripts/setup.sh >&2; then
  [ -x .venv/bin/python ] || { echo "bench: scripts/setup.sh failed and there is no .venv" >&2; exit 1; }
  echo "bench: scripts/setup.sh failed; continuing with the existing .venv" >&2
fi

stamp=.venv/.nimbus-bench-stamp
if [ ! -f "$stamp" ] || [ setup.cfg -nt "$stamp" ]; then
  echo "bench: installing the bench extras into .venv" >&2
  .venv/bin/pip install --quiet -e '.[bench]' >&2
  touch "$stamp"
fi

# gunicorn-thrift, the multi-core scenario's peer (cpu64), pins gunicorn 19.9.0,
# gevent < 1.5 and setproctitle 1.1.10: the last two do not build on Python 3.11. So:
# gunicorn 19.9.0 (20 dropped gunicorn.six, which gunicorn-thrift imports), a current
# gevent (its thriftpy_gevent worker runs on it), then gunicorn-thrift without its pins
# (thriftpy2 is ours already). If that fails, the scenario reports it unavailable.
gstamp=.venv/.nimbus-bench-gunicorn-stamp
if [ ! -f "$gstamp" ]; then
  echo "bench: installing gunicorn-thrift into .venv" >&2
  if .venv/bin/pip install --quiet 'gunicorn==19.9.0' 'gevent>=24' >&2 &&
     .venv/bin/pip install --quiet --no-deps 'gunicorn-thrift==0.2.25' >&2; then
    touch "$gstamp"
  else
    echo "bench: could not install gunicorn-thrift; it will be reported unavailable" >&2
  fi
fi

missing=()
dpkg -s thrift-compiler >/dev/null 2>&1 || missing+=(thrift-compiler)
dpkg -s libthrift-java >/dev/null 2>&1 || missing+=(libthrift-java)
command -v javac >/dev/null 2>&1 || missing+=(default-jdk-headless)
dpkg -s libssl-dev >/dev/null 2>&1 || missing+=(libssl-dev)
for pkg in libthrift-dev libevent-dev libboost-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
command -v g++ >/dev/null 2>&1 || missing+=(g++)
if [ ${#missing[@]} -gt 0 ]; then
  echo "bench: installing ${missing[*]} with apt-get" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  if ! { $sudo apt-get update -qq -o DPkg::Lock::Timeout=300 &&
         $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
           -o DPkg::Lock::Timeout=300 "${missing[@]}"; } >&2; then
    echo "bench: could not install ${missing[*]}; the servers that need them will be reported unavailable" >&2
  fi
fi

build=scripts/bench/build
mkdir -p "$build"
# With OpenSSL's headers loadgen is built with TLS; the flavour file remembers which
# build is there, so installing libssl-dev later rebuilds it.
flavour=plain
echo '#include <openssl/ssl.h>' | gcc -E -x c - >/dev/null 2>&1 && flavour=tls
if [ ! -x "$build/loadgen" ] || [ scripts/bench/loadgen.c -nt "$build/loadgen" ] ||
   [ "$(cat "$build/loadgen.flavour" 2>/dev/null)" != "$flavour" ]; then
  echo "bench: compiling the load generator ($flavour)" >&2
  if [ "$flavour" = tls ] &&
     ! gcc -O2 -Wall -Wextra -DLOADGEN_TLS -o "$build/loadgen" scripts/bench/loadgen.c -lssl -lcrypto; then
    echo "bench: could not build loadgen with TLS; building it without (TLS scenarios unavailable)" >&2
    flavour=plain
  fi
  if [ "$flavour" = plain ]; then
    gcc -O2 -Wall -Wextra -o "$build/loadgen" scripts/bench/loadgen.c
  fi
  echo "$flavour" > "$build/loadgen.flavour"
fi

exec .venv/bin/python scripts/bench/bench_servers.py "$@"
