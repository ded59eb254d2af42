#!/usr/bin/env bash
# L2 beside fio on the GPU machine's own disk (issue 43 item 3), in one device call:
# bench/tiers/l2_fio from .bundle (bundle.sh builds it) and a static fio built here
# (.fiocarry/fio: the GPU image has no fio and no network):
#
#   here:  bash bench/tiers/build_fio.sh                 # .fiocarry/fio, ~3 min on 2 cores
#          bash scripts/bundle.sh                        # .bundle with l2_fio
#   device call, carry [".bundle", ".fiocarry"]:  bash bench/tiers/run_gpu_l2_fio.sh
#
# The directory is the one the vLLM benches put L2 in (/tmp, the machine's root disk), or
# KVSTRATA_BENCH_DIR. Results in $OUT: l2_fio_<payload>.json per payload and summary.txt.
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo" || exit 1
out="${OUT:-$repo/gpu-out}"
mkdir -p "$out"
export PATH="$repo/.fiocarry:$PATH"
dir="${KVSTRATA_BENCH_DIR:-/tmp/kvs-l2-fio}"
mkdir -p "$dir"
{
  echo "machine: $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -r)"
  echo "fio: $(fio --version 2>&1)"
  echo "disk: $(df -h --output=source,fstype,size,avail "$dir" | tail -1)"
  lsblk -o NAME,TYPE,SIZE,ROTA,MODEL,MOUNTPOINT 2>/dev/null | head -20
} | tee "$out/summary.txt"
status=0
for spec in "2048 ${L2_FIO_GIB_2M:-2}" "256 ${L2_FIO_GIB_256K:-1}" "64 ${L2_FIO_GIB_64K:-0.5}"; do
  read -r kib gib <<<"$spec"
  echo -e "\n=== l2_fio --payload_kib=$kib --gib=$gib --rounds=${L2_FIO_ROUNDS:-3} ===" | tee -a "$out/summary.txt"
  .bundle/bin/l2_fio --dir="$dir" --payload_kib="$kib" --gib="$gib" --rounds="${L2_FIO_ROUNDS:-3}" \
    --out="$out/l2_fio_${kib}k.json" 2>&1 | tee -a "$out/summary.txt" || status=1
  rm -rf "${dir:?}"/*
done
exit $status
