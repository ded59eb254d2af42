#!/usr/bin/env bash
# Installs everything KVStrata needs on a fresh Debian 12 / Ubuntu 24.04 machine:
# the C++ toolchain and libraries (apt-get) and the project's Python venv (.venv).
# Idempotent: packages already present are not reinstalled. Needs root or sudo for apt.
#
#   bash scripts/setup.sh            # everything
#   bash scripts/setup.sh --cpp      # only the C++ build dependencies
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
packages=(
  build-essential cmake ninja-build pkg-config git
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libabsl-dev prometheus-cpp-dev libtomlplusplus-dev libspdlog-dev libfmt-dev
  libxxhash-dev libcurl4-openssl-dev libexpat1-dev libzmq3-dev libmsgpack-cxx-dev libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-venv
  systemd   # systemd-analyze: tests/deploy checks deploy/systemd
  # Ceph's S3 gateway for the object-tier tests (bench/object_tier/radosgw.sh builds the cluster)
  radosgw ceph-mon ceph-osd uuid-runtime curl
)
# kubectl renders deploy/kubernetes in tests/deploy: Debian's kubernetes-client, unless a
# kubectl is already installed (another package owns /usr/bin/kubectl then).
command -v kubectl >/dev/null || packages+=(kubernetes-client)

missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: apt-get install ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "setup: C++ dependencies already installed"
fi

if [ "${1:-}" != "--cpp" ]; then
  bash "$repo/scripts/setup_python.sh"
fi
