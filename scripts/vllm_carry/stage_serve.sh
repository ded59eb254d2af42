#!/usr/bin/env bash
# On the GPU machine, carry [".vllmcarry/serve"]: copies the serve site (what `vllm serve`
# needs beyond the offline engine; scripts/vllm_carry/prepare_serve.sh) to /tmp/serve_stage,
# where scripts/lib/serve_env.sh finds it in later calls that carry only .bundle (the two
# together with the tree pass a call's 64 MiB). /tmp lasts while the machine stays warm.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
[ -d .vllmcarry/serve/uvicorn ] || { echo "stage_serve: .vllmcarry/serve not carried" >&2; exit 3; }
rm -rf /tmp/serve_stage && cp -a .vllmcarry/serve /tmp/serve_stage
echo "stage_serve: /tmp/serve_stage ($(du -sh /tmp/serve_stage | cut -f1))"
