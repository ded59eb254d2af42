#!/usr/bin/env bash
# Creates (or refreshes) the SGLang test environments, for the connector tests on two SGLangs:
#   .venv-sglang/  the pinned sglang 0.5.23 (installed --no-deps) with what its HiCache
#                  storage interface and host KV pools import on a CPU-only machine
#                  (connector_sglang/requirements-sglang-cpu.txt: torch from PyPI and a few
#                  small packages), the kvstrata client and the kvstrata_sglang connector
#                  (both non-editable), and pytest. About 6 GiB (torch and its CUDA libraries).
#   .sglang0517/   sglang 0.5.17 and the few packages it needs in other versions than
#                  0.5.23 (connector_sglang/requirements-sglang0517-overlay.txt: transformers,
#                  tokenizers, openai, ...), pip --no-deps --target: about 40 MB downloaded.
#                  On PYTHONPATH in front of .venv-sglang it runs the same tests on 0.5.17,
#                  with .venv-sglang's torch 2.14.1 (0.5.17 pins 2.11.0; its host pools and
#                  storage interface need only basic torch) and the same connector install.
# Idempotent: .sglang0517 is remade only when its requirements file changed.
#
#   bash scripts/setup_sglang.sh    # then: .venv-sglang/bin/python -m pytest tests/integration/sglang
#   # and on 0.5.17: PYTHONPATH=$PWD/.sglang0517 .venv-sglang/bin/python -m pytest tests/integration/sglang
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${KVSTRATA_SGLANG_VENV:-$repo/.venv-sglang}"
python="${PYTHON:-python3}"
sglang_version="0.5.23"
overlay="${KVSTRATA_SGLANG0517_DIR:-$repo/.sglang0517}"
overlay_requirements="$repo/connector_sglang/requirements-sglang0517-overlay.txt"
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

# SGLang 0.5.17 as an overlay of .venv-sglang. The stamp is the requirements file it was
# made from; a fresh copy goes to a temporary directory first, so a failed download never
# leaves a half-made overlay behind.
stamp="$overlay/.kvstrata-requirements.txt"
if [ -f "$overlay/sglang-0.5.17.dist-info/METADATA" ] && cmp -s "$stamp" "$overlay_requirements"; then
  step "sglang==0.5.17 overlay already in $overlay"
else
  step "installing sglang==0.5.17 and its overlay packages into $overlay (--no-deps --target)"
  rm -rf "$overlay.tmp"
  "${pip[@]}" install --no-deps --target "$overlay.tmp" -r "$overlay_requirements"
  cp "$overlay_requirements" "$overlay.tmp/.kvstrata-requirements.txt"
  rm -rf "$overlay"
  mv "$overlay.tmp" "$overlay"
fi
PYTHONPATH="$overlay" "$venv/bin/python" - <<'PY'
import warnings
warnings.filterwarnings("ignore")
import kvstrata_sglang, sglang, torch
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost  # noqa: F401
assert sglang.__version__ == "0.5.17", sglang.__version__
print(f"setup_sglang: overlay: sglang {sglang.__version__} ({sglang.__path__[0]}), "
      f"torch {torch.__version__}, kvstrata_sglang {kvstrata_sglang.__version__}")
PY
