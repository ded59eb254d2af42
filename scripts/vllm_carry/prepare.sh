#!/usr/bin/env bash
# Prepares a vLLM 0.26.0 site directory for the offline GPU machine (Python 3.12, torch
# 2.11.0+cu130 already there) and splits it into carry folders of 40 MB each (three today).
#   bash scripts/vllm_carry/prepare.sh [DEST]     # DEST default: .vllmcarry (git-ignored)
# Needs PyPI, unzip, xz, strip. Takes ~6 min on 2 cores (xz -9e dominates).
set -euo pipefail
dest="${1:-.vllmcarry}"
work="${VLLM_CARRY_WORK:-$(mktemp -d)}"
py="${PYTHON:-python3}"
# shellcheck source=../lib/gpu_wheels.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/gpu_wheels.sh"
mkdir -p "$work/whl" "$work/deps"
# vLLM itself (~304 MB wheel), no dependencies.
"$py" -m pip download -q --no-deps "${gpu_wheel_args[@]}" -d "$work/whl" vllm==0.26.0
# What the GPU image lacks and the offline LLM path imports. Everything else is on the image
# (torch, transformers, tokenizers, triton, numpy, aiohttp, psutil, ...) or imported only
# for features an offline Llama engine does not use (flashinfer, mistral_common,
# compressed-tensors, tilelang, cutlass-dsl, ...). openai < 3 (3.x pulls httpx2).
"$py" -m pip download -q --no-deps "${gpu_wheel_args[@]}" -d "$work/deps" \
  pydantic==2.14.3 pydantic-core==2.50.4 annotated-types==0.8.0 typing-inspection==0.4.5 \
  typing-extensions==4.16.0 msgspec==0.22.0 pyzmq==27.3.0 cbor2==6.3.0 cachetools==8.0.1 \
  blake3==1.0.11 pybase64==1.5.1 setproctitle==1.3.8 partial-json-parser==0.2.1.1.post7 \
  openai==2.54.0 distro==1.9.0 jiter==0.19.0 sniffio==1.3.1 anyio==4.16.0 \
  openai-harmony==0.0.8 fastapi==0.136.3 starlette==1.10.0 annotated-doc==0.0.7 \
  depyf==0.20.0 astor==0.8.1 dill==0.4.1 nvtx==0.2.15
# One site directory: wheels are zip files.
rm -rf "$work/site" && mkdir -p "$work/site"
for w in "$work"/whl/vllm-0.26.0-*.whl "$work"/deps/*.whl; do unzip -q -o "$w" -d "$work/site"; done
# Drop what a Llama engine on Hopper with FlashAttention 3 never loads.
cd "$work/site"
rm -f vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so   # FA2 for Ampere (optional import)
rm -f vllm/vllm-rs                                # Rust API-server frontend
rm -f vllm/third_party/deep_gemm/_C.cpython-31[0134]-x86_64-linux-gnu.so
rm -rf vllm/third_party/deep_gemm/include vllm/third_party/fmha_sm100/cutlass
for f in vllm/*.so vllm/vllm_flash_attn/*.so vllm/third_party/deep_gemm/*.so; do
  [ -f "$f" ] && strip --strip-unneeded "$f"; done
cd - >/dev/null
du -sh "$work/site"                               # ~336 MB
tar -C "$work/site" -cf - . | xz -9e -T2 >"$work/site.tar.xz"   # ~114 MiB
# Parts of 40 MB: each travels in a call of its own beside the working tree (< 64 MiB).
rm -rf "$dest" && mkdir -p "$dest"
split -b 40000000 -d -a 1 "$work/site.tar.xz" "$work/site.part."
n=0
for part in "$work"/site.part.*; do n=$((n + 1)); mkdir -p "$dest/p$n"; mv "$part" "$dest/p$n/"; done
(cd "$work" && sha256sum site.tar.xz) >"$dest/p$n/site.sha256"
ls -la "$dest"/*
