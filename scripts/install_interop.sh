#!/usr/bin/env bash
# Installs the real Thrift peers the interoperability tests (tests/test_interop_*.py) talk to,
# idempotently (each step runs only when its output is missing or stale):
#   - Debian's thrift-compiler (the `thrift` command), from apt;
#   - Debian's libthrift-java and libslf4j-java (the Java clients: TLS, Storm 2.x), from apt;
#   - Node's `thrift` package, pinned in tests/interop/node/package-lock.json, via `npm ci`;
#   - Apache Storm's own IDL, for the Nimbus compatibility tests: the streamparse 5.0.1 wheel
#     (PyPI, no dependencies) embeds Storm 1.1's storm.thrift; it is downloaded into
#     tests/interop/cache/ and extracted by tests/interop/storm_idl.py to
#       tests/interop/storm/storm.thrift
#     Storm 2.x's IDL is on no registry this project reaches (Storm ships it in its source
#     tree, and as generated Java classes in Maven Central's storm-client jar): the Storm 2.x
#     clients of the tests are generated from idl/nimbus.thrift, which follows it (Python
#     here, Java by tests/interop/test_interop_storm2.py with the libthrift-java above).
#   - Apache Thrift's own cross-language test clients, for tests/interop/test_interop_thrifttest.py:
#     test/py/TestClient.py, lib/nodejs/test/client.js and test/ThriftTest.thrift are in no
#     PyPI or npm package, but they are in Apache Thrift's source release, which Debian's
#     mirror serves as the `thrift` source package's upstream tarball (0.17.0, the version of
#     the thrift-compiler above; sha256 pinned from Debian's signed .dsc). It is downloaded
#     into tests/interop/cache/ and the files the clients need are extracted, unmodified, to
#       tests/interop/cache/thrifttest/   (test/, test/py/, lib/nodejs/test/ as upstream)
#     The Node client's dependencies (npm thrift, commander, tape, node-int64) are pinned in
#     tests/interop/thrifttest-node/package-lock.json; lib/nodejs/lib/thrift in the extracted
#     tree is a symlink to that npm thrift, so the client runs on the library the project
#     tests against.
#   - generated code (gitignored; rebuilt when its IDL is newer):
#       tests/interop/gen-py/           `thrift --gen py` of idl/demo.thrift (Apache Thrift
#                                       Python tests)
#       tests/interop/node/gen-nodejs/  `thrift --gen js:node` of idl/demo.thrift (beside
#                                       node_modules, so require('thrift') resolves there)
#       tests/interop/gen-storm-py/     `thrift --gen py` of Storm's storm.thrift
#       tests/interop/gen-nimbus-py/    `thrift --gen py` of idl/nimbus.thrift (Storm 2.x's API)
#       tests/interop/cache/thrifttest/test/py/gen-py/            `thrift --gen py` and
#       tests/interop/cache/thrifttest/lib/nodejs/test/gen-nodejs/ `thrift --gen js:node` of
#                                       Apache's test/ThriftTest.thrift
# Called by scripts/setup.sh; safe to run on its own. Exits non-zero with a message on failure.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"

idl=idl/demo.thrift
nimbus_idl=idl/nimbus.thrift
node_dir=tests/interop/node
gen_py=tests/interop/gen-py
gen_node="$node_dir/gen-nodejs"
streamparse_version=5.0.1   # must match STREAMPARSE_VERSION in the extractor
wheel_cache=tests/interop/cache
extractor=tests/interop/storm_idl.py
storm_idl=tests/interop/storm/storm.thrift
gen_storm_py=tests/interop/gen-storm-py
gen_nimbus_py=tests/interop/gen-nimbus-py
# Apache Thrift's source release, from Debian's mirror (the upstream tarball of Debian's
# `thrift` source package; the checksum is the one in Debian's signed thrift_0.17.0-2.dsc).
thrift_src_version=0.17.0   # must match APACHE_THRIFT_VERSION in tests/interop/thrifttest.py
thrift_src_tarball="thrift_${thrift_src_version}.orig.tar.gz"
thrift_src_url="http://deb.debian.org/debian/pool/main/t/thrift/$thrift_src_tarball"
thrift_src_sha256=f5888bcd3b8de40c2c2ab86896867ad9b18510deb412cba3e5da76fb4c604c29
thrifttest_dir=tests/interop/cache/thrifttest
thrifttest_node_dir=tests/interop/thrifttest-node
# The upstream files the clients run with (paths inside the tarball, below thrift-<version>/).
thrifttest_files=(
  test/ThriftTest.thrift
  test/py/TestClient.py
  test/py/util.py
  lib/nodejs/test/client.js
  lib/nodejs/test/helpers.js
  lib/nodejs/test/test_driver.js
  lib/nodejs/test/test-cases.js
)

