#!/usr/bin/env bash
# Prepares the site directory that `vllm serve` (vLLM 0.26's OpenAI server) needs on the
# offline GPU machine beyond what scripts/vllm_carry/prepare.sh carries for the offline LLM
# path: bench/node (scripts/gpu_node.sh) carries it as DEST.
#   bash scripts/vllm_carry/prepare_serve.sh [DEST]     # DEST default: .vllmcarry/serve (git-ignored)
# Needs PyPI and unzip; a few seconds, ~3 MB.
#
# What the server imports (vllm.entrypoints.openai.api_server and build_app, checked with
# vLLM 0.26's files over an environment stripped of everything the image lacks): uvicorn
# (vllm/entrypoints/launcher.py), watchfiles (serve/utils/ssl.py),
# prometheus-fastapi-instrumentator (serve/instrumentator), model-hosting-container-standards
# (serve/sagemaker, serve/lora) and its jmespath and supervisor. Their other dependencies are
# on the image (click, h11, anyio, httpx, prometheus-client, setuptools, uvloop) or in the
# vLLM carry (fastapi, starlette, pydantic). The versions are those vLLM 0.26 accepts that the
# CPU test environment (.venv-vllm) runs.
set -euo pipefail
dest="${1:-.vllmcarry/serve}"
py="${PYTHON:-python3}"
# shellcheck source=../lib/gpu_wheels.sh
. "$(dirname "${BASH_SOURCE[0]}")/../lib/gpu_wheels.sh"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$py" -m pip download -q --no-deps "${gpu_wheel_args[@]}" -d "$work" \
  uvicorn==0.54.0 watchfiles==1.3.0 prometheus-fastapi-instrumentator==8.1.0 \
  model-hosting-container-standards==0.1.16 jmespath==1.1.0 supervisor==4.3.0
rm -rf "$dest" && mkdir -p "$dest"
for w in "$work"/*.whl; do unzip -q -o "$w" -d "$dest"; done
ls "$work"
du -sh "$dest"
