#!/usr/bin/env bash
# Installs GlusterFS (Debian/Ubuntu glusterfs-server and glusterfs-client, ~30 s) for the L3
# tests on a real distributed filesystem (tests/integration/python/test_l3_gluster.py) and
# bench/tiers/l3_gluster.py. Idempotent: does nothing when both packages are installed. The
# package starts no glusterd; the tests run their own inside a network namespace. Needs root
# or sudo (and the tests need root too).
set -euo pipefail

packages=(glusterfs-server glusterfs-client)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$package")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup_gluster: GlusterFS already installed"
  exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
echo "setup_gluster: apt-get install ${missing[*]}"
# The package lists are usually fresh (scripts/setup.sh); update them only when needed.
if ! $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; then
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