say() { echo "interop: $*"; }
die() { echo "interop: ERROR: $*" >&2; exit 1; }

[ -f "$idl" ] || die "$idl not found (run from a nimbus-thrift checkout)"
[ -f "$nimbus_idl" ] || die "$nimbus_idl not found (run from a nimbus-thrift checkout)"

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

# --- libthrift-java (apt), for the Java clients of tests/interop/test_interop_tls.py and ---
# --- test_interop_storm2.py ---------------------------------------------------------------
if [ ! -f /usr/share/java/libthrift.jar ] && [ ! -f /usr/share/java/thrift.jar ] \
    || [ ! -f /usr/share/java/slf4j-api.jar ]; then
  command -v apt-get >/dev/null 2>&1 || die "no libthrift-java and no apt-get: install Apache Thrift's Java library by hand"
  say "installing Debian's libthrift-java and libslf4j-java"
  apt_install libthrift-java libslf4j-java || die "apt-get install libthrift-java libslf4j-java failed"
fi
command -v javac >/dev/null 2>&1 || die "javac is not installed (the Java interop client needs a JDK, e.g. openjdk-17-jdk-headless)"

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

# --- Storm's IDL (PyPI: the streamparse wheel) --------------------------------------------
# The venv's interpreter and pip when setup.sh has made them, else the system's.
if [ -x .venv/bin/python ]; then py=.venv/bin/python; else py=python3; fi
if [ -x .venv/bin/pip ]; then pip=(.venv/bin/pip); else pip=(python3 -m pip); fi
find_wheel() {
  local found=("$wheel_cache"/streamparse-"$streamparse_version"-*.whl)
  [ -f "${found[0]}" ] && echo "${found[0]}"
  return 0
}
wheel="$(find_wheel)"
if [ -z "$wheel" ]; then
  say "downloading streamparse $streamparse_version (wheel only, no dependencies) into $wheel_cache"
  mkdir -p "$wheel_cache"
  "${pip[@]}" download --quiet --no-deps --only-binary=:all: \
      --dest "$wheel_cache" "streamparse==$streamparse_version" \
    || die "pip download streamparse==$streamparse_version failed"
  wheel="$(find_wheel)"
  [ -n "$wheel" ] || die "pip download wrote no streamparse-$streamparse_version wheel into $wheel_cache"
fi
# Stale when the wheel or the extractor changed since the last extraction.
if [ ! -f "$storm_idl" ] || [ "$wheel" -nt "$storm_idl" ] || [ "$extractor" -nt "$storm_idl" ]; then
  say "extracting Storm's IDL from $(basename "$wheel") into $storm_idl"
  "$py" "$extractor" "$wheel" "$storm_idl" || die "extracting Storm's IDL from $wheel failed"
else
  say "$storm_idl is up to date"
fi

# --- Apache Thrift's cross-language test clients (Debian's mirror: the thrift source) ------
sha256_of() { sha256sum "$1" | cut -d' ' -f1; }
tarball="$wheel_cache/$thrift_src_tarball"
if [ ! -f "$tarball" ] || [ "$(sha256_of "$tarball")" != "$thrift_src_sha256" ]; then
  command -v curl >/dev/null 2>&1 || die "curl is not installed (needed to download $thrift_src_url)"
  say "downloading Apache Thrift $thrift_src_version's source ($thrift_src_url) into $wheel_cache"
  mkdir -p "$wheel_cache"
  curl -fsSL --retry 3 -o "$tarball.tmp.$$" "$thrift_src_url" \
    || { rm -f "$tarball.tmp.$$"; die "downloading $thrift_src_url failed"; }
  got="$(sha256_of "$tarball.tmp.$$")"
  [ "$got" = "$thrift_src_sha256" ] \
    || { rm -f "$tarball.tmp.$$"; die "$thrift_src_url has sha256 $got, expected $thrift_src_sha256"; }
  mv "$tarball.tmp.$$" "$tarball"
