#!/usr/bin/env bash
# bench/slow_disk on a lent GPU machine (one GPU: kind nvidia-h100-x1): L2 hits on a disk
# throttled with cgroup v2's io.max against recomputing, 8 in flight (issue 43). Prepared here
# as for the node bench (bench/node/README.md, "Device calls"), then on one machine:
#   calls 1-3, carry [".vllmcarry/pN"]:          bash scripts/gpu_vllm.sh --part N
#   call 3b, carry [".vllmcarry/serve"]:        bash scripts/vllm_carry/stage_serve.sh
#   call 4, carry [".bundle"]:                   bash bench/slow_disk/gpu.sh [--rates 200MB,0]
# It installs the client wheel (.bundle/wheels) into /tmp/kvsite, puts vLLM (/tmp/site), the
# serve site, the client and the connector on PYTHONPATH and runs bench/slow_disk/run.py with
# the bundle's kvstratad and kvstrata CLI; options go to run.py. Results in $OUT.
set -uo pipefail
# shellcheck source=../../scripts/lib/serve_env.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib/serve_env.sh"
{ nvidia-smi --query-gpu=name,memory.total --format=csv; lsblk; cat /proc/self/mountinfo | grep -E ' / '; \
  cat /sys/fs/cgroup/cgroup.controllers; df -h /var/tmp; } >"$out/machine.txt" 2>&1
python3 bench/slow_disk/run.py --out "$out" --rates 200MB,0 "$@" 2>&1 | tee "$out/run.log"
exit "${PIPESTATUS[0]}"
