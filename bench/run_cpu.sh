#!/usr/bin/env bash
# Builds and runs every CPU benchmark (no GPU needed) and prints everything:
#   bench/core: index_memory, pool_populate, cache_throughput, hit_ratio
#   bench/rpc:  lookup_latency, host_store_load (each spawns its own kvstratad)
# Uses build/ (or $KVSTRATA_BUILD_DIR), configured with the benchmarks and tests on.
#
#   bash bench/run_cpu.sh            # everything
#   bash bench/run_cpu.sh --quick    # smaller sizes (a smoke run, not for a run's NOTES.md)
#   KVSTRATA_BENCH_JOBS=1 bash bench/run_cpu.sh   # ninja parallelism
# Exits non-zero when a build or a benchmark fails (a missed target is printed as FAIL
# in the table, and host_store_load exits 2 then; that is reported, not fatal).
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${KVSTRATA_BUILD_DIR:-$repo/build}"
jobs="${KVSTRATA_BENCH_JOBS:-$(nproc)}"
quick=0
[ "${1:-}" = "--quick" ] && quick=1

targets=(index_memory pool_populate cache_throughput hit_ratio lookup_latency host_store_load kvstratad)
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$repo" -B "$build" -G Ninja -DKVSTRATA_BUILD_BENCH=ON -DKVSTRATA_BUILD_TESTS=ON || exit 1
fi
ninja -C "$build" -j "$jobs" "${targets[@]}" || exit 1

echo "machine: $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)," \
     "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(uname -r)"
echo "commit: $(git -C "$repo" rev-parse --short HEAD 2>/dev/null)$(git -C "$repo" diff --quiet 2>/dev/null || echo ' (+ local changes)')"
status=0
run() {
  echo
  echo "=== $* ==="
  "$@"
  local rc=$?
  if [ $rc -ne 0 ]; then echo "(exit $rc)"; [ $rc -ne 2 ] && status=1; fi
}

if [ $quick -eq 1 ]; then
  run "$build/bench/core/index_memory" 1000000
  run "$build/bench/core/pool_populate" 0.5
  run "$build/bench/core/cache_throughput" --benchmark_min_time=0.2
  run "$build/bench/core/hit_ratio" 3000
  run "$build/bench/rpc/lookup_latency" 500
  run "$build/bench/rpc/host_store_load" 64 1
else
  run "$build/bench/core/index_memory"
  run "$build/bench/core/pool_populate"
  run "$build/bench/core/cache_throughput"
  run "$build/bench/core/hit_ratio"
  run "$build/bench/rpc/lookup_latency"
  run "$build/bench/rpc/host_store_load"
fi
exit $status
