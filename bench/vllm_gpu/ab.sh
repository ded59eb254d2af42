#!/usr/bin/env bash
# A same-run A/B of bench/vllm_gpu on one device: this tree ("new") against the older commit
# that bench/vllm_gpu/ab_prepare.sh put in build-ab/ ("old"), alternating new, old, new, old
# (AB_ROUNDS rounds, default 2) with the same arguments (gpu_vllm.sh's). Results in $OUT:
# ab.json and ab_summary.txt (ab_report.py: each side's TTFT per row over its rounds), and
# raw.tar.gz (every run's own output).
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo" || exit 1
out="${OUT:-$repo/gpu-out}"
mkdir -p "$out"
[[ -d build-ab/tree/.bundle ]] || { echo "build-ab missing: run bench/vllm_gpu/ab_prepare.sh COMMIT here and carry it"; exit 3; }
# build-ab carries no libraries: its commit links the same system libraries as this tree's bundle.
[[ -d build-ab/tree/.bundle/lib ]] || cp -a .bundle/lib build-ab/tree/.bundle/lib
raw="$(mktemp -d /tmp/kvs-ab.XXXXXX)"
rounds="${AB_ROUNDS:-2}"
for ((r = 1; r <= rounds; r++)); do
  for side in new old; do
    dir="$raw/$side-$r"
    mkdir -p "$dir"
    echo "=== round $r: $side"
    if [[ "$side" == new ]]; then
      OUT="$dir" bash scripts/gpu_vllm.sh "$@" >"$dir/stdout.txt" 2>&1
    else
      (cd build-ab/tree && OUT="$dir" bash scripts/gpu_vllm.sh "$@") >"$dir/stdout.txt" 2>&1
    fi
    echo "rc $?"; tail -n 3 "$dir/stdout.txt"
  done
done
python3 bench/vllm_gpu/ab_report.py --old-label "$(cat build-ab/COMMIT)" "$raw" "$out/ab.json" |
  tee "$out/ab_summary.txt"
tar -C "$raw" -czf "$out/raw.tar.gz" .
