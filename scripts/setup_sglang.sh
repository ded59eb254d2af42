#!/usr/bin/env bash
# Creates (or refreshes) the SGLang test environment, for the connector tests on every SGLang
# of scripts/sglang_versions.txt:
#   .venv-sglang/    the pinned sglang 0.5.23 (installed --no-deps) with what its HiCache
#                    storage interface and host KV pools import on a CPU-only machine
#                    (connector_sglang/requirements-sglang-cpu.txt: torch from PyPI and a few
#                    small packages), the kvstrata client and the kvstrata_sglang connector
#                    (both non-editable), and pytest. About 6 GiB (torch and its CUDA libraries).
#   .sglang-matrix/  every other release of the list (0.5.17 to 0.5.22), each one's wheel in
#                    its own directory, and the packages some of them need in other versions
#                    than 0.5.23, shared (scripts/setup_sglang_matrix.sh). On PYTHONPATH in
#                    front of .venv-sglang a release runs the same tests, with .venv-sglang's
#                    torch 2.14.1 (the older releases pin 2.11.0 / 2.13.0; their host pools and
#                    storage interface need only basic torch) and the same connector install.
# Idempotent: a matrix directory is remade only when its version or requirements changed.
#
#   bash scripts/setup_sglang.sh    # then: .venv-sglang/bin/python -m pytest tests/integration/sglang
#   # and on 0.5.17 (scripts/sglang_versions.txt says which directories each version uses):
#   PYTHONPATH=$PWD/.sglang-matrix/0.5.17:$PWD/.sglang-matrix/deps-transformers-5.12 \
#     .venv-sglang/bin/python -m pytest tests/integration/sglang
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${KVSTRATA_SGLANG_VENV:-$repo/.venv-sglang}"
python="${PYTHON:-python3}"
sglang_version="0.5.23"
step() { echo "setup_sglang: $*"; }

# shellcheck source=lib/venv.sh
. "$repo/scripts/lib/venv.sh"
prepare_venv "$venv"
step "installing SGLang's CPU-side imports (torch, transformers, ...) and test tools"
"${pip[@]}" install --upgrade-strategy only-if-needed \
  -r "$repo/connector_sglang/requirements-sglang-cpu.txt" \
  "setuptools>=61" "wheel" "grpcio>=1.51" "grpcio-tools>=1.51" "protobuf>=4.21" "pytest>=7"
step "installing sglang==$sglang_version (--no-deps)"
"${pip[@]}" install --no-deps "sglang==$sglang_version"
step "installing the kvstrata client and kvstrata_sglang (non-editable)"
rm -rf "$repo/connector_sglang/build"  # setuptools would reuse stale copies from it
"${pip[@]}" install --no-build-isolation --no-deps --force-reinstall "$repo/client/python" \
  "$repo/connector_sglang"
"$venv/bin/python" - <<'PY'
import warnings
warnings.filterwarnings("ignore")
import kvstrata, kvstrata_sglang, sglang, torch
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost  # noqa: F401
print(f"setup_sglang: sglang {sglang.__version__}, torch {torch.__version__}, "
      f"kvstrata {kvstrata.__version__}, kvstrata_sglang {kvstrata_sglang.__version__}")
PY

# The other releases of scripts/sglang_versions.txt, over this venv.
KVSTRATA_SGLANG_VENV="$venv" bash "$repo/scripts/setup_sglang_matrix.sh"
