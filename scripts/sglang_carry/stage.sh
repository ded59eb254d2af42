#!/usr/bin/env bash
# Sourced on the GPU machine (no network, Python 3.12, torch 2.11.0+cu130), from the
# repository root, by scripts/gpu_sglang.sh. Keeps each carried part of the SGLang 0.5.17
# site (scripts/sglang_carry/prepare.sh) in /tmp/sc, and once the last one is there joins,
# checks and unpacks them into /tmp/sgsite; then exports the offline environment. The parts
# arrive in calls sent back to back (a machine keeps /tmp only while warm, ~30 s between
# calls). Returns non-zero (3 a part missing, 4 checksum, 5 unpack) when it cannot.
sg_carry="${SGLANG_CARRY_DIR:-.sglcarry}"
if [ ! -d /tmp/sgsite/sglang ]; then
  mkdir -p /tmp/sc /tmp/sgsite
  for d in "$sg_carry"/p*; do [ -d "$d" ] && cp "$d"/* /tmp/sc/; done
  [ -f /tmp/sc/parts ] && [ -f /tmp/sc/site.sha256 ] || return 3
  n="$(cat /tmp/sc/parts)"
  for i in $(seq 0 $((n - 1))); do [ -f "/tmp/sc/site.part.$i" ] || return 3; done
  cat /tmp/sc/site.part.* >/tmp/sc/site.tar.xz || return 3
  (cd /tmp/sc && sha256sum -c site.sha256) || return 4
  tar -C /tmp/sgsite -xJf /tmp/sc/site.tar.xz || return 5
  rm -f /tmp/sc/site.tar.xz
fi
export PYTHONPATH="/tmp/sgsite${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 SGLANG_DISABLE_REQUEST_LOGGING=1 \
  DO_NOT_TRACK=1 TORCHINDUCTOR_COMPILE_THREADS=8
