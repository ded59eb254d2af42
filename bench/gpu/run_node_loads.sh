#!/usr/bin/env bash
# node_loads.py on a lent multi-GPU machine, in one device call (run tool, kind
# nvidia-h100-x4 or nvidia-h200-x4, carry [".bundle"]; ~1-2 min on four GPUs):
#   bash bench/gpu/run_node_loads.sh [node_loads.py options, e.g. --devices 0,1 --repeats 5]
# Needs .bundle/ (here: bash scripts/bundle.sh && bash scripts/bundle_python.sh). Installs the
# client wheel into $KVSTRATA_SITE (/tmp/kvsite), prints the GPUs' PCIe links and topology,
# runs node_loads.py with its defaults under $NODE_LOADS_LIMIT s (300); $OUT gets
# node_loads.json, summary.txt and node_loads.log (this script's whole output).
set -uo pipefail
# shellcheck source=../../scripts/lib/bundle_env.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib/bundle_env.sh"
{
  bash scripts/gpu_run.sh --install-python | tail -n 3
  nvidia-smi --query-gpu=index,name,pcie.link.gen.current,pcie.link.width.current,memory.used \
    --format=csv
  nvidia-smi topo -m
  nproc
  timeout -s INT -k 20 "${NODE_LOADS_LIMIT:-300}" python3 bench/gpu/node_loads.py --out "$out" "$@"
  echo "node_loads.py rc=$?"
} 2>&1 | tee "$out/node_loads.log"
rc="$(sed -n 's/^node_loads.py rc=\([0-9]*\)$/\1/p' "$out/node_loads.log" | tail -n 1)"
exit "${rc:-1}"
