#!/usr/bin/env bash
# Builds and runs the L2/L3 tier benchmarks (issue 5) and prints everything:
#   l2_fio         L2 reads/writes beside fio with the same pattern (O_DIRECT, one block file
#                  per I/O, io_threads in flight): GB/s, per block and per 64-block prompt
#   l2_throughput  FileTier write/read GB/s beside raw O_DIRECT (and fio, dd) on one disk
#   make_l2_tree + l2_restart  a kvstratad restarted on 1M block files: first hit, warm index
#   l3_lookup      two kvstratad on one L3 directory: hit / miss Lookup latency
# Not part of CI (minutes of disk I/O and ~10 GiB of files).
#
#   bash bench/tiers/run.sh            # full sizes (bench/results/cpu-2026-11-21-tiers/NOTES.md)
#   bash bench/tiers/run.sh --quick    # small sizes: a smoke run, not for a run's NOTES.md
# Environment:
#   KVSTRATA_BUILD_DIR   build directory (default build/, configured with tests and benches)
#   KVSTRATA_BENCH_DIR   where the files go, on the disk under test (default /var/tmp)
#   KVSTRATA_BENCH_DROP_CACHES=1  also restart once after dropping the page/dentry/inode
#                        caches (needs root; slows every other process on the machine)
#   KVSTRATA_DAEMON      the kvstratad to run (default: the one built here)
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${KVSTRATA_BUILD_DIR:-$repo/build}"
dir="${KVSTRATA_BENCH_DIR:-/var/tmp}"
jobs="${KVSTRATA_BENCH_JOBS:-$(nproc)}"
quick=0
[ "${1:-}" = "--quick" ] && quick=1

# fio is the baseline of l2_fio and l2_throughput (Debian's package, as scripts/setup.sh
# installs the build's; the benches still print their own figures without it).
if ! command -v fio >/dev/null; then
  echo "bench/tiers: apt-get install fio"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  { $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends fio >/dev/null; } \
    || echo "bench/tiers: could not install fio: the benches run without it"
fi

if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$repo" -B "$build" -G Ninja -DKVSTRATA_BUILD_BENCH=ON -DKVSTRATA_BUILD_TESTS=ON || exit 1
fi
ninja -C "$build" -j "$jobs" l2_fio l2_throughput make_l2_tree l2_restart l3_lookup kvstratad || exit 1
bin="$build/bench/tiers"

echo "machine: $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)," \
     "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(uname -r)"
echo "commit: $(git -C "$repo" rev-parse --short HEAD 2>/dev/null)$(git -C "$repo" diff --quiet 2>/dev/null || echo ' (+ local changes)')"
echo "disk: $(df -h --output=source,fstype,avail "$dir" | tail -1)"
status=0
run() {
  echo
  echo "=== $* ==="
  "$@" || { echo "(exit $?)"; status=1; }
}

if [ $quick -eq 1 ]; then
  files=20000
  run "$bin/l2_fio" --dir="$dir" --gib=0.25 --rounds=1
  run "$bin/l2_throughput" --dir="$dir" --gib=0.25 --rounds=1
else
  files=1000000
  # The daemon's default l2.io_threads = 4; a 2 MiB block (16 tokens of an 8B model) and a
  # 256 KiB one; 64-block prompts with 4 outstanding, then a 16-block prompt alone.
  run "$bin/l2_fio" --dir="$dir" --gib=2 --rounds=5
  run "$bin/l2_fio" --dir="$dir" --gib=1 --rounds=5 --payload_kib=256
  run "$bin/l2_fio" --dir="$dir" --gib=1 --rounds=5 --payload_kib=256 --request_blocks=16 --queued=1
  run "$bin/l2_throughput" --dir="$dir" --gib=2 --rounds=5
fi

tree="$dir/kvstrata-l2-restart-tree"
rm -rf "$tree"
run "$bin/make_l2_tree" --root="$tree" --files=$files --payload=4096 --threads=4
run "$bin/l2_restart" --root="$tree" --files=$files --payload=4096
if [ "${KVSTRATA_BENCH_DROP_CACHES:-0}" = "1" ]; then
  run "$bin/l2_restart" --root="$tree" --files=$files --payload=4096 --drop_caches
fi
rm -rf "$tree"

run "$bin/l3_lookup" --dir="$dir"
exit $status
