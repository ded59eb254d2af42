#!/usr/bin/env bash
# The node benchmark on a lent multi-GPU machine (nvidia-h100-x2 / nvidia-h200-x2, or the
# 4-GPU kinds nvidia-h100-x4 / nvidia-h200-x4 where `status` lists them: the same calls with
# that kind; every GPU gets a replica, kvstratad's L1 is replicas x --cpu-gib):
# bench/node/run.py, real `vllm serve` replicas (one per GPU) behind a router, one kvstratad
# for the node. Prepared here (network, no GPU), then device calls sent one right after the
# other (a machine keeps /tmp only while warm; .vllmcarry/p3 and .bundle together pass a
# call's 64 MiB: carry them in separate calls):
#
#   bash scripts/vllm_carry/prepare.sh .vllmcarry            # here: vLLM 0.26 in three parts
#   bash scripts/vllm_carry/prepare_serve.sh                 # here: .vllmcarry/serve (~4 MB)
#   bash scripts/bundle.sh && bash scripts/bundle_python.sh  # here: the daemon + client wheel
#   calls 1-3, kind nvidia-h100-x2, carry [".vllmcarry/pN"]:  bash scripts/gpu_vllm.sh --part N
#   call 3b, carry [".vllmcarry/serve"]:                      bash scripts/vllm_carry/stage_serve.sh
#   call 4, carry [".bundle"]:                                bash scripts/gpu_node.sh
# (.bundle, .vllmcarry/serve and the tree together pass a call's 64 MiB: call 3b stages the
# serve site in /tmp/serve_stage, which scripts/lib/serve_env.sh uses in the later calls)
#   (on the same machine, every GPU loading at once: carry [".bundle"],
#                                                 bash bench/gpu/run_node_loads.sh)
#   call 5 (if call 4 stopped before the end of the plan), the same carry:
#                                                            bash scripts/gpu_node.sh --continue
#
# Faults (issue 41 item 3: a rolling restart of one replica, time to its first hit after
# /health; a SIGKILL of one replica during its loads, the others' TTFT around it and the
# daemon's cleanup; bench/node/faults.py, README "Faults"), after calls 1-3 on the same
# machine (and call 3b), carry [".bundle"], 6.7 min on two H200s (bench/node/README.md
# "Faults"):
#                    bash scripts/gpu_node.sh --plan native:sticky,kvstrata:sticky --faults restart,kill
#   and, only if it says "run again with --continue" (~2-4 min):  bash scripts/gpu_node.sh --continue
#
# Options go to bench/node/run.py (see bench/node/README.md), e.g.
#   bash scripts/gpu_node.sh --plan none:rr,kvstrata:rr+sticky --conversations 48
# The default plan (none:rr, native:rr+sticky, kvstrata:rr+least+sticky) is sized for one
# call (~6-7 min of its 600 s, estimated from the measured role and mode times); run.py stops
# before a role or mode that would pass its --budget-s (560 s) and call 5 runs the rest. LMCache (bench/node/lmcache_role.py, carried
# by scripts/lmcache_carry/prepare.sh) joins a finished run in one more call, reported with
# the other roles:
#   call 6a, carry [".lmcachecarry"]:  mkdir -p /tmp/lmc_parts && cp .lmcachecarry/p1/* /tmp/lmc_parts/
#   call 6b, carry [".bundle"]:        bash scripts/gpu_node.sh --continue --plan lmcache:rr+sticky
#
# This call installs the kvstrata client wheel (.bundle/wheels) into /tmp/kvsite, puts vLLM
# (/tmp/site, unpacked by call 3), the serve site (/tmp/serve_stage), the client and the
# connector (connector_vllm/) on PYTHONPATH and runs the benchmark; results in $OUT:
# node.json, summary.txt, replica_logs.txt, kvstratad.log, nvidia_smi.txt, run.log.
set -uo pipefail
# shellcheck source=lib/serve_env.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/serve_env.sh"
nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv >"$out/nvidia_smi.txt" 2>&1
python3 -c "import vllm, kvstrata, kvstrata_vllm, uvicorn, aiohttp, tokenizers, torch; print('vllm', vllm.__version__, 'kvstrata', kvstrata.__version__, 'torch', torch.__version__, 'gpus', torch.cuda.device_count())" || exit 5
python3 bench/node/run.py --out "$out" "$@" 2>&1 | tee "$out/run.log"
exit "${PIPESTATUS[0]}"
