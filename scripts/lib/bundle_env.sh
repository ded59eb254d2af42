# Sourced by the device-call drivers in bench/gpu (run_engine_jobs.sh, run_node_loads.sh):
# the repository as the working directory ($repo), $out ($OUT, else gpu-out/, created), and
# the carried bundle's daemon with a site for its client wheel on PYTHONPATH
# (scripts/gpu_run.sh --install-python installs it there).
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo" || exit 1
out="${OUT:-$repo/gpu-out}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1 KVSTRATA_SITE="${KVSTRATA_SITE:-/tmp/kvsite}"
export PYTHONPATH="$KVSTRATA_SITE${PYTHONPATH:+:$PYTHONPATH}"
export KVSTRATA_DAEMON="$repo/.bundle/bin/kvstratad"
