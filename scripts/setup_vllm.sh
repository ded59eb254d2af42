#!/usr/bin/env bash
# Creates (or refreshes) the vLLM test environment at <repo>/.venv-vllm: the pinned vLLM from
# PyPI, pytest, and the kvstrata client and the kvstrata_vllm connector (both non-editable).
# Separate from .venv because vLLM pins its own torch/protobuf/grpcio. Idempotent: a second
# run with vLLM already installed only reinstalls the two project packages.
#
#   bash scripts/setup_vllm.sh   # then: .venv-vllm/bin/python -m pytest tests/e2e/vllm
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${KVSTRATA_VLLM_VENV:-$repo/.venv-vllm}"
python="${PYTHON:-python3}"
vllm_pin="vllm==0.33.0"
step() { echo "setup_vllm: $*"; }

# setup_python.sh installs python3-venv when missing; reuse it rather than repeat it.
if ! "$python" -c 'import venv, ensurepip' >/dev/null 2>&1; then
  bash "$repo/scripts/setup_python.sh"
fi

if [ -x "$venv/bin/python" ] && "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
  step "reusing $venv ($("$venv/bin/python" --version 2>&1))"
else
  step "creating $venv with $("$python" --version 2>&1)"
  rm -rf "$venv"
  "$python" -m venv "$venv"
fi

pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
if "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('vllm') != '${vllm_pin#vllm==}')" 2>/dev/null; then
  step "$vllm_pin already installed"
else
  # uv, not pip, because two requirements need overriding (uv --override):
  # - vLLM 0.33.0 asks for certifi>=2026.10.19, newer than any certifi the package index
  #   serves here: relaxed (it is only the CA bundle).
  # - flashinfer asks for cuda-python>=12.0; next to torch's cuda-bindings 13.5 the resolver
  #   falls back to cuda-python 12.6.2.post1, which ships its own cuda/bindings files and
  #   overwrites cuda-bindings 13.5's (then vLLM's CPU worker fails to import with
  #   "module 'cuda.bindings.runtime' has no attribute 'cudaLibrary_t'"). cuda-python 13 is
  #   only a meta-package over cuda-bindings, so the requirement is dropped.
  # Everything else resolves as vLLM pins it.
  step "installing $vllm_pin from PyPI with uv (with torch: ~9 GB, the long step)"
  "${pip[@]}" install "uv>=0.13"
  overrides="$(mktemp)"
  trap 'rm -f "$overrides"' EXIT
  printf '%s\n' 'certifi>=2024' 'cuda-python ; python_version < "0"' >"$overrides"
  UV_SYSTEM_CERTS=1 "$venv/bin/uv" pip install --python "$venv/bin/python" --override "$overrides" \
    "$vllm_pin" "pytest>=7" "setuptools>=61" "wheel" "grpcio-tools>=1.51"
fi
step "installing kvstrata client and kvstrata_vllm connector (non-editable)"
"${pip[@]}" install --no-build-isolation --no-deps --force-reinstall \
  "$repo/client/python" "$repo/connector_vllm"
"$venv/bin/python" -c 'import vllm, kvstrata, kvstrata_vllm; print("setup_vllm: vllm", vllm.__version__, "kvstrata", kvstrata.__version__)'
