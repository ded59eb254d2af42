#!/usr/bin/env bash
# Real vLLM 0.26.0 engines on the lent GPU machine: bench/vllm_gpu/run.py, KVStrata beside
# vLLM's own CPU offloading. Prepared here (network, no GPU), then three device calls sent
# one right after the other (a machine keeps /tmp only while warm, ~30 s):
#
#   bash scripts/vllm_carry/prepare.sh .vllmcarry        # here: vLLM 0.26 in three parts
#   bash scripts/bundle.sh && bash scripts/bundle_python.sh   # here: the daemon + client
#   calls 1-3, carry [".vllmcarry/pN"]:  bash scripts/gpu_vllm.sh --part N   (N = 1, 2, 3)
#   call 4, carry [".bundle"]:        bash scripts/gpu_vllm.sh [--quick] [run.py options]
#
# All five roles take more than one call's 600 s on an H100; the full run
# (bench/results/h100-2026-11-24-vllm026-run7/NOTES.md, runs 7-9) is two calls after calls 1
# and 2:
#   call 3: bash scripts/gpu_vllm.sh --roles none,native,kvstrata_async,kvstrata \
#             --keep-daemon --role-timeout 170                      (~9 min)
#   call 4: bash scripts/gpu_vllm.sh --roles kvstrata_b --continue --role-timeout 330
#
# The store-strategy A/B and the L2 disk ceiling
# (bench/results/h100-2026-11-24-vllm026-run14/NOTES.md): the daemon's default (`kvstrata`)
# against `kvstrata_batch` (the same role on a daemon restarted with gpu.copy_strategy=batch;
# each of the two starts on an empty L1 and L2), users round 1 five times each, and
# --disk-baseline (bench/vllm_gpu/disk_probe.py: raw O_DIRECT reads of the L2 disk, before the
# first role, printed beside the L2-hit row):
#   call 3: bash scripts/gpu_vllm.sh --roles none,kvstrata_batch,kvstrata --sizes 32768 \
#             --repeats 5 --round1-repeats 5 --disk-baseline --keep-daemon --role-timeout 170
#   call 4: bash scripts/gpu_vllm.sh --roles native,kvstrata_b --continue --role-timeout 250
# Run 14's call 3 reached the 600 s limit while the last engine shut down (its results were
# written; call 4's --continue read them): give call 3 fewer roles, e.g. none,kvstrata_batch
# there and kvstrata,native,kvstrata_b in call 4 (~8 min).
#
# The 1K step profile (bench/results/h100-2026-11-24-vllm026-run17/NOTES.md): control roles
# noop, noop_link, noop_reg (a connector doing nothing; with KVStrataConnector's sessions idle;
# with the KV cache registered too), and a role again in a new engine process with a suffix .N:
#   call 3: bash scripts/gpu_vllm.sh --roles none,native,kvstrata,noop,noop_link,noop_reg \
#             --sizes 1024,8192 --repeats 9 --no-users --keep-daemon --role-timeout 150
#   call 4: bash scripts/gpu_vllm.sh --continue --roles kvstrata.2,native.2,kvstrata.3,native.3 \
#             --keep-daemon --role-timeout 150
#
# Tensor parallelism 2 (issue 20), machine kind nvidia-h200-x2 (two H200s): the same
# preparation and calls 1 and 2, then the benchmark in two calls (a call runs 600 s at most;
# the first ~6 min, the second ~4.5 min); engine.py keeps NVLink multicast off
# (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1):
#   call 3, carry [".bundle"]:  bash scripts/gpu_vllm.sh --tp-plan
#   call 4, carry [".bundle"]:  bash scripts/gpu_vllm.sh --tp-plan --roles kvstrata,kvstrata_b --continue
# where --tp-plan stands for --tp 2 --sizes 8192,32768 --users 2 --roles none,native
# --role-timeout 250 (explicit options win). Call 4's summary.txt reports all four roles.
#
# Call 3 installs the kvstrata client wheel (.bundle/wheels) into /tmp/kvsite, puts the
# connector (connector_vllm/) and vLLM (/tmp/site) on PYTHONPATH and runs the benchmark;
# results in $OUT: vllm_gpu.json, summary.txt, run.log, kvstratad.log, nvidia_smi.txt.
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo" || exit 1
out="${OUT:-$repo/gpu-out}"
mkdir -p "$out"
case "${1:-}" in
  --part)
    # Part N is .vllmcarry/pN; the last part (the one holding site.sha256) also unpacks.
    mkdir -p /tmp/vc
    cp ".vllmcarry/p$2"/* /tmp/vc/ || exit 3
    ls -la /tmp/vc
    if [[ -f ".vllmcarry/p$2/site.sha256" ]]; then
      # shellcheck source=vllm_carry/stage.sh
      source scripts/vllm_carry/stage.sh || exit $?
      python3 -c "import vllm; print('vllm', vllm.__version__, 'importable')"
    fi
    exit ;;
esac
# shellcheck source=vllm_carry/stage.sh
source scripts/vllm_carry/stage.sh || { echo "vLLM parts missing: run calls 1 and 2 first"; exit 3; }
site=/tmp/kvsite
rm -rf "$site" && mkdir -p "$site"
python3 -m pip install -q --disable-pip-version-check --no-index --no-deps --target "$site" \
  .bundle/wheels/kvstrata-*.whl || exit 4
export PYTHONPATH="$site:$repo/connector_vllm:$PYTHONPATH"
export KVSTRATA_DAEMON="$repo/.bundle/bin/kvstratad"
nvidia-smi --query-gpu=name,memory.total,memory.used,pcie.link.gen.current,pcie.link.width.current \
  --format=csv >"$out/nvidia_smi.txt" 2>&1
nvidia-smi topo -m >>"$out/nvidia_smi.txt" 2>&1   # how the GPUs are linked (TP runs)
python3 -c "import vllm, kvstrata, kvstrata_vllm, torch; print('vllm', vllm.__version__, 'kvstrata', kvstrata.__version__, 'torch', torch.__version__, 'gpus', torch.cuda.device_count())" || exit 5
python3 bench/vllm_gpu/run.py --out "$out" "$@"
