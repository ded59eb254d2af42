#!/usr/bin/env bash
# Makes the SGLang releases of scripts/sglang_versions.txt other than the pin (WHERE wheel)
# ready to run over .venv-sglang (made first by scripts/setup_sglang.sh, which calls this):
#   .sglang-matrix/VERSION/      the release wheel, pip install --no-deps --no-compile
#                                --target (~100 MB each; Python compiles what the tests
#                                import on their first run)
#   .sglang-matrix/deps-NAME/    connector_sglang/requirements-sglang-overlay-NAME.txt, the
#                                packages some releases need in other versions than
#                                .venv-sglang's, made once and shared by every version naming
#                                it (transformers, tokenizers, openai, ...: ~40 MB downloaded)
# Each directory goes to a temporary one first, so a failed download never leaves a
# half-made one; each is remade only when its wheel version / requirements file changed.
# The wheels come from pip's cache when it has them (one download per machine).
#
#   bash scripts/setup_sglang_matrix.sh
#   PYTHONPATH=$PWD/.sglang-matrix/0.5.20:$PWD/.sglang-matrix/deps-transformers-5.12 \
#     .venv-sglang/bin/python -m pytest tests/integration/sglang
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${KVSTRATA_SGLANG_VENV:-$repo/.venv-sglang}"
matrix="${KVSTRATA_SGLANG_MATRIX_DIR:-$repo/.sglang-matrix}"
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
step() { echo "setup_sglang_matrix: $*"; }

# fill DIR STAMP PIP_ARGS...: pip install --no-deps --target DIR unless DIR/.kvstrata-stamp
# already holds STAMP.
fill() {
  local dir="$1" stamp="$2"
  shift 2
  if [ "$(cat "$dir/.kvstrata-stamp" 2>/dev/null)" = "$stamp" ]; then
    step "$dir already made ($stamp)"
    return
  fi
  step "installing $* into $dir (--no-deps --target)"
  rm -rf "$dir.tmp"
  "${pip[@]}" install --no-deps --no-compile --target "$dir.tmp" "$@"
  printf '%s\n' "$stamp" >"$dir.tmp/.kvstrata-stamp"
  rm -rf "$dir"
  mv "$dir.tmp" "$dir"
}

mkdir -p "$matrix"
declare -A made=()
while read -r version where deps _; do
  [ "$where" = wheel ] || continue
  fill "$matrix/$version" "sglang==$version" "sglang==$version"
  if [ "$deps" != - ] && [ -z "${made[$deps]:-}" ]; then
    req="$repo/connector_sglang/requirements-sglang-overlay-$deps.txt"
    fill "$matrix/deps-$deps" "$(sha256sum "$req" | cut -d' ' -f1)" -r "$req"
    made[$deps]=1
  fi
done < <(grep -v '^#' "$repo/scripts/sglang_versions.txt")
