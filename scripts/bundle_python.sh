#!/usr/bin/env bash
# Builds the kvstrata Python client wheel into .bundle/wheels/ for a GPU machine that has
# no network and no grpcio-tools (the build step runs protoc; the wheel is Python but for
# libkvstrata_copy.so, a C-ABI library any CPython loads with ctypes, hence a platform
# wheel, py3-none-linux_x86_64, and carries the compiled descriptor set, so it installs
# with --no-index --no-deps). Wheels to publish: scripts/build_wheels.sh (dist/, manylinux).
# Run it after scripts/bundle.sh, which recreates .bundle/.
#
#   scripts/bundle_python.sh                     # -> .bundle/wheels/kvstrata-*.whl
#   scripts/bundle_python.sh --with-transformers # also .whl/: transformers and its
#                                                # dependencies for CPython 3.12 x86_64
#                                                # (needs network here; used by
#                                                # bench/gpu/load_latency.py when present)
# Env: PYTHON (default .venv/bin/python, else python3).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-}"
if [[ -z "$python" ]]; then
  if [[ -x "$repo/.venv/bin/python" ]]; then python="$repo/.venv/bin/python"; else python=python3; fi
fi
with_transformers=0
for arg in "$@"; do
  case "$arg" in
    --with-transformers) with_transformers=1 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "bundle_python: unknown argument $arg" >&2; exit 2 ;;
  esac
done

wheels="$repo/.bundle/wheels"
rm -rf "$wheels"
mkdir -p "$wheels"
pip=("$python" -m pip --disable-pip-version-check -q)
if "$python" -c 'import grpc_tools, setuptools, wheel' >/dev/null 2>&1; then
  "${pip[@]}" wheel --no-deps --no-build-isolation -w "$wheels" "$repo/client/python"
else  # Build isolation fetches setuptools, wheel and grpcio-tools.
  "${pip[@]}" wheel --no-deps -w "$wheels" "$repo/client/python"
fi

shopt -s nullglob
built=("$wheels"/kvstrata-*.whl)
[[ ${#built[@]} -eq 1 ]] || { echo "bundle_python: expected one kvstrata wheel, got ${#built[@]}" >&2; exit 1; }
contents="$("$python" -m zipfile -l "${built[0]}")"
for member in kvstrata/_generated/kvstrata_v1.desc kvstrata/_generated/libkvstrata_copy.so \
    kvstrata/cuda.py kvstrata/jobs.py; do
  grep -q "$member" <<<"$contents" || { echo "bundle_python: $member missing from ${built[0]}" >&2; exit 1; }
done

if [[ $with_transformers -eq 1 ]]; then
  extra="$repo/.whl"
  rm -rf "$extra"
  mkdir -p "$extra"
  "${pip[@]}" download --only-binary=:all: --implementation cp --python-version 3.12 \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any -d "$extra" transformers
  # The GPU machine has these already; shadowing them from PYTHONPATH would be worse.
  rm -f "$extra"/numpy-*.whl "$extra"/torch-*.whl
  echo "bundle_python: $extra ($(du -sh "$extra" | cut -f1)): $(find "$extra" -name '*.whl' | wc -l) wheels"
fi
echo "bundle_python: ${built[0]}"