fi
# Extracted into a fresh directory and swapped in, like the generated code below; stale when
# the tarball is newer (a re-download) or a file is missing.
thrifttest_fresh=1
for f in "${thrifttest_files[@]}"; do
  if [ ! -f "$thrifttest_dir/$f" ] || [ "$tarball" -nt "$thrifttest_dir/$f" ]; then thrifttest_fresh=0; fi
done
if [ "$thrifttest_fresh" -eq 1 ]; then
  say "$thrifttest_dir is up to date"
else
  say "extracting Apache Thrift's test clients from $thrift_src_tarball into $thrifttest_dir"
  tmp="$thrifttest_dir.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  members=()
  for f in "${thrifttest_files[@]}"; do members+=("thrift-$thrift_src_version/$f"); done
  tar -xzf "$tarball" -C "$tmp" --strip-components=1 "${members[@]}" \
    || { rm -rf "$tmp"; die "extracting ${thrifttest_files[*]} from $tarball failed"; }
  # tar keeps the release's old mtimes; the staleness checks compare against the tarball.
  for f in "${thrifttest_files[@]}"; do touch "$tmp/$f"; done
  rm -rf "$thrifttest_dir"
  mv "$tmp" "$thrifttest_dir"
fi
# The client's dependencies (pinned), installed like tests/interop/node's.
thrifttest_installed_lock="$thrifttest_node_dir/node_modules/.package-lock.json"
if [ ! -f "$thrifttest_installed_lock" ] \
   || [ "$thrifttest_node_dir/package-lock.json" -nt "$thrifttest_installed_lock" ] \
   || [ ! -f "$thrifttest_node_dir/node_modules/thrift/package.json" ]; then
  say "installing the Node test client's dependencies (npm ci in $thrifttest_node_dir)"
  (cd "$thrifttest_node_dir" && npm ci --no-audit --no-fund --loglevel=error) \
    || die "npm ci failed in $thrifttest_node_dir"
fi
# helpers.js requires "../lib/thrift" (the library beside the tests in Apache's tree): point
# it at the npm thrift the client's `require("thrift")` finds, so both are one module. The
# link is relative (5 levels up from $thrifttest_dir/lib/nodejs/lib is tests/interop/).
mkdir -p "$thrifttest_dir/lib/nodejs/lib"
ln -sfn ../../../../../thrifttest-node/node_modules/thrift/lib/nodejs/lib/thrift \
  "$thrifttest_dir/lib/nodejs/lib/thrift"
[ -f "$thrifttest_dir/lib/nodejs/lib/thrift/index.js" ] \
  || die "$thrifttest_dir/lib/nodejs/lib/thrift does not lead to npm thrift's library"

# --- generated code ----------------------------------------------------------------------
# generate IDL LANG MARKER OUTDIR: runs the compiler into a fresh directory, then swaps it
# in, so an interrupted run never leaves a half-written tree that looks up to date.
generate() {
  local src="$1" lang="$2" marker="$3" out="$4"
  if [ -f "$out/$marker" ] && [ ! "$src" -nt "$out/$marker" ]; then
    say "$out is up to date"
    return
  fi
  say "generating $out (thrift --gen $lang $src)"
  local tmp="$out.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  thrift --gen "$lang" -out "$tmp" "$src" || { rm -rf "$tmp"; die "thrift --gen $lang $src failed"; }
  [ -f "$tmp/$marker" ] || { rm -rf "$tmp"; die "thrift --gen $lang $src did not write $marker"; }
  rm -rf "$out"
  mv "$tmp" "$out"
}
generate "$idl" py nimbus_demo/Echo.py "$gen_py"
generate "$idl" js:node Echo.js "$gen_node"
# No `namespace py` in either file: the packages are named after the files.
generate "$storm_idl" py storm/Nimbus.py "$gen_storm_py"
generate "$nimbus_idl" py nimbus/Nimbus.py "$gen_nimbus_py"
# Where Apache's clients look for them (TestClient.py --genpydir, helpers.js genPath).
generate "$thrifttest_dir/test/ThriftTest.thrift" py ThriftTest/ThriftTest.py \
  "$thrifttest_dir/test/py/gen-py"
generate "$thrifttest_dir/test/ThriftTest.thrift" js:node ThriftTest.js \
  "$thrifttest_dir/lib/nodejs/test/gen-nodejs"

say "ready"
