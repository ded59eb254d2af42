#!/usr/bin/env bash
# Prepares an SGLang 0.5.17 site directory for the offline GPU machine (Python 3.12, torch
# 2.11.0+cu130, transformers 5.17 already there) and splits it into carry folders of
# < 60 MiB each (DEST/p1, DEST/p2, ...).
#   bash scripts/sglang_carry/prepare.sh [DEST]     # DEST default: .sglcarry (git-ignored)
# Needs PyPI, unzip, xz, strip. What is carried and why:
# - sglang 0.5.17 (pins torch 2.11.0, the GPU machine's) and the packages its server path
#   imports that the GPU image lacks; transformers 5.12.1 and tokenizers 0.22.2 because
#   sglang 0.5.17 fails at import with the image's transformers 5.17 (it registers
#   `qwen3_asr`, which 5.17 already has) and transformers 5.12.1 refuses tokenizers > 0.23.0.
# - sglang-kernel 0.4.5 (its 383 MB wheel is 1.2 GB unpacked) without what a Llama engine on
#   Hopper with the Triton attention backend never loads: flash_ops (FlashAttention 3,
#   1.1 GB), the sm100 build, FlashMLA and InfLLM. The benchmark runs SGLang with
#   --attention-backend triton --sampling-backend pytorch, so no FA3 and no flashinfer JIT.
# - flashinfer-python: imported by SGLang's CUDA paths; its headers serve SGLang's JIT
#   kernels. bench/sglang_gpu/engine.py keeps sgl_kernel off flashinfer's JIT RMSNorm.
set -euo pipefail
dest="${1:-.sglcarry}"
work="${SGLANG_CARRY_WORK:-$(mktemp -d)}"
py="${PYTHON:-python3}"
# shellcheck source=../lib/gpu_wheels.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/gpu_wheels.sh"
mkdir -p "$work/whl"
"$py" -m pip download -q --no-deps "${gpu_wheel_args[@]}" -d "$work/whl" \
  sglang==0.5.17 sglang-kernel==0.4.5 flashinfer-python==0.6.15.post1 apache-tvm-ffi==0.1.11 \
  transformers==5.12.1 tokenizers==0.22.2 xgrammar==0.2.1 openai==2.6.1 \
  orjson==3.13.0 pybase64==1.5.1 starlette==1.10.0 fastapi==0.136.3 uvicorn==0.54.0 \
  pyzmq==27.3.0 dill==0.4.1 msgspec==0.22.0 jiter==0.19.0 distro==1.9.0 sniffio==1.3.1 \
  partial-json-parser==0.2.1.1.post7 compressed-tensors==0.20.0 gguf==0.19.0 \
  setproctitle==1.3.8 pydantic==2.14.3 pydantic-core==2.50.4 annotated-types==0.8.0 \
  typing-inspection==0.4.5 loguru==0.7.3 \
  ipython==9.18.1 ipython-pygments-lexers==1.1.1 asttokens==3.0.2 executing==2.3.0 \
  jedi==0.20.1 parso==0.8.7 matplotlib-inline==0.2.2 traitlets==5.16.1 pexpect==4.9.0 \
  ptyprocess==0.7.0 prompt-toolkit==3.0.53 wcwidth==0.9.4 pure-eval==0.2.4 stack-data==0.6.3 \
  decorator==5.2.1
rm -rf "$work/site" && mkdir -p "$work/site"
for w in "$work"/whl/*.whl; do
  case "$w" in
    */sglang_kernel-*) unzip -q -o "$w" -d "$work/site" -x 'sgl_kernel/flash_ops.abi3.so' \
      'sgl_kernel/sm100/*' 'sgl_kernel/flashmla_ops.abi3.so' 'sgl_kernel/infllm_ops*' ;;
    *) unzip -q -o "$w" -d "$work/site" ;;
  esac
done
cd "$work/site"
# Multimodal and gRPC front ends (native extensions an offline text engine never loads).
rm -f sglang/srt/grpc/_core.*.so sglang/srt/multimodal/_core.*.so
# Build-time material: xgrammar's static library, jedi's bundled typeshed. flashinfer/data
# (CUTLASS, CCCL, spdlog and flashinfer's headers and sources) stays: SGLang 0.5.17
# JIT-compiles its own kernels (rope, activation, KV stores) on first use, some against
# those headers.
rm -rf xgrammar/lib jedi/third_party/typeshed
find . -name '*.so' -exec strip --strip-unneeded {} + 2>/dev/null || true
find . -name __pycache__ -prune -exec rm -rf {} +
cd - >/dev/null
du -sh "$work/site"
tar -C "$work/site" -cf - . | xz -9e -T2 >"$work/site.tar.xz"
ls -la "$work/site.tar.xz"
rm -rf "$dest" && mkdir -p "$dest"
split -b 59600000 -d -a 1 "$work/site.tar.xz" "$work/site.part."
n=0
for part in "$work"/site.part.*; do
  n=$((n + 1)); mkdir -p "$dest/p$n" && mv "$part" "$dest/p$n/"
done
(cd "$work" && sha256sum site.tar.xz) >"$dest/p$n/site.sha256"
echo "$n" >"$dest/p$n/parts"
ls -la "$dest"/*
