#!/usr/bin/env bash
# Configures and builds into build/ (or $KVSTRATA_BUILD_DIR): every target, or only the
# ones named in $KVSTRATA_BUILD_TARGETS (space-separated, e.g. "kvstratad kvstrata", what
# scripts/run.sh builds). Ninja prints its progress ([done/total] per step). Extra
# arguments go to CMake, e.g. -DKVSTRATA_SANITIZE=address.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${KVSTRATA_BUILD_DIR:-$repo/build}"
read -r -a targets <<<"${KVSTRATA_BUILD_TARGETS:-}"
echo "build: configuring $build (cmake)"
cmake -S "$repo" -B "$build" -G Ninja "$@" >/dev/null
echo "build: building ${targets[*]:-every target} with ninja -j $(nproc)"
ninja -C "$build" -j "$(nproc)" "${targets[@]}"
