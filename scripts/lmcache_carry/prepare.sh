#!/usr/bin/env bash
# Prepares LMCache 0.5.3 (multiprocess "MP" server + its vLLM connector) for the offline GPU
# machine (Python 3.12, torch 2.11.0+cu130 preinstalled, vLLM 0.26.0 carried by
# scripts/vllm_carry) as one xz'd site directory, split into carry folders of <= 40 MB.
#   bash scripts/lmcache_carry/prepare.sh [DEST]     # DEST default: .lmcachecarry (git-ignored)
# Needs PyPI, unzip, xz, strip. ~1 min on 2 cores. Result today: one part, ~10 MB.
#
# Why 0.5.3: it is the newest LMCache release whose extensions were built against torch
# 2.11.0 (its sdist's pyproject.toml: build-system requires "torch==2.11.0", CUDA 13.0
# builder image) and link libcudart.so.13. 0.5.4-0.5.6 were built against a newer torch:
# their cuda_ops.*.so needs c10::NotImplementedError::NotImplementedError(c10::SourceLocation,
# std::string), which torch 2.11's libc10.so does not export (undefined symbol at import).
# See bench/node/LMCACHE.md for the evidence.
#
# On the GPU machine, bench/node/lmcache_role.py stages the part(s) into /tmp/lmcache_site
# (or: bash scripts/lmcache_carry/stage.sh).
set -euo pipefail
dest="${1:-.lmcachecarry}"
work="${LMCACHE_CARRY_WORK:-$(mktemp -d)}"
py="${PYTHON:-python3}"
# shellcheck source=../lib/gpu_wheels.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/gpu_wheels.sh"
mkdir -p "$work/whl"
# LMCache itself (16 MB wheel, cp312 manylinux_2_28), checked against the hash seen on
# 2026-11-27 so a re-uploaded wheel is noticed.
"$py" -m pip download -q --no-deps "${gpu_wheel_args[@]}" -d "$work/whl" lmcache==0.5.3
echo "e7adfc5b4113e0bd626c692afbfe84c07abf895ab14638409f3ee426ce9bd288  $(ls "$work"/whl/lmcache-0.5.3-*.whl)" |
  sha256sum -c --quiet
# What the server and the connector import that the GPU image lacks (the image has torch,
# numpy, numba, transformers, aiohttp, anyio, httpx, psutil, pyyaml, prometheus-client,
# protobuf, sortedcontainers, safetensors, py-cpuinfo, requests, click, h11, zipp, ...).
# Versions shared with scripts/vllm_carry/prepare.sh are the same pins, so putting both
# sites on PYTHONPATH, in either order, loads the same code. Found by importing the server
# (python -m lmcache.v1.multiprocess.http_server) and the connector module under torch 2.11
# on Python 3.12 until no ModuleNotFoundError was left. opentelemetry-api <= 1.40 is
# LMCache's pin; importlib-metadata < 8.8 is opentelemetry-api 1.40's.
"$py" -m pip download -q --no-deps "${gpu_wheel_args[@]}" -d "$work/whl" \
  pyzmq==27.3.0 msgspec==0.22.0 blake3==1.0.11 cachetools==8.0.1 nvtx==0.2.15 \
  pydantic==2.14.3 pydantic-core==2.50.4 annotated-types==0.8.0 typing-inspection==0.4.5 \
  typing-extensions==4.16.0 fastapi==0.136.3 starlette==1.10.0 annotated-doc==0.0.7 \
  uvicorn==0.54.0 cryptography==50.0.2 cffi==2.1.1 pycparser==3.12 \
  opentelemetry-api==1.40.0 opentelemetry-sdk==1.40.0 opentelemetry-semantic-conventions==0.61b0 \
  opentelemetry-exporter-prometheus==0.61b0 importlib-metadata==8.7.1
# One site directory: wheels are zip files.
rm -rf "$work/site" && mkdir -p "$work/site"
for w in "$work"/whl/*.whl; do unzip -q -o "$w" -d "$work/site"; done
# Debug info only (c_ops.so 40 MB -> 20 MB); the CUDA fat binary (sm_75..sm_120) stays.
for f in "$work"/site/lmcache/*.so; do strip --strip-unneeded "$f"; done
rm -rf "$work"/site/lmcache/integration/vllm/tests
du -sh "$work/site"                                        # ~64 MB
tar -C "$work/site" -cf - . | xz -9 -T2 >"$work/site.tar.xz"
rm -rf "$dest" && mkdir -p "$dest"
split -b 40000000 -d -a 1 "$work/site.tar.xz" "$work/site.part."
n=0
for part in "$work"/site.part.*; do n=$((n + 1)); mkdir -p "$dest/p$n"; mv "$part" "$dest/p$n/"; done
(cd "$work" && sha256sum site.tar.xz) >"$dest/p$n/site.sha256"
ls -la "$dest"/*
[ -n "${LMCACHE_CARRY_WORK:-}" ] || rm -rf "$work"
