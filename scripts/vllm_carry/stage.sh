#!/usr/bin/env bash
# Sourced on the GPU machine (no network, Python 3.12, torch 2.11.0+cu130), from the
# repository root, by scripts/gpu_vllm.sh. It joins the carried parts of vLLM 0.26.0
# (scripts/vllm_carry/prepare.sh), unpacks them once into /tmp/site, and exports the
# offline environment vLLM needs. The parts arrive in earlier calls, back to back (a
# machine keeps /tmp only while warm, ~30 s between calls), one part per call:
#   call N, carry [".vllmcarry/pN"]:  bash scripts/gpu_vllm.sh --part N   (N = 1, 2, 3)
# (a part beside the repository's working tree must stay under the call's 64 MiB).
# Returns non-zero (3 copy, 4 checksum, 5 unpack) when a part is missing or damaged.
stage_dir="${VLLM_CARRY_DIR:-.vllmcarry}"
here_stubs="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/stubs"
if [ ! -d /tmp/site/vllm ]; then
  mkdir -p /tmp/vc /tmp/site
  [ -f /tmp/vc/site.sha256 ] || return 3
  cat /tmp/vc/site.part.* >/tmp/vc/site.tar.xz || return 3
  (cd /tmp/vc && sha256sum -c site.sha256) || return 4
  tar -C /tmp/site -xJf /tmp/vc/site.tar.xz || return 5
  rm -f /tmp/vc/site.tar.xz
fi
# stubs/: vLLM 0.26's structured-output module evaluates `llguidance.LLMatcher` at import.
export PYTHONPATH="/tmp/site:${VLLM_STUBS:-$here_stubs}${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 \
  DO_NOT_TRACK=1 VLLM_USE_FLASHINFER_SAMPLER=0 TORCHINDUCTOR_COMPILE_THREADS=8
