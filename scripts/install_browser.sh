#!/usr/bin/env bash
# Installs the real browser the web page's tests drive (tests/sockets/test_web_page_browser.py,
# tests/spark/test_web_page.py), idempotently: Debian's `chromium` and `chromium-driver`
# (/usr/bin/chromium, /usr/bin/chromedriver), from apt. Selenium, the Python side, is in
# setup.cfg's test extras. Nothing is downloaded by a test tool of its own: both binaries
# come from the distribution, so the tests run offline once this has run.
# Called by scripts/setup.sh; safe to run on its own. Exits non-zero with a message on failure.
set -euo pipefail

say() { echo "browser: $*"; }
die() { echo "browser: ERROR: $*" >&2; exit 1; }

if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
  say "$(chromium --version 2>/dev/null | head -n 1), $(chromedriver --version | head -n 1 | cut -d' ' -f1-2)"
  exit 0
fi

command -v apt-get >/dev/null 2>&1 ||
  die "no chromium/chromedriver and no apt-get: install Chromium and its ChromeDriver (same version) by hand"

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
  # Waits for a concurrent apt/dpkg (unattended upgrades, another setup) instead of failing;
  # apt's and debconf's chatter is shown only when the install fails.
  local log
  log="$(mktemp)"
  if as_root env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=300 "$@" >"$log" 2>&1; then
    rm -f "$log"
  else
    tail -n 20 "$log" >&2
    rm -f "$log"
    return 1
  fi
}

say "installing Debian's chromium and chromium-driver"
if ! apt_install chromium chromium-driver; then
  say "install failed; running apt-get update and trying again"
  as_root apt-get update -qq -o DPkg::Lock::Timeout=300 >/dev/null 2>&1 || die "apt-get update failed"
  apt_install chromium chromium-driver || die "apt-get install chromium chromium-driver failed"
fi
command -v chromium >/dev/null 2>&1 || die "chromium installed but no 'chromium' command on PATH"
command -v chromedriver >/dev/null 2>&1 || die "chromium-driver installed but no 'chromedriver' command on PATH"
say "$(chromium --version 2>/dev/null | head -n 1), $(chromedriver --version | head -n 1 | cut -d' ' -f1-2)"
