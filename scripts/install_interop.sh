#!/usr/bin/env bash
# Installs the real Thrift peers the interoperability tests (tests/test_interop_*.py) talk to,
# idempotently (each step runs only when its output is missing or stale):
#   - Debian's thrift-compiler (the `thrift` command), from apt;
#   - Node's `thrift` package, pinned in tests/interop/node/package-lock.json, via `npm ci`;
#   - code generated from idl/demo.thrift (gitignored; rebuilt when the IDL is newer):
#       tests/interop/gen-py/           `thrift --gen py`      (Apache Thrift Python tests)
#       tests/interop/node/gen-nodejs/  `thrift --gen js:node` (beside node_modules, so the
#                                       generated require('thrift') resolves there)
# Called by scripts/setup.sh; safe to run on its own. Exits non-zero with a message on failure.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"

idl=idl/demo.thrift
node_dir=tests/interop/node
gen_py=tests/interop/gen-py
gen_node="$node_dir/gen-nodejs"

say() { echo "interop: $*"; }
die() { echo "interop: ERROR: $*" >&2; exit 1; }

[ -f "$idl" ] || die "$idl not found (run from a nimbus-thrift checkout)"

# --- thrift-compiler (apt) ---------------------------------------------------------------
as_root() {
  if [ "$(id -u)" -eq 0 ]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1; then
    sudo "$@"
  else
    die "need root to run '$*' (not root, and no sudo)"
  fi
}
apt_install() {
  # Waits for a concurrent apt/dpkg (unattended upgrades, another setup) instead of failing.
  as_root env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=300 "$@"
}
if ! command -v thrift >/dev/null 2>&1; then
  command -v apt-get >/dev/null 2>&1 || die "no 'thrift' command and no apt-get: install the Thrift compiler (>= 0.17) by hand"
  say "installing Debian's thrift-compiler"
  if ! apt_install thrift-compiler; then
    say "install failed; running apt-get update and trying again"
    as_root apt-get update -q -o DPkg::Lock::Timeout=300 || die "apt-get update failed"
    apt_install thrift-compiler || die "apt-get install thrift-compiler failed"
  fi
  command -v thrift >/dev/null 2>&1 || die "thrift-compiler installed but no 'thrift' command on PATH"
fi
say "compiler: $(thrift --version)"

# --- Node's thrift package (npm) ---------------------------------------------------------
command -v node >/dev/null 2>&1 || die "node is not installed (the Node interop client needs Node.js >= 18)"
command -v npm >/dev/null 2>&1 || die "npm is not installed (needed to install Node's thrift package)"
# npm writes node_modules/.package-lock.json after a successful install; if it is older than
# the committed lockfile (or missing), the installed tree is stale.
installed_lock="$node_dir/node_modules/.package-lock.json"
if [ ! -f "$installed_lock" ] || [ "$node_dir/package-lock.json" -nt "$installed_lock" ] \
   || [ ! -f "$node_dir/node_modules/thrift/package.json" ]; then
  say "installing Node's thrift package (npm ci in $node_dir)"
  (cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error) \
    || die "npm ci failed in $node_dir"
fi
say "node: $(node --version), npm thrift $(node -p "require('./$node_dir/node_modules/thrift/package.json').version")"

# --- generated code ----------------------------------------------------------------------
# generate LANG MARKER OUTDIR: runs the compiler into a fresh directory, then swaps it in, so
# an interrupted run never leaves a half-written tree that looks up to date.
generate() {
  local lang="$1" marker="$2" out="$3"
  if [ -f "$out/$marker" ] && [ ! "$idl" -nt "$out/$marker" ]; then
    say "$out is up to date"
    return
  fi
  say "generating $out (thrift --gen $lang)"
  local tmp="$out.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  thrift --gen "$lang" -out "$tmp" "$idl" || { rm -rf "$tmp"; die "thrift --gen $lang $idl failed"; }
  [ -f "$tmp/$marker" ] || { rm -rf "$tmp"; die "thrift --gen $lang did not write $marker"; }
  rm -rf "$out"
  mv "$tmp" "$out"
}
generate py nimbus_demo/Echo.py "$gen_py"
generate js:node Echo.js "$gen_node"

say "ready"
