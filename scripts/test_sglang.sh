#!/usr/bin/env bash
# The SGLang connector's tests (tests/integration/sglang: SGLang's real host KV pools and
# cache controllers, the engine-symbol drift check) on every SGLang of
# scripts/sglang_versions.txt, or on the versions named: the pin with .venv-sglang's own
# sglang, every other release with its .sglang-matrix directories on PYTHONPATH in front of
# .venv-sglang (scripts/setup_sglang.sh makes both). Called by scripts/test.sh.
#
#   KVSTRATA_DAEMON=build/daemon/server/kvstratad bash scripts/test_sglang.sh [VERSION...]
#
# KVSTRATA_SGLANG_JOBS versions run at once (default 2: each run is mostly Python imports,
# about 60 % of one core); each one's output is printed whole, in the list's order. Exits 1
# when a version fails that the list does not mark `fails: WHY`, or one so marked passes.
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${KVSTRATA_SGLANG_VENV:-$repo/.venv-sglang}"
matrix="${KVSTRATA_SGLANG_MATRIX_DIR:-$repo/.sglang-matrix}"
jobs="${KVSTRATA_SGLANG_JOBS:-2}"
# shellcheck source=lib/suites.sh
. "$repo/scripts/lib/suites.sh"
suite_init "$jobs"

# suite VERSION WHERE DEPS: the suite on that SGLang.
suite() {
  local version="$1" where="$2" deps="$3" path=""
  if [ "$where" = wheel ]; then
    path="$matrix/$version"
    [ "$deps" = - ] || path="$path:$matrix/deps-$deps"
  fi
  [ -z "${PYTHONPATH:-}" ] || path="${path:+$path:}$PYTHONPATH"
  PYTHONPATH="$path" KVSTRATA_SGLANG_VERSION="$version" \
    "$venv/bin/python" -m pytest -q "$repo/tests/integration/sglang"
}

lines=()
while read -r version where deps rest; do
  if [ $# -gt 0 ] && ! printf '%s\n' "$@" | grep -qxF "$version"; then
    continue
  fi
  lines+=("$version|$rest")
  suite_start "$version" \
    "test_sglang: starting SGLang $version ($where$([ "$deps" = - ] || echo ", deps-$deps"))" \
    suite "$version" "$where" "$deps"
done < <(grep -v '^#' "$repo/scripts/sglang_versions.txt")
suite_wait

status=0
for line in "${lines[@]}"; do
  version="${line%%|*}"
  suite_report "$version" "SGLang connector tests on SGLang $version" "${line#*|}" || status=1
done
[ ${#lines[@]} -gt 0 ] || { echo "test_sglang: no such version in scripts/sglang_versions.txt: $*" >&2; status=1; }
exit $status
