#!/usr/bin/env bash
# Real SGLang 0.5.17 engines on the lent GPU machine with KVStrata as HiCache's L3, beside
# SGLang's own file backend: bench/sglang_gpu/run.py. Prepared here (network, no GPU), then
# device calls sent one right after the other (a machine keeps /tmp only while warm, ~30 s):
#
#   bash scripts/sglang_carry/prepare.sh .sglcarry       # here: SGLang 0.5.17 site, ~37 MiB
#   bash scripts/bundle.sh && bash scripts/bundle_python.sh   # here: the daemon + client
#   call 1, carry [".sglcarry/p1"]:  bash scripts/gpu_sglang.sh --part 1
#   (one such call per part prepare.sh made: p1, p2, ...; the last one unpacks and checks)
#   call 2, carry [".bundle"]:  bash scripts/gpu_sglang.sh --roles none,file,kvstrata --keep-daemon
#   call 3, carry [".bundle"]:  bash scripts/gpu_sglang.sh --roles file_b,kvstrata_b --continue
#
# Calls 2 and 3 install the kvstrata client wheel (.bundle/wheels) into /tmp/kvsite, put
# kvstrata_sglang (connector_sglang/) and SGLang (/tmp/sgsite) on PYTHONPATH and run the
# benchmark; results in $OUT: sglang_gpu.json, summary.txt, run.log, kvstratad.log,
# nvidia_smi.txt.
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo" || exit 1
out="${OUT:-$repo/gpu-out}"
mkdir -p "$out"
if [[ "${1:-}" == --part ]]; then
  mkdir -p /tmp/sc && cp .sglcarry/p"$2"/* /tmp/sc/ && ls -la /tmp/sc || exit 3
  if [ -f /tmp/sc/parts ]; then
    # shellcheck source=sglang_carry/stage.sh
    source scripts/sglang_carry/stage.sh || exit $?
    python3 -c "import sglang, sgl_kernel; print('sglang', sglang.__version__, 'importable')"
  fi
  exit
fi
# shellcheck source=sglang_carry/stage.sh
source scripts/sglang_carry/stage.sh || { echo "SGLang parts missing: run the --part calls first"; exit 3; }
site=/tmp/kvsite
if [ ! -d "$site/kvstrata" ]; then
  mkdir -p "$site"
  python3 -m pip install -q --disable-pip-version-check --no-index --no-deps --target "$site" \
    .bundle/wheels/kvstrata-*.whl || exit 4
fi
export PYTHONPATH="$site:$repo/connector_sglang:$PYTHONPATH"
nvidia-smi --query-gpu=name,memory.total,memory.used,pcie.link.gen.current,pcie.link.width.current \
  --format=csv >"$out/nvidia_smi.txt" 2>&1
python3 -c "import sglang, kvstrata, kvstrata_sglang, torch; print('sglang', sglang.__version__, 'kvstrata', kvstrata.__version__, 'torch', torch.__version__)" || exit 5
python3 bench/sglang_gpu/run.py --out "$out" "$@"
