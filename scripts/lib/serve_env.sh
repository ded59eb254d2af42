# Sourced by the device-call drivers that run `vllm serve` replicas (scripts/gpu_node.sh,
# bench/slow_disk/gpu.sh): the repository as the working directory ($repo), $out ($OUT, else
# gpu-out/, created), vLLM unpacked by calls 1-3 (scripts/vllm_carry/stage.sh), the serve
# site (.vllmcarry/serve, or /tmp/serve_stage staged by an earlier call), the bundle's client wheel installed into /tmp/kvsite, the
# connector (connector_vllm/) on PYTHONPATH, and the bundle's kvstratad and kvstrata CLI.
# Exits 3 when a carried part is missing, 4 when the wheel does not install.
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo" || exit 1
out="${OUT:-$repo/gpu-out}"
mkdir -p "$out"
# shellcheck source=../vllm_carry/stage.sh
source scripts/vllm_carry/stage.sh || { echo "vLLM parts missing: run calls 1-3 first"; exit 3; }
# The serve site travels in the call (.vllmcarry/serve) or was staged into /tmp/serve_stage by
# an earlier call on the same warm machine: .bundle, .vllmcarry/serve and the tree together
# pass the 64 MiB carry (the object tier's libcurl brought GnuTLS and Kerberos into the bundle),
# so a session carries .vllmcarry/serve once, in a call of its own:
#   carry [".vllmcarry/serve"]:  bash scripts/vllm_carry/stage_serve.sh
serve_site="$repo/.vllmcarry/serve"
if [ -d "$serve_site/uvicorn" ]; then
  rm -rf /tmp/serve_stage && cp -a "$serve_site" /tmp/serve_stage
elif [ -d /tmp/serve_stage/uvicorn ]; then
  serve_site=/tmp/serve_stage
else
  echo ".vllmcarry/serve missing: carry it (prepare_serve.sh), or stage it first (stage_serve.sh)"; exit 3
fi
site=/tmp/kvsite
rm -rf "$site" && mkdir -p "$site"
python3 -m pip install -q --disable-pip-version-check --no-index --no-deps --target "$site" \
  .bundle/wheels/kvstrata-*.whl || exit 4
export PYTHONPATH="$serve_site:$site:$repo/connector_vllm:${PYTHONPATH:-}"
export KVSTRATA_DAEMON="$repo/.bundle/bin/kvstratad" KVSTRATA_CLI="$repo/.bundle/bin/kvstrata"
