#!/usr/bin/env bash
# The engine-jobs A/B on a lent GPU machine, in two back-to-back calls (each < 10 min):
#   bash bench/gpu/run_engine_jobs.sh 1   # python env, transfer_gpu_test, engine_jobs with
#                                         # gpu.copy_streams=1 (one stream per job: before)
#   bash bench/gpu/run_engine_jobs.sh 2   # engine_jobs with the default (4 streams), then
#                                         # the GPU Python tests
#   bash bench/gpu/run_engine_jobs.sh 3   # job frames vs gRPC submits (KVSTRATA_FAST_SUBMIT=0)
#                                         # and gpu.copy_streams=8, on four layouts
#   SIZES=8192 REPEATS=15 bash bench/gpu/run_engine_jobs.sh 4
#                                         # stores by DMA (the default since vLLM run 14)
#                                         # against gpu.copy_strategy=staged, five layouts
#   bash bench/gpu/run_engine_jobs.sh 5   # transfer_gpu_test; the default (calibrated copy
#                                         # choice, slots in runs), seven layouts
#   bash bench/gpu/run_engine_jobs.sh 6   # the daemon's per-job stage times (--stages: its
#                                         # log at debug level) for three layouts; then seven
#                                         # layouts at 8K with every copy staged
#                                         # (gpu.copy_strategy=staged: staged stores)
#   AB_DAEMONS="a=PATH b=PATH" AB_ARGS="--layouts nhd16 --sizes 8192" \
#     bash bench/gpu/run_engine_jobs.sh 7 # same-run A/B of daemon binaries (each run with
#                                         # .bundle/lib), in the order a b a b
#   AB_BUILDS="a=DAEMON:WHEEL b=DAEMON:WHEEL" AB_ARGS="--layouts nhd16 --sizes 8192" \
#     bash bench/gpu/run_engine_jobs.sh 9 # same-run A/B of daemons with their own client wheel,
#                                         # order a b a b, then a --timeline run of b; one .tgz
#   bash bench/gpu/run_engine_jobs.sh 8   # job completions on the job socket (the default)
#                                         # against over WatchCompletions (--completions
#                                         # stream), in the order socket stream socket stream
# Needs .bundle/ (scripts/bundle.sh, scripts/bundle_python.sh); writes under $OUT.
set -uo pipefail
# shellcheck source=../../scripts/lib/bundle_env.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib/bundle_env.sh"
jobs_args=(--repeats "${REPEATS:-20}" --sizes "${SIZES:-1024,8192,32768}")

daemon_wrapper() {  # daemon_wrapper NAME BINARY: /tmp/kvstratad-NAME runs BINARY with .bundle/lib
  local binary
  binary="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s/.bundle/lib exec %s "$@"\n' "$repo" "$binary" \
    >"/tmp/kvstratad-$1"
  chmod +x "/tmp/kvstratad-$1"
}

engine_jobs() {  # engine_jobs NAME [--set ...]
  local name="$1"
  shift
  timeout -s INT -k 20 "${ENGINE_JOBS_LIMIT:-330}" python3 bench/gpu/engine_jobs.py \
    "${jobs_args[@]}" "$@" --out "$out/engine_jobs_$name.json" 2>&1 |
    tee "$out/engine_jobs_$name.txt" | grep -v "^\[load_latency" | tail -n 45
}

