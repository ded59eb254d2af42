#!/usr/bin/env bash
# Creates (or refreshes) the project's Python environment at <repo>/.venv and installs the
# kvstrata client into it (non-editable, so its build step compiles proto/). Idempotent.
# Works on a fresh Debian 12 as root: installs python3-venv when venv/ensurepip is missing.
#
#   bash scripts/setup_python.sh          # then: .venv/bin/python -m pytest tests/integration/python
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${KVSTRATA_VENV:-$repo/.venv}"
python="${PYTHON:-python3}"
step() { echo "setup_python: $*"; }

command -v "$python" >/dev/null || { echo "setup_python: $python not found" >&2; exit 1; }

if ! "$python" -c 'import venv, ensurepip' >/dev/null 2>&1; then
  step "venv/ensurepip missing: apt-get install -y python3-venv"
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    echo "setup_python: install the python3-venv package (needs root and apt-get)" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq python3-venv >/dev/null
fi

if [ -x "$venv/bin/python" ] && "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
  step "reusing $venv ($("$venv/bin/python" --version 2>&1))"
else
  step "creating $venv with $("$python" --version 2>&1)"
  rm -rf "$venv"
  "$python" -m venv "$venv"
fi

pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
step "upgrading pip"
"${pip[@]}" install --upgrade "pip>=23"
step "installing build and test dependencies (grpcio, grpcio-tools, protobuf, pytest, numpy)"
"${pip[@]}" install --upgrade-strategy only-if-needed \
  "setuptools>=61" "wheel" "grpcio>=1.51" "grpcio-tools>=1.51" "protobuf>=4.21" \
  "pytest>=7" "numpy>=1.24"
step "installing ops test dependencies (pyzmq, msgpack: KV events; pyyaml, kubernetes-validate: deploy/)"
"${pip[@]}" install --upgrade-strategy only-if-needed "pyzmq>=25" "msgpack>=1.0" "pyyaml>=6" \
  "kubernetes-validate>=1.30"
step "installing kvstrata client from client/python (build step runs protoc)"
# --no-build-isolation: build with the grpcio-tools/setuptools just installed above.
"${pip[@]}" install --no-build-isolation --no-deps --force-reinstall "$repo/client/python"
"$venv/bin/python" -c 'import kvstrata, grpc, google.protobuf as p; print("setup_python: kvstrata", kvstrata.__version__, "grpcio", grpc.__version__, "protobuf", p.__version__)'
