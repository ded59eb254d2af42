#!/bin/bash
cd /work/main
B=/work/base-wt/build
for i in 1 2 3; do
  $B/bench/rpc/lookup_latency > /tmp/ab2/lookup_base_$i.txt 2>&1
  build/bench/rpc/lookup_latency > /tmp/ab2/lookup_after_$i.txt 2>&1
  $B/bench/rpc/host_store_load > /tmp/ab2/hsl_base_$i.txt 2>&1
  build/bench/rpc/host_store_load > /tmp/ab2/hsl_after_$i.txt 2>&1
done
for i in 1 2; do
  KVSTRATA_DAEMON=/work/pre-epoll/build/daemon/server/kvstratad build/bench/rpc/lookup_latency 3000 fast > /tmp/ab2/fast_pre_$i.txt 2>&1
  KVSTRATA_DAEMON=build/daemon/server/kvstratad build/bench/rpc/lookup_latency 3000 fast > /tmp/ab2/fast_after_$i.txt 2>&1
done
for i in 1 2; do
  $B/bench/core/cache_throughput --benchmark_min_time=1 > /tmp/ab2/ct_base_$i.txt 2>&1
  build/bench/core/cache_throughput --benchmark_min_time=1 > /tmp/ab2/ct_after_$i.txt 2>&1
done
for i in 1 2; do
  PYTHONPATH=/tmp/base-py KVSTRATA_DAEMON=$B/daemon/server/kvstratad .venv-sglang/bin/python /work/base-wt/bench/sglang/storage_bench.py > /tmp/ab2/sgl_base_$i.txt 2>&1
  KVSTRATA_DAEMON=build/daemon/server/kvstratad .venv-sglang/bin/python bench/sglang/storage_bench.py > /tmp/ab2/sgl_after_$i.txt 2>&1
done
echo done > /tmp/ab2/DONE
