#!/usr/bin/env bash
# bench/slow_disk on a lent GPU machine (one GPU: kind nvidia-h100-x1): L2 hits on a disk
# throttled with cgroup v2's io.max against recomputing, 8 in flight (issue 43). Prepared here
# as for the node bench (bench/node/README.md, "Device calls"), then on one machine:
#   calls 1-3, carry [".vllmcarry/pN"]:          bash scripts/gpu_vllm.sh --part N
#   call 4, carry [".bundle", ".vllmcarry/serve"]: bash bench/slow_disk/gpu.sh [--rates 200MB,0]
# It installs the client wheel (.bundle/wheels) into /tmp/kvsite, puts vLLM (/tmp/site), the
# serve site, the client and the connector on PYTHONPATH and runs bench/slow_disk/run.py with
# the bundle's kvstratad and kvstrata CLI; options go to run.py. Results in $OUT.
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo" || exit 1
out="${OUT:-$repo/gpu-out}"
mkdir -p "$out"
# shellcheck source=../../scripts/vllm_carry/stage.sh
source scripts/vllm_carry/stage.sh || { echo "vLLM parts missing: run calls 1-3 first"; exit 3; }
[ -d .vllmcarry/serve/uvicorn ] || { echo ".vllmcarry/serve missing: carry it (prepare_serve.sh)"; exit 3; }
site=/tmp/kvsite
rm -rf "$site" && mkdir -p "$site"
python3 -m pip install -q --disable-pip-version-check --no-index --no-deps --target "$site" \
  .bundle/wheels/kvstrata-*.whl || exit 4
export PYTHONPATH="$repo/.vllmcarry/serve:$site:$repo/connector_vllm:${PYTHONPATH:-}"
export KVSTRATA_DAEMON="$repo/.bundle/bin/kvstratad" KVSTRATA_CLI="$repo/.bundle/bin/kvstrata"
{ nvidia-smi --query-gpu=name,memory.total --format=csv; lsblk; cat /proc/self/mountinfo | grep -E ' / '; \
  cat /sys/fs/cgroup/cgroup.controllers; df -h /var/tmp; } >"$out/machine.txt" 2>&1
python3 bench/slow_disk/run.py --out "$out" --rates 200MB,0 "$@" 2>&1 | tee "$out/run.log"
exit "${PIPESTATUS[0]}"