case "${1:-}" in
  1)
    bash scripts/gpu_run.sh --install-python | tail -n 3
    nvidia-smi --query-gpu=name,pcie.link.gen.current,pcie.link.width.current --format=csv
    timeout -k 10 200 .bundle/bin/transfer_gpu_test >"$out/transfer_gpu_test.txt" 2>&1
    echo "transfer_gpu_test rc=$?: $(grep -E '^\[  (PASSED|FAILED)' "$out/transfer_gpu_test.txt" | tr '\n' ' ')"
    engine_jobs streams1 --set gpu.copy_streams=1
    ;;
  2)
    engine_jobs streams4
    KVSTRATA_REQUIRE_GPU=1 timeout -k 10 200 python3 -m pytest tests/gpu/python -q -x \
      >"$out/pytest_gpu.txt" 2>&1
    echo "pytest tests/gpu/python rc=$?: $(tail -n 1 "$out/pytest_gpu.txt")"
    ;;
  3)
    bash scripts/gpu_run.sh --install-python | tail -n 1
    engine_jobs fast
    KVSTRATA_FAST_PATH=0 engine_jobs grpc --layouts nhd16,nhd32,mla,cross_layer
    engine_jobs streams8 --layouts nhd16,nhd32,flashinfer,mla --set gpu.copy_streams=8
    ;;
  4)
    bash scripts/gpu_run.sh --install-python | tail -n 1
    layouts=(--layouts nhd16,nhd32,flashinfer,mla,cross_layer --no-overlap)
    engine_jobs default "${layouts[@]}"
    engine_jobs staged "${layouts[@]}" --set gpu.copy_strategy=staged
    ;;
  5)
    bash scripts/gpu_run.sh --install-python | tail -n 1
    timeout -k 10 200 .bundle/bin/transfer_gpu_test >"$out/transfer_gpu_test.txt" 2>&1
    echo "transfer_gpu_test rc=$?: $(grep -E '^\[  (PASSED|FAILED)' "$out/transfer_gpu_test.txt" | tr '\n' ' ')"
    grep -E '^\[ calib' "$out/transfer_gpu_test.txt"
    engine_jobs default --layouts nhd16,hnd16,nhd32,flashinfer,mla,cross_layer,sglang
    ;;
  6)
    bash scripts/gpu_run.sh --install-python | tail -n 1
    jobs_args=(--repeats "${REPEATS:-20}" --sizes 1024,8192)
    engine_jobs stages --stages --layouts nhd16,flashinfer,mla --no-overlap
    jobs_args=(--repeats "${REPEATS:-20}" --sizes 8192)
    engine_jobs staged --layouts nhd16,hnd16,nhd32,flashinfer,mla,cross_layer,sglang --no-overlap \
      --set gpu.copy_strategy=staged
    ;;
  7)
    bash scripts/gpu_run.sh --install-python | tail -n 1
    read -r -a ab_args <<<"${AB_ARGS:-}"
    for round in 1 2; do
      for pair in ${AB_DAEMONS:?name=path pairs}; do
        name="${pair%%=*}"
        daemon_wrapper "$name" "${pair#*=}"
        KVSTRATA_DAEMON="/tmp/kvstratad-$name" engine_jobs "${name}_$round" --no-overlap "${ab_args[@]}"
      done
    done
    ;;
  8)
    bash scripts/gpu_run.sh --install-python | tail -n 1
    jobs_args=(--repeats "${REPEATS:-20}" --sizes "${SIZES:-1024,8192}")
    read -r -a ab_args <<<"${AB_ARGS:---layouts nhd16,flashinfer,mla,cross_layer}"
    for round in 1 2; do
      engine_jobs "socket_$round" --no-overlap "${ab_args[@]}"
      engine_jobs "stream_$round" --no-overlap --completions stream "${ab_args[@]}"
    done
    ;;
  9)
    # Same-run A/B of whole builds, the daemon with its client:
    # AB_BUILDS="a=DAEMON:WHEEL b=DAEMON:WHEEL", order a b a b, then one --timeline run of the
    # last (AB_TIMELINE=0: none); the results go into $out/engine_jobs_ab.tgz.
    bash scripts/gpu_run.sh --install-python | tail -n 1
    read -r -a ab_args <<<"${AB_ARGS:-}"
    final="$out"
    out="$(mktemp -d)"
    for round in 1 2; do
      for build in ${AB_BUILDS:?name=daemon:wheel pairs}; do
        name="${build%%=*}" paths="${build#*=}"
        site="/tmp/kvsite-$name"
        if [ ! -d "$site" ]; then  # The bundle's site with this build's kvstrata package.
          cp -r "$KVSTRATA_SITE" "$site" && rm -rf "$site"/kvstrata "$site"/kvstrata-*.dist-info
          python3 -m zipfile -e "${paths#*:}" "$site"
        fi
        daemon_wrapper "$name" "${paths%%:*}"
        KVSTRATA_DAEMON="/tmp/kvstratad-$name" PYTHONPATH="$site" \
          engine_jobs "${name}_$round" --no-overlap "${ab_args[@]}"
      done
    done
    if [ "${AB_TIMELINE:-1}" = 1 ]; then
      KVSTRATA_DAEMON="/tmp/kvstratad-$name" PYTHONPATH="$site" \
        engine_jobs "${name}_timeline" --no-overlap --timeline "${ab_args[@]}"
    fi
    tar -C "$out" -czf "$final/engine_jobs_ab.tgz" .
    ;;
  *)
    echo "usage: $0 1|2|3|4|5|6|7|8|9" >&2
    exit 2
    ;;
esac
