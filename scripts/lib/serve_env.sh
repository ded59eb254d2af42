# Sourced by the device-call drivers that run `vllm serve` replicas (scripts/gpu_node.sh,
# bench/slow_disk/gpu.sh): the repository as the working directory ($repo), $out ($OUT, else
# gpu-out/, created), vLLM unpacked by calls 1-3 (scripts/vllm_carry/stage.sh), the serve
# site (.vllmcarry/serve), the bundle's client wheel installed into /tmp/kvsite, the
# connector (connector_vllm/) on PYTHONPATH, and the bundle's kvstratad and kvstrata CLI.
# Exits 3 when a carried part is missing, 4 when the wheel does not install.
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo" || exit 1
out="${OUT:-$repo/gpu-out}"
mkdir -p "$out"
# shellcheck source=../vllm_carry/stage.sh
source scripts/vllm_carry/stage.sh || { echo "vLLM parts missing: run calls 1-3 first"; exit 3; }
[ -d .vllmcarry/serve/uvicorn ] || { echo ".vllmcarry/serve missing: carry it (prepare_serve.sh)"; exit 3; }
site=/tmp/kvsite
rm -rf "$site" && mkdir -p "$site"
python3 -m pip install -q --disable-pip-version-check --no-index --no-deps --target "$site" \
  .bundle/wheels/kvstrata-*.whl || exit 4
export PYTHONPATH="$repo/.vllmcarry/serve:$site:$repo/connector_vllm:${PYTHONPATH:-}"
export KVSTRATA_DAEMON="$repo/.bundle/bin/kvstratad" KVSTRATA_CLI="$repo/.bundle/bin/kvstrata"
