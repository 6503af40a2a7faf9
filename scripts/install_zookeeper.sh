#!/usr/bin/env bash
# Installs Debian's ZooKeeper server (the `zookeeper` package: the jar and its
# dependencies under /usr/share/zookeeper and /usr/share/java), which the HA tests start
# on a free loopback port of their own (tests/support/zookeeper.py); the system service
# (zookeeperd) is not installed and nothing listens on 2181. Idempotent; called by
# scripts/setup.sh, safe to run on its own. Without apt it says so and the HA tests are
# skipped with that reason.
set -euo pipefail
if [ -f /usr/share/java/zookeeper.jar ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install_zookeeper: no apt-get; the HA tests will be skipped" >&2
  exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "setup: installing Debian's zookeeper (a real ZooKeeper for the HA tests)"
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
  -o DPkg::Lock::Timeout=300 zookeeper >/dev/null
