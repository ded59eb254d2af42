#!/usr/bin/env bash
# Sourced on the GPU machine (no network, Python 3.12, torch 2.11.0+cu130), from the
# repository root, by scripts/gpu_vllm.sh. It joins the two carried parts of vLLM 0.26.0
# (scripts/vllm_carry/prepare.sh), unpacks them once into /tmp/site, and exports the
# offline environment vLLM needs. The parts arrive in two earlier calls, back to back (a
# machine keeps /tmp only while warm, ~30 s between calls):
#   call 1, carry [".vllmcarry/p1"]:  bash scripts/gpu_vllm.sh --part 1
#   call 2, carry [".vllmcarry/p2"]:  bash scripts/gpu_vllm.sh --part 2
# Returns non-zero (3 copy, 4 checksum, 5 unpack) when a part is missing or damaged.
stage_dir="${VLLM_CARRY_DIR:-.vllmcarry}"
here_stubs="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/stubs"
if [ ! -d /tmp/site/vllm ]; then
  mkdir -p /tmp/vc /tmp/site
  if [ ! -f /tmp/vc/site.part.1 ]; then cp "$stage_dir/p2/site.part.1" "$stage_dir/p2/site.sha256" /tmp/vc/ || return 3; fi
  cat /tmp/vc/site.part.0 /tmp/vc/site.part.1 >/tmp/vc/site.tar.xz || return 3
  (cd /tmp/vc && sha256sum -c site.sha256) || return 4
  tar -C /tmp/site -xJf /tmp/vc/site.tar.xz || return 5
  rm -f /tmp/vc/site.tar.xz
fi
# stubs/: vLLM 0.26's structured-output module evaluates `llguidance.LLMatcher` at import.
export PYTHONPATH="/tmp/site:${VLLM_STUBS:-$here_stubs}${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 \
  DO_NOT_TRACK=1 VLLM_USE_FLASHINFER_SAMPLER=0 TORCHINDUCTOR_COMPILE_THREADS=8
